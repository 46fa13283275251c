"""The interop matrix live (netns, issue 36 part 6), trimmed: `type: dtn` with `agents: [dtn7, hardy]` over TCPCLv4
at 0 s, 100 kB bundles: every ordered pair (dtn7 -> dtn7, dtn7 -> hardy, hardy -> dtn7, hardy -> hardy) delivers
10 of 10 with no duplicate, and the report draws the matrix (its table and figure; the udp cell that cannot carry
100 kB listed as not run, without running). The full matrix: experiments/dtn-interop-matrix.yaml. Also: `eid: ipn`
with a dtn:// static peer is refused with one line, exit 2, nothing started. Subnets from tests/alloc.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from alloc import nets, octets
from conftest import REPO, csv_rows, run_dtn_doc, swarm_namespaces

NET = octets(__file__)
pytestmark = [pytest.mark.root, pytest.mark.slow]
PAIRS = {("dtn7", "dtn7"), ("dtn7", "hardy"), ("hardy", "dtn7"), ("hardy", "hardy")}


def test_every_pair_of_agents_delivers_every_bundle_once_and_the_report_draws_the_matrix(need_dtn7, need_hardy,
                                                                                        tmp_path):
    run = run_dtn_doc({"type": "dtn", "name": "dtn-it-matrix", "backend": "netns", "agents": ["dtn7", "hardy"],
                       "clas": ["tcp", "udp"], "pattern": "chain", "sizes": [1], "bundle_sizes": ["100kB"],
                       "rates": [10], "duration": "1s", "drain": "20s", "swarm": {"networks": nets(NET[0])}},
                      tmp_path)
    tests = csv_rows(run / "tests.csv")
    assert {(t["src_agent"], t["dst_agent"]) for t in tests} == PAIRS and len(tests) == 4
    for t in tests:
        assert (t["cla"], t["bundles_sent"], t["bundles_delivered"], t["duplicates"]) == ("tcp", "10", "10", "0"), t
        assert float(t["goodput_bps"]) > 0 and float(t["latency_p95_s"]) < 5 and t["failure"] == "", t
    assert csv_rows(run / "matrix_gaps.csv") == [{"src_agent": "dtn7", "dst_agent": "dtn7", "cla": "udp",
                                                  "bundle_size": "100000",
                                                  "reason": "bundle 100000 B larger than the udp CLA carries (65507 B)"}]
    from analysis.dtn import write_dtn_report
    write_dtn_report(run)
    matrix = csv_rows(run / "report" / "matrix.csv")
    assert sorted(r["delivered"] for r in matrix) == ["10/10"] * 4 + ["not run"]
    html = (run / "report" / "report.html").read_text()
    assert "Interop matrix" in html and "data:image/png;base64," in html and (run / "report" / "matrix.png").stat().st_size


def test_ipn_with_a_dtn_static_peer_is_refused_before_anything_starts(need_netns, tmp_path):
    spec = tmp_path / "bad.yaml"
    net = nets(NET[0])
    spec.write_text(f"name: dtn-it-badeid\nbackend: netns\ndefaults: {{dtn: {{eid: ipn}}}}\n"
                    "node_list: [{name: sat01, dtn: {eid: ipn, static_peers: ['dtn://sat02/']}}, {name: sat02}]\n"
                    f"networks: {{isl: {{subnet: {net['isl']['subnet']}}}, ground: {{subnet: {net['ground']['subnet']}}}}}\n")
    res = subprocess.run([sys.executable, "-m", "swarm", "up", str(spec)], capture_output=True, text=True,
                         env={**os.environ, "SWARM_WORKDIR": str(REPO)}, timeout=120)
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "dtn.static_peers 'dtn://sat02/': a dtn endpoint, but dtn.eid is 'ipn'" in lines[0]
    assert not swarm_namespaces("dtn-it-badeid") and not (REPO / ".swarm" / "dtn-it-badeid").exists()
