"""DTN agents live (netns backend, real dtnd 0.21.0 from `make setup`): a 3-node relay chain delivers every
bundle; a contact gap (cut, then heal) delays bundles but loses none; `swarm dtn` by hand; bad input stops
before anything exists; nothing is left behind. Subnets from tests/alloc.py, swarm names dtn-* (issue 13's range)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from netem.engines import choose_engine
from swarm.runtime.probe import capabilities
from conftest import REPO, assert_run_refused, csv_rows as _rows, run_dtn_doc as _run, swarm_namespaces as _namespaces
from alloc import nets, nets_yaml, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]
SWARM = [sys.executable, "-m", "swarm"]


def test_three_node_chain_delivers_every_bundle(need_dtn7, tmp_path):
    run = _run({"type": "dtn", "name": "dtn-it-chain", "backend": "netns", "pattern": "chain", "sizes": [2],
                "bundle_sizes": ["10kB"], "rates": [10], "duration": "3s", "drain": "20s",
                "swarm": {"networks": nets(NET[0])}},
               tmp_path)
    bundles = _rows(run / "bundles.csv")
    assert len(bundles) == 30
    assert all(b["delivered"] == "True" for b in bundles), [b for b in bundles if b["delivered"] != "True"][:3]
    assert {b["hops"] for b in bundles} == {"2"}  # sat01 -> sat02 -> ground
    assert {(b["src"], b["dst"]) for b in bundles} == {("sat01", "ground")}
    test = _rows(run / "tests.csv")[0]
    assert float(test["delivery_ratio"]) == 1.0 and float(test["latency_p95_s"]) < 2.0
    raw = run / "raw" / test["test_id"]
    assert {p.name for p in raw.iterdir()} >= {"sat01.dtnd.log", "sat02.dtnd.log", "ground.dtnd.log",
                                                "sat01.traffic.jsonl", "ground.traffic.jsonl"}
    assert "Delivering dtn://sat01/" in (raw / "ground.dtnd.log").read_text()


def test_contact_gap_delays_but_loses_nothing(need_dtn7, tmp_path):
    plan = ("a contact +0 +60 sat01 sat02 125000000\na contact +0 +60 sat02 sat01 125000000\n"
            "a contact +0 +2 sat02 ground 125000000\na contact +0 +2 ground sat02 125000000\n"
            "a contact +6 +60 sat02 ground 125000000\na contact +6 +60 ground sat02 125000000\n")
    run = _run({"type": "dtn", "name": "dtn-it-gap", "backend": "netns", "pattern": "chain", "sizes": [2],
                "bundle_sizes": ["5kB"], "rates": [5], "duration": "8s", "drain": "40s",
                "contacts": {"text": plan, "others": "down"}, "ip_probe": True,
                "swarm": {"networks": nets(NET[1])}},
               tmp_path)
    bundles = _rows(run / "bundles.csv")
    assert len(bundles) == 40 and all(b["delivered"] == "True" for b in bundles)
    faults = _rows(run / "faults.csv")
    # a change takes effect while it is being applied: between applied_ts - took_s and applied_ts
    heal = next(float(f["applied_ts"]) - float(f["took_s"]) for f in faults if f["kind"] == "heal")
    cut = next(float(f["applied_ts"]) for f in faults if f["kind"] == "cut" and f["args"] == "ground sat02")
    in_gap = [b for b in bundles if cut + 0.2 < float(b["created_ts"]) < heal - 0.2]
    assert in_gap, "no bundle was created during the gap"
    assert all(float(b["delivered_ts"]) >= heal for b in in_gap)  # stored at sat02 until the contact returned
    assert max(float(b["latency_s"]) for b in in_gap) > 2.0
    ip = _rows(run / "ip.csv")
    lost = sum(int(r["lost"]) for r in ip if r["src"] == "sat02" and r["dst"] == "ground")
    assert lost > 0  # plain IP over the same hop lost what was sent in the gap
    stored = [int(r["bundles"]) for r in _rows(run / "store.csv") if r["node"] == "sat02"]
    assert max(stored) >= 5  # sat02 held the gap's bundles


def test_lunar_link_latency_is_at_least_the_light_time(need_dtn7, tmp_path):
    engine = choose_engine(capabilities())
    if "delay" not in engine.supported():
        pytest.skip(f"no impairment engine here can delay (chosen: {engine.name}; needs sch_netem or a userspace engine)")
    run = _run({"type": "dtn", "name": "dtn-it-lunar", "backend": "netns", "pattern": "all-to-ground", "sizes": [1],
                "bundle_sizes": ["10kB"], "rates": [0.5], "duration": "6s", "drain": "60s", "profiles": ["lunar-relay"],
                "swarm": {"networks": nets(NET[3])}},
               tmp_path)
    bundles = _rows(run / "bundles.csv")
    assert len(bundles) == 3 and all(b["delivered"] == "True" for b in bundles), bundles
    # TCPCLv4 over a 2.6 s round trip: the session setup, then one bundle per acknowledged transfer
    assert min(float(b["latency_s"]) for b in bundles) >= 1.3


def test_compose_chain_delivers_every_bundle(need_docker, need_dtn7, tmp_path):
    run = _run({"type": "dtn", "name": "dtn-it-compose", "backend": "compose", "pattern": "chain", "sizes": [2],
                "bundle_sizes": ["10kB"], "rates": [5], "duration": "2s", "drain": "20s",
                "swarm": {"networks": nets(NET[4])}},
               tmp_path)
    bundles = _rows(run / "bundles.csv")
    assert len(bundles) == 10 and all(b["delivered"] == "True" and b["hops"] == "2" for b in bundles)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=io.swarm-emu.swarm=dtn-it-compose"],
                          capture_output=True, text=True).stdout.split()
    assert not left


def test_swarm_dtn_by_hand_and_down_leaves_nothing(need_dtn7, tmp_path):
    spec = tmp_path / "dtn-it-hand.yaml"
    spec.write_text("name: dtn-it-hand\nbackend: netns\nnodes: 3\n"
                    f"{nets_yaml(NET[2])}\n"
                    "defaults: {dtn: {cla: mtcp, routing: epidemic}}\n")
    env = {**os.environ, "SWARM_WORKDIR": str(REPO)}
    try:
        up = subprocess.run(SWARM + ["up", str(spec)], capture_output=True, text=True, env=env, timeout=180)
        assert up.returncode == 0, up.stderr
        st = subprocess.run(SWARM + ["dtn", "dtn-it-hand", "--json"], capture_output=True, text=True, env=env)
        assert st.returncode == 0, st.stderr
        rows = json.loads(st.stdout)
        assert [r["node"] for r in rows] == ["sat01", "sat02", "sat03"]
        assert rows[0]["peers"] == ["sat02", "sat03"] and rows[0]["cla"] == "mtcp" and rows[0]["eid"] == "dtn://sat01/"
        sent = subprocess.run(SWARM + ["dtn", "send", "dtn-it-hand", "sat01", "sat03", "hello sat03"],
                              capture_output=True, text=True, env=env)
        assert sent.returncode == 0 and "bundle dtn://sat01/-" in sent.stdout, sent.stderr
        got = subprocess.run(SWARM + ["dtn", "recv", "dtn-it-hand", "sat03", "--timeout", "10"],
                             capture_output=True, text=True, env=env)
        assert got.returncode == 0, got.stdout + got.stderr
        bundle = json.loads(got.stdout)
        assert bundle["payload"] == "hello sat03" and bundle["src"] == "dtn://sat01/"
        empty = subprocess.run(SWARM + ["dtn", "recv", "dtn-it-hand", "sat03", "--timeout", "1"],
                               capture_output=True, text=True, env=env)
        assert empty.returncode == 1 and "nothing received" in empty.stdout
        bad = subprocess.run(SWARM + ["dtn", "send", "dtn-it-hand", "sat01", "sat09", "x"], capture_output=True,
                             text=True, env=env)
        assert bad.returncode == 2 and "sat09" in bad.stderr
    finally:
        down = subprocess.run(SWARM + ["down", "dtn-it-hand"], capture_output=True, text=True, env=env, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not _namespaces("dtn-it-hand")
    dtnds = subprocess.run(["pgrep", "-af", "dtnd -n sat0"], capture_output=True, text=True).stdout
    assert "dtn-it-hand" not in dtnds and not (REPO / ".swarm" / "dtn-it-hand").exists()


@pytest.mark.parametrize("doc, message", [
    ({"dtn": {"storage": {"limit": "50kB"}}}, "bundle_sizes 100000: larger than the storage limit (50000 bytes)"),
    ({"clas": ["bibe"]}, "clas 'bibe': unknown convergence layer"),
    ({"routings": ["prophet"]}, "routings 'prophet': unknown routing"),
    ({"clas": ["udp"]}, "larger than one UDP datagram (65507 bytes)"),
    ({"contacts": {"text": "a contact +0 +10 sat01 sat02 100\na contact +5 +1 sat02 ground 100\n"}},
     "contacts.text line 2: until '+1' is not after from '+5'"),
    ({"contacts": {"text": "a contact +0 +10 sat01 mars 100\n"}}, "line 1: node 'mars': no such node"),
    ({"faults": [{"at": "2s", "cut": ["sat01", "venus"]}]}, "node 'venus': no such node"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_is_created(need_netns, tmp_path, doc, message):
    exp = {"type": "dtn", "name": "dtn-it-bad", "backend": "netns", "sizes": [2], "bundle_sizes": ["100kB"],
           "swarm": {"networks": nets(NET[5])}, **doc}
    assert_run_refused(exp, tmp_path, message)


def test_bad_contact_plan_file_names_the_line(need_netns, tmp_path):
    (tmp_path / "plan.txt").write_text("# plan\na contact +0 +10 1 2 100\na contact +0 10 2 3 100\n")
    path = tmp_path / "exp.yaml"
    path.write_text("type: dtn\nname: dtn-it-badplan\nbackend: netns\nsizes: [2]\ncontacts: {plan: plan.txt}\n"
                    f"swarm: {{{nets_yaml(NET[6])}}}\n")
    res = subprocess.run(SWARM + ["run", str(path), "--results", str(tmp_path / "results")], capture_output=True,
                         text=True, env={**os.environ, "SWARM_WORKDIR": str(REPO)}, timeout=120)
    assert res.returncode == 2
    assert f"{tmp_path / 'plan.txt'} line 3: time '10': expected +<seconds> or yyyy/mm/dd-hh:mm:ss" in res.stderr
    assert not (tmp_path / "results").exists()
