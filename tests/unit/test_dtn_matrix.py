"""The interop matrix (issue 36 part 6): `type: dtn` with `agents`, planned from the agent registry (every ordered
pair x every CLA both carry, cells a CLA cannot carry listed, not run), the pair's agents on the nodes, what failed
in the peers' own log lines, and the report's matrix table and figure (pure)."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis.dtn import matrix_figure, matrix_table
from experiments.dtn.model import experiment_from_dict
from experiments.dtn.parse import first_failure
from swarm.dtn.agents import REGISTRY
from swarm.errors import SpecError

BASE = {"type": "dtn", "name": "mx", "pattern": "chain", "sizes": [1], "rates": [10], "duration": "1s",
        "bundle_sizes": ["1kB", "100kB"], "profiles": ["none", {"delay": "2s"}], "dtn": {"ltp": {"rate": "100Mbit"}}}


def test_every_ordered_pair_runs_every_cla_both_carry_and_oversized_cells_are_gaps():
    exp = experiment_from_dict({**BASE, "agents": ["dtn7", "hardy"]})
    tests = exp.tests()
    cells = {(t.src_agent, t.dst_agent, t.cla) for t in tests}
    both = lambda a, b: [c for c in REGISTRY[a].clas if c in REGISTRY[b].clas]  # noqa: E731
    assert cells == {(a, b, c) for a in ("dtn7", "hardy") for b in ("dtn7", "hardy") for c in both(a, b)}
    assert ("hardy", "dtn7", "ltp") not in cells and ("dtn7", "dtn7", "ltp") in cells
    assert not [t for t in tests if t.cla == "udp" and t.bundle_size == 100_000]
    assert exp.matrix_gaps() == [{"src_agent": "dtn7", "dst_agent": "dtn7", "cla": "udp", "bundle_size": 100_000,
                                  "reason": "bundle 100000 B larger than the udp CLA carries (65507 B)"}]
    assert len(tests) == 30 and tests[0].test_id == "dtn7-dtn7-n1-tcp-epidemic-none-1000B-10ps-r1"


def test_the_pair_runs_on_the_nodes_source_first():
    exp = experiment_from_dict({**BASE, "agents": ["dtn7", "hardy"], "clas": ["tcp"]})
    test = next(t for t in exp.tests() if (t.src_agent, t.dst_agent) == ("hardy", "dtn7"))
    nodes = {n.name: n.dtn for n in exp.swarm_spec(test).resolved_nodes()}
    assert (nodes["sat01"].agent, nodes["ground"].agent) == ("hardy", "dtn7")
    assert nodes["sat01"].static_peers == ["ground"]


def test_clas_narrow_the_matrix():
    exp = experiment_from_dict({**BASE, "agents": ["dtn7", "hardy"], "clas": ["tcp", "ltp"]})
    assert {t.cla for t in exp.tests() if t.src_agent == "hardy" or t.dst_agent == "hardy"} == {"tcp"}
    assert {t.cla for t in exp.tests()} == {"tcp", "ltp"}


@pytest.mark.parametrize("doc, message", [
    ({"agents": ["dtn7", "ion9"]}, "agents 'ion9': unknown agent (known: dtn7, hardy"),
    ({"agents": ["dtn7", "dtn7"]}, "agents 'dtn7': named twice"),
    ({"agents": ["hardy"], "clas": ["ltp"]}, "agents ['hardy']: no pair of them carries any of clas ['ltp']"),
    ({"agents": ["dtn7", "hardy"], "dtn": {"agent": "hardy"}}, "dtn.agent: set by the experiment (agents)"),
])
def test_bad_matrix_input_is_one_line(doc, message):
    with pytest.raises(SpecError) as err:
        experiment_from_dict({**BASE, **doc})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_what_failed_is_the_first_failure_line_of_the_receiver_since_the_release():
    dtnd = ("2026-11-26T10:00:00.000Z WARN  dtn7::cla > old trouble\n"
            "2026-11-26T10:00:05.000Z INFO  dtn7::core > fine\n"
            "2026-11-26T10:00:06.500Z ERROR dtn7::cla::tcp > connect timeout to 10.0.0.3:4556\n")
    t_error = REGISTRY["dtn7"].failure_lines(dtnd)[1][0]
    hardy = f"{t_error - 10:.1f} ready dtn://ground/\n{t_error + 1:.1f} failed bytes=100 to=tcp:10.0.0.2:4556\n"
    lines = {"sat01": REGISTRY["dtn7"].failure_lines(dtnd), "ground": REGISTRY["hardy"].failure_lines(hardy)}
    assert [line for _, line in lines["sat01"]] == [dtnd.splitlines()[0], dtnd.splitlines()[2]]
    release = lines["sat01"][1][0] - 1  # after the old WARN
    assert first_failure(lines, ["ground", "sat01"], release) == f"ground: {hardy.splitlines()[1]}"
    assert first_failure(lines, ["sat01", "ground"], release) == f"sat01: {dtnd.splitlines()[2]}"
    assert first_failure({"sat01": lines["sat01"]}, ["sat01"], 2e9) == ""


def test_the_report_draws_the_matrix(tmp_path):
    rows = []
    for a in ("dtn7", "hardy"):
        for b in ("dtn7", "hardy"):
            for profile in ("none", "delay=2s"):
                lost = a == "hardy" and b == "dtn7" and profile != "none"
                rows.append({"test_id": f"{a}-{b}-{profile}", "src_agent": a, "dst_agent": b, "cla": "tcp",
                             "profile": profile, "bundle_size": 100_000, "bundles_sent": 10,
                             "bundles_delivered": 7 if lost else 10, "duplicates": 1 if lost else 0,
                             "goodput_bps": 8e6, "latency_p50_s": 0.02, "latency_p95_s": 0.03,
                             "failure": "ground: 1795600010.0 failed bytes=100" if lost else float("nan")})
    tests = pd.DataFrame(rows)
    gaps = pd.DataFrame([{"src_agent": "dtn7", "dst_agent": "dtn7", "cla": "udp", "bundle_size": 100000,
                          "reason": "bundle 100000 B larger than the udp CLA carries (65507 B)"}])
    table = matrix_table(tests, gaps)
    assert len(table) == 9 and list(table["delivered"]).count("10/10") == 7
    bad = table[table["delivered"] == "7/10"].iloc[0]
    assert (bad["from"], bad["to"], bad["one-way s"], bad["dups"]) == ("hardy", "dtn7", 2.0, 1)
    assert bad["what failed (the peer's log)"] == "ground: 1795600010.0 failed bytes=100"
    assert table.iloc[-1]["delivered"] == "not run" and "udp CLA" in table.iloc[-1]["what failed (the peer's log)"]
    path, caption = matrix_figure(tests, gaps, tmp_path / "matrix.png")
    assert path.stat().st_size > 1000 and "Grey: not run" in caption
