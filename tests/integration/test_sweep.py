"""Real sweeps (sizes 2 and 3, TCP + two UDP rates, 2 s) on each backend: one row per flow, report files,
resume running only what is missing."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.traffic.model import experiment_from_dict
from experiments.store import ResultsStore, host_facts
from experiments.traffic.run import run_sweep
from alloc import octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]


def experiment(backend: str, third: int, engine: str = "iperf3"):
    return experiment_from_dict({
        "name": f"it-sweep-{backend}-{engine}", "sizes": [2, 3], "protocols": ["tcp", "udp"], "rates": ["1M", "5M"],
        "duration": "2s", "settle": 0, "backend": backend, "engine": engine,
        "swarm": {"networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}}},
    })


SUBNET = {("netns", "iperf3"): NET[0], ("compose", "iperf3"): NET[2], ("netns", "mux"): NET[4], ("compose", "mux"): NET[6]}


@pytest.mark.parametrize("engine", ["iperf3", "mux"])
@pytest.mark.parametrize("backend", ["netns", pytest.param("compose", marks=pytest.mark.docker)])
def test_sweep_rows_report_and_resume(backend, engine, request, tmp_path, need_netns, need_iperf3):
    if backend == "compose":
        request.getfixturevalue("need_docker")
    exp = experiment(backend, SUBNET[backend, engine], engine)
    store = ResultsStore.create(tmp_path, exp, host_facts())
    rows = run_sweep(exp, store)
    assert len(rows) == 6
    flows = pd.read_csv(store.dir / "flows.csv")
    # one row per directed flow per test: sizes 2 and 3 -> 2 and 6 flows, 3 tests each
    assert len(flows) == 3 * 2 + 3 * 6
    assert flows.groupby("test_id").size().to_dict() == {
        "n002-tcp-r1": 2, "n002-udp-1Mbps-r1": 2, "n002-udp-5Mbps-r1": 2,
        "n003-tcp-r1": 6, "n003-udp-1Mbps-r1": 6, "n003-udp-5Mbps-r1": 6}
    assert flows["ok"].all(), flows[~flows["ok"]][["test_id", "src", "dst", "error"]]
    # Figures over the flows' common window exist wherever the test had one (window_s > 0). On a busy host a flow
    # can start so late (compose: `docker exec` under load) that 2 s flows never all run at once: then the window is
    # empty, its figures are NaN (never made up), and the test's own start skew says why (an empty window needs
    # the latest start past the earliest end, i.e. a skew of about a flow's duration; half of it bounds that).
    # Seen in a stress run (2026-11-27): n003-udp-5Mbps on compose, every window figure NaN.
    has = flows["window_s"] > 0
    empty = flows[~has]
    assert empty["window_bits_per_second"].isna().all() and empty["window_lost_percent"].isna().all()
    assert (empty["skew_s"] >= 0.5 * empty["duration_s"]).all(), empty[["test_id", "src", "skew_s", "window_s"]]
    tcp = flows[has & (flows.protocol == "tcp")]
    assert (tcp["window_bits_per_second"] > 1e6).all()
    assert flows[has & (flows.protocol == "udp")]["window_lost_percent"].notna().all()
    udp = flows[flows.protocol == "udp"]
    # The offered load is delivered on an unimpaired link: the bytes received over the test's duration are the
    # offered rate within 5 %. iperf3's own bits/s is those bytes over the RECEIVER's seconds: on a busy host a
    # starved receiver reads the last datagrams late (seen: 863/863 arrived, sender at 0.9997, bits/s 0.917 with
    # the receiver 0.18 s past its sender), so it must be within 5 % too unless the receiver ran late, and then
    # the report must say so for that test. On failure: what the sender got out, the receiver's seconds and
    # losses, and the host's CPU, to tell the link from the host.
    tests = pd.read_csv(store.dir / "tests.csv")
    shown = ["test_id", "src", "dst", "rate_bps", "bits_per_second", "sent_bits_per_second", "packets", "lost_packets",
             "receiver_s", "sender_s"]
    why = tests[["test_id", "cpu_busy_pct", "cpu_busy_max_pct", "release_spread_s", "skew_s"]].to_string()
    delivered = udp["bits_per_second"] * udp["receiver_s"] / udp["duration_s"]
    short = udp[~(delivered / udp["rate_bps"]).between(0.95, 1.05)]
    assert short.empty, (short[shown].to_string(), why)
    late = udp["receiver_s"] - udp["sender_s"] > 0.05 * udp["duration_s"]
    short = udp[~(udp["bits_per_second"] / udp["rate_bps"]).between(0.95, 1.05) & ~late]
    assert short.empty, (short[shown].to_string(), why)
    # Start skew is how far apart the host got the flows' processes going: a busy host moves it (seen 0.6-1.1 s for
    # compose + iperf3 at load 9), so it is a measured figure (bench/, BENCHMARKS.md), not held to a bound here.
    # What must hold: each test has it, and the report says so wherever it cut the concurrent window under 80 %.
    # (window_fraction may pass 1 by the stamps' own uncertainty: 1.0003 seen). A window of 0 is the empty window the
    # flows' check above allows on a busy host, and only where the test's own skew explains it (half a flow's
    # duration at least). Seen in a stress run (2026-11-28): n003-udp-5Mbps on compose, skew 2.07 s, fraction 0.
    assert (tests["skew_s"] >= 0).all() and (tests["window_fraction"] >= 0).all(), tests
    longest = flows.groupby("test_id")["duration_s"].max()
    unexplained = [t.test_id for t in tests[tests["window_fraction"] <= 0].itertuples()
                   if t.skew_s < 0.5 * longest[t.test_id]]
    assert not unexplained, tests[["test_id", "skew_s", "window_fraction"]]
    if engine == "mux":  # starts are stamped by the engines at one shared instant, not inferred
        assert (tests["skew_s"] < 0.05).all() and (tests["window_fraction"] > 0.97).all(), tests
        assert json.loads((store.dir / "host.json").read_text())["traffic_engine"] == "mux"
    assert len(list((store.dir / "raw").rglob("*.json"))) == len(flows)

    from analysis.traffic import write_report
    paths = write_report(store.dir, flows, json.loads((store.dir / "host.json").read_text()), tests)
    html = paths["report_html"].read_text()
    assert "Table 3" in html and "Table 4" in html and "data:image/png;base64," in html
    for test_id in udp[late]["test_id"].unique():  # a receiver that ran late is said, per test
        assert f"test {test_id} " in html and "past its sender" in html, test_id
    for test_id in tests[tests["window_fraction"] < 0.8]["test_id"]:  # a short concurrent window is said, per test
        assert f"test {test_id} " in html and "concurrent window" in html, test_id
    tcp_table = pd.read_csv(paths["tcp_bandwidth_csv"])
    assert list(tcp_table["nodes"]) == [2, 3] and list(tcp_table["connections"]) == [2, 6]

    # resume: forget the last test as if the sweep had crashed in it; only that test runs again
    lines = (store.dir / "tests.csv").read_text().splitlines()
    (store.dir / "tests.csv").write_text("\n".join(lines[:-1]) + "\n")
    again = run_sweep(exp, ResultsStore(store.dir))
    assert [r["test_id"] for r in again] == ["n003-udp-5Mbps-r1"]
    flows2 = pd.read_csv(store.dir / "flows.csv")
    assert len(flows2) == len(flows) and flows2.groupby("test_id").size().max() == 6
