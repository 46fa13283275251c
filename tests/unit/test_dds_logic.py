"""Pure logic of the reference swarm app (flightsw/swarm_logic.py): sensor, allocation, agreement, windows."""
from __future__ import annotations

import math

import pytest

from flightsw import swarm_logic as sl

NODES = ["sat01", "sat02", "sat03", "sat04"]


def test_sense_is_deterministic_and_bounded():
    a, b = sl.sense("sat01", 42, 6), sl.sense("sat01", 42, 6)
    assert a == b and len(a) == 6
    assert all(0.0 <= x <= 1.0 for x in a)
    assert sl.sense("sat02", 42, 6) != a  # nodes see differently
    assert sl.sense("sat01", 43, 6) != a  # and it changes with time


def test_allocate_gives_every_target_once_within_capacity():
    obs = {n: sl.sense(n, 7, 8) for n in NODES}
    plan = sl.allocate(obs)
    assert set(plan.values()) <= set(NODES)
    counts = {n: list(plan.values()).count(n) for n in NODES}
    assert max(counts.values()) <= math.ceil(8 / 4)
    for t, node in plan.items():
        assert obs[node][t] > 0


def test_allocate_prefers_the_best_scorer_and_breaks_ties_by_name():
    obs = {"b": [0.9, 0.2], "a": [0.9, 0.8]}
    # cap 1 each: target 0 ties at 0.9, name order gives it to a; target 1 then goes to b
    assert sl.allocate(obs) == {0: "a", 1: "b"}
    assert sl.allocate({"a": [0.0, 0.5]}) == {1: "a"}  # nobody sees target 0: unassigned
    assert sl.allocate({}) == {}


def test_same_inputs_same_digest_whatever_the_order():
    obs = {n: sl.sense(n, 3, 5) for n in NODES}
    reordered = dict(reversed(list(obs.items())))
    assert sl.plan_digest(sl.allocate(obs)) == sl.plan_digest(sl.allocate(reordered))
    partial = {n: s for n, s in obs.items() if n != "sat04"}
    assert sl.plan_digest(sl.allocate(partial)) != sl.plan_digest(sl.allocate(obs))


def test_modal_agreement():
    assert sl.modal_agreement(["x", "x", "x", "x"]) == 1.0
    assert sl.modal_agreement(["x", "x", "y", "y"]) == 0.5
    assert sl.modal_agreement(["x", "x", "x", "y"]) == 0.75
    assert math.isnan(sl.modal_agreement([]))


def test_percentile():
    assert sl.percentile([1, 2, 3, 4, 5], 50) == 3
    assert sl.percentile([0, 10], 95) == pytest.approx(9.5)
    assert math.isnan(sl.percentile([], 50))


def test_window_stats_counts_expected_and_received_per_peer():
    st = sl.WindowStats("sat01", ["sat02", "sat03"], rate_hz=10, window_cycles=10)
    for c in range(100, 110):  # sat02: both topics every cycle; sat03: only topic 0 of half the cycles
        st.received("sat02", 0, c, 0.001)
        st.received("sat02", 1, c, 0.003)
        if c % 2 == 0:
            st.received("sat03", 0, c, 0.002)
    st.received("sat02", 0, 105, 0.001)  # a duplicate counts once
    st.data_age("sat02", 105, 0.1)
    assert st.close_before(10, first_cycle=100) == []  # window 10 (cycles 100..109) still open
    rows = {r["peer"]: r for r in st.close_before(11, first_cycle=100)}
    assert rows["sat02"]["expected"] == 20 and rows["sat02"]["received"] == 20 and rows["sat02"]["delivery_ratio"] == 1.0
    assert rows["sat03"]["received"] == 5 and rows["sat03"]["delivery_ratio"] == 0.25
    assert rows["sat02"]["latency_max_ms"] == 3.0 and rows["sat02"]["age_max_ms"] == 100.0
    assert rows["sat03"]["age_mean_ms"] == ""  # no age recorded
    assert rows["sat02"]["window_start"] == 10.0 and rows["sat02"]["window_s"] == 1.0
    assert st.close_before(11, first_cycle=100) == []  # closed once


def test_window_stats_reports_silent_peers_and_clips_before_start():
    st = sl.WindowStats("sat01", ["sat02", "sat03"], rate_hz=10, window_cycles=10)
    for c in range(105, 110):
        st.received("sat02", 0, c, 0.001)
        st.received("sat02", 1, c, 0.001)
    rows = {r["peer"]: r for r in st.close_before(11, first_cycle=105)}
    assert rows["sat02"]["expected"] == 10 and rows["sat02"]["delivery_ratio"] == 1.0  # cycles 105..109 only
    assert rows["sat03"]["received"] == 0 and rows["sat03"]["delivery_ratio"] == 0.0  # partitioned: still a row


def test_cyclone_configuration_of_the_app():
    from flightsw import swarm_app

    uri = swarm_app.cyclone_uri("10.150.0.2")
    assert '<NetworkInterface address="10.150.0.2"/>' in uri and "AllowMulticast" not in uri
    uni = swarm_app.cyclone_uri("10.150.0.2", ["10.150.0.3", "10.150.0.4"])
    assert "<AllowMulticast>false</AllowMulticast>" in uni and '<Peer address="10.150.0.4"/>' in uni
    import xml.etree.ElementTree as ET
    for text in (uri, uni):  # well-formed, one Discovery element, announcements every second
        assert ET.fromstring(text).find("Domain/Discovery/SPDPInterval").text == "1s"
    assert swarm_app.use_multicast("1") and not swarm_app.use_multicast("0")
    cfg = swarm_app.Config.from_env({"SWARM_NODE": "sat02", "SWARM_ISL_IP": "10.150.0.3", "SWARM_PEERS": "sat01,sat02,sat03",
                                     "SWARM_PEER_IPS": "10.150.0.2,10.150.0.3,10.150.0.4", "SWARM_APP_MULTICAST": "0",
                                     "SWARM_APP_OUT": "/tmp/x"})
    assert cfg.peers == ["sat01", "sat03"] and cfg.peer_ips == ("10.150.0.2", "10.150.0.4")
    assert cfg.targets == 3 and cfg.rate_hz == 10 and cfg.multicast is False


def test_window_stats_reports_windows_nobody_was_heard_in():
    st = sl.WindowStats("sat01", ["sat02"], rate_hz=10, window_cycles=10)
    rows = st.close_before(13, first_cycle=100)  # cut off from the start: windows 10, 11, 12 all empty
    assert [(r["window_start"], r["received"], r["expected"]) for r in rows] == [(10.0, 0, 20), (11.0, 0, 20), (12.0, 0, 20)]
    st.received("sat02", 0, 125, 0.001)  # late sample of a closed window: not counted anywhere
    st.received("sat02", 0, 131, 0.001)
    rows = st.close_before(14, first_cycle=100)
    assert [(r["window_start"], r["received"]) for r in rows] == [(13.0, 1)]


def _app_run(tmp_path, skipped_after: dict[int, int], lost: int = 0):
    """A two-node app run folder: sat02 sends at 10 Hz for 3 windows (cycles 1000-1029, t0 = 100.0 s) except
    the cycles it skipped (cycle -> how many right after it); sat01 receives all it sent, less `lost`."""
    import json
    import pandas as pd
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    gone = {c + k for c, n in skipped_after.items() for k in range(1, n + 1)}
    sent = [c for c in range(1000, 1030) if c not in gone]
    plans = [{"node": "sat02", "cycle": c, "cycle_ts": round(c * 0.1, 3), "digest": "d", "inputs": 2, "own_targets": 1,
              "peers_reported": 1, "peers_agree": 1, "skipped": skipped_after.get(c, 0)} for c in sent]
    pd.DataFrame(plans).to_csv(nodes / "sat02.plans.csv", index=False)
    rows = []
    for w in range(3):
        cyc = [c for c in sent if 1000 + 10 * w <= c < 1010 + 10 * w]
        got = 2 * len(cyc) - (lost if w == 1 else 0)
        rows.append({"node": "sat01", "peer": "sat02", "window_start": 100.0 + w, "window_s": 1.0, "expected": 20,
                     "received": got, "delivery_ratio": got / 20, "latency_p50_ms": 1.0, "latency_p95_ms": 2.0,
                     "latency_max_ms": 3.0, "age_mean_ms": 50.0, "age_max_ms": 90.0})
    pd.DataFrame(rows, columns=sl.PEER_COLUMNS).to_csv(nodes / "sat01.peers.csv", index=False)
    (tmp_path / "run.json").write_text(json.dumps({"t0": 100.0, "duration": 3.0}))
    return tmp_path


def test_cycles_a_late_sender_skipped_are_unsent_not_lost(tmp_path):
    """Regression: a sender that ran late skipped cycles (never sent them); the receiver's delivery was counted
    against every cycle, so a busy host showed as network loss (the compose app test saw 0.993)."""
    from experiments.app.parse import tidy_tables
    from analysis.app import phase_table
    import pandas as pd
    run = _app_run(tmp_path, {1012: 2, 1025: 1})  # cycles 1013, 1014 (window 1) and 1026 (window 2) not sent
    tidy_tables(run)
    peers = pd.read_csv(run / "peers.csv")
    assert list(peers["unsent"]) == [0, 4, 2]
    whole = phase_table(run).iloc[0]
    assert whole["delivery_ratio"] == 1.0 and whole["pairs_full"] == 1 and whole["unsent"] == 6


def test_a_sample_lost_beside_skipped_cycles_is_still_loss(tmp_path):
    from experiments.app.parse import tidy_tables
    from analysis.app import phase_table
    run = _app_run(tmp_path, {1012: 2}, lost=1)
    tidy_tables(run)
    whole = phase_table(run).iloc[0]
    assert whole["delivery_ratio"] == (60 - 4 - 1) / (60 - 4) and whole["pairs_full"] == 0


def test_windows_overlapping_a_faults_application_belong_to_no_phase(tmp_path):
    """Regression: a heal took 0.25 s to apply and let samples cross before its recorded offset_s, so the
    partition phase (up to offset_s) saw crossings. A phase ends when the next fault's command began (at_s)."""
    from experiments.app.parse import tidy_tables
    from analysis.app import phase_table
    run = _app_run(tmp_path, {}, lost=1)  # the one lost sample is in window 1 (t 1.0-2.0)
    (run / "faults.csv").write_text("at_s,offset_s,kind,args\n1.95,2.0,heal,all\n")
    tidy_tables(run)
    phases = phase_table(run)
    assert list(phases["phase"]) == ["before faults", "after heal all"]
    assert list(phases["windows"]) == [1, 1] and list(phases["to_s"]) == [1.95, 3.0]
    assert list(phases["delivery_ratio"]) == [1.0, 1.0]
