"""Fault timelines executed by the userspace engine (issue 27 item 3), live on netns: a timeline of cuts, heals
and impairments is handed to the swarm's swarm-linkd ahead of time; faults.csv rows carry the engine's measured
applied time (applied_by=engine; most lags <= 5 ms, none over 50 ms), the controller's saved state is the timeline's final one, and
pings see it; a timeline the engine refuses is one SpecError naming the fault, nothing of it applied; a timeline
with a node action stays with the driver.
Names faultsched-*, prearm-*, subnets from tests/alloc.py. Links with no
conditions at the start are pre-armed as pass-through links (a contact plan's shape) and the engine applies them."""
from __future__ import annotations

import time

import pytest

from experiments.timeline import FaultEvent, FaultTimeline
from swarm.errors import SpecError

from conftest import isl_rtts, require_netns_engine, swarm_up
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]

# The engine's lag is measured here, and its precision is a benchmark figure (BENCHMARKS.md "Fault timelines run by
# the userspace engine": max 0.1 ms on a quiet host). On the shared 2-vCPU CI host one event lagged 9.4 ms once
# (the engine runs SCHED_FIFO; a vCPU the hypervisor took away is not visible here), so: every lag <= LAG_MAX_S,
# at least half of them <= LAG_BOUND_S. The driver's own lags (a process per change) are tens of ms and more.
LAG_BOUND_S, LAG_MAX_S = 0.005, 0.050


def assert_engine_lags(lags_ms: list[float]) -> None:
    assert all(0 <= lag <= LAG_MAX_S * 1000 for lag in lags_ms), lags_ms
    assert sum(lag <= LAG_BOUND_S * 1000 for lag in lags_ms) * 2 >= len(lags_ms), lags_ms


@pytest.fixture(scope="module")
def fs_swarm():
    require_netns_engine()
    with swarm_up({"name": "faultsched-it", "backend": "netns", "groups": [{"prefix": "sat", "count": 4}],
                   "links": {"default": {"delay": "5ms"}, "engine": "userspace"},
                   "networks": nets(NET[0])}) as swarm:
        yield swarm


def events(docs: list[dict]) -> list[FaultEvent]:
    return [FaultEvent.model_validate(d) for d in docs]


def test_the_engine_applies_a_fault_timeline_and_faults_csv_has_its_lags(fs_swarm):
    swarm = fs_swarm
    assert swarm.links.engine.name == "userspace"
    said: list[str] = []
    timeline = events([{"at": "0.3s", "cut": ["sat01", "sat02"]},
                       {"at": "0.6s", "impair": {"between": ["sat01", "sat03"], "delay": "40ms"}},
                       {"at": "0.9s", "heal": ["sat01", "sat02"]},
                       {"at": "1.2s", "partition": [["sat01", "sat02", "sat03"], ["sat04"]]},
                       {"at": "1.5s", "heal": "all"},
                       {"at": "1.8s", "cut": ["sat03", "sat04"]},
                       {"at": "2.1s", "impair": {"between": ["sat01", "sat02"], "delay": "30ms"}}])
    tl = FaultTimeline(swarm.links, timeline, "t1", "run1", said.append)
    t0 = time.time() + 0.5
    tl.start(t0)
    rows = tl.finish(restore=False, timeout=10)
    assert any("handed to the userspace link engine" in m for m in said), said
    assert len(rows) == len(timeline)
    lags = []
    for r, ev in zip(rows, timeline):
        assert r["ok"] and r["applied_by"] == "engine", r
        assert r["at_s"] == ev.at and abs(r["planned_ts"] - (t0 + ev.at)) < 1e-5
        lag = r["applied_ts"] - r["planned_ts"]
        assert abs(r["offset_s"] - (r["applied_ts"] - t0)) < 1e-5
        lags.append(lag * 1000)
    assert_engine_lags(lags)
    print(f"engine-applied fault lag over {len(lags)} events: max {max(lags):.3f} ms, lags {[round(x, 3) for x in lags]}")
    # the controller's saved state is the timeline's final one (impair --show agrees)
    state = swarm.links.load()
    assert state.cuts == {("sat03", "sat04"), ("sat04", "sat03")}
    assert state.base[("sat01", "sat02")].values() == {"delay": 30.0}
    assert state.base[("sat01", "sat03")].values() == {"delay": 40.0}
    shown = {(row.src, row.dst): row for row in swarm.links.rows()}
    assert shown[("sat03", "sat04")].cut and "30" in shown[("sat01", "sat02")].effective
    # the pings see the final state
    assert not isl_rtts(swarm, "sat03", "sat04")
    got = isl_rtts(swarm, "sat01", "sat02")
    assert len(got) == 3 and 60 <= min(got) <= 75, got
    got = isl_rtts(swarm, "sat01", "sat03")
    assert len(got) == 3 and 80 <= min(got) <= 95, got
    got = isl_rtts(swarm, "sat02", "sat04")
    assert len(got) == 3 and 10 <= min(got) <= 25, got
    swarm.links.restore()
    got = isl_rtts(swarm, "sat03", "sat04")
    assert len(got) == 3 and 10 <= min(got) <= 25, got


def test_a_timeline_the_engine_refuses_names_the_fault_and_nothing_is_applied(fs_swarm):
    swarm = fs_swarm
    swarm.links.restore()
    gen_before = swarm.links.linkd.ping("sat02")["gen"]
    timeline = events([{"at": "0.3s", "cut": ["sat01", "sat02"]},
                       # 10 Gbit/s held for 10 s: above the engine's held-data bound (the engine refuses it)
                       {"at": "0.4s", "impair": {"between": ["sat01", "sat03"], "delay": "10s", "rate": "10Gbit"}}])
    tl = FaultTimeline(swarm.links, timeline, "t2", "run1")
    with pytest.raises(SpecError) as err:
        tl.start(time.time() + 0.3)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("faults[1] impair") and "entry" in msg, msg
    time.sleep(0.8)  # past both instants: nothing of the refused schedule was applied
    pending, applied = swarm.links.linkd.schedule_log("sat01")
    assert pending == 0 and applied == []
    assert swarm.links.linkd.ping("sat02")["gen"] == gen_before
    assert swarm.links.load().cuts == set()
    assert len(isl_rtts(swarm, "sat01", "sat02")) == 3


def test_a_timeline_with_a_node_action_stays_with_the_driver(fs_swarm):
    swarm = fs_swarm
    said: list[str] = []
    tl = FaultTimeline(swarm.links, events([{"at": "0.2s", "cut": ["sat01", "sat02"]},
                                            {"at": "0.4s", "node": "sat04", "action": "pause"},
                                            {"at": "0.6s", "node": "sat04", "action": "unpause"}]), "t3", "run1",
                       said.append)
    tl.start(time.time() + 0.3)
    rows = tl.finish(restore=True, timeout=20)
    assert any("the driver applies each event (a node action" in m for m in said), said
    assert [r["applied_by"] for r in rows] == ["driver"] * 3 and all(r["ok"] for r in rows), rows
    assert len(isl_rtts(swarm, "sat01", "sat02")) == 3


@pytest.fixture(scope="module")
def bare_swarm():
    """A swarm whose links have no conditions at all (like a DTN contact plan's links that are up at the
    release): nothing is held by the engine until a timeline pre-arms the links it changes."""
    require_netns_engine()
    with swarm_up({"name": "prearm-it", "backend": "netns", "groups": [{"prefix": "sat", "count": 3}],
                   "links": {"engine": "userspace"},
                   "networks": nets(NET[1])}) as swarm:
        yield swarm


def test_links_without_conditions_are_pre_armed_and_the_engine_applies_a_contact_plan(bare_swarm):
    swarm = bare_swarm
    swarm.links.restore()
    assert swarm.links.load().effective() == {}
    assert not swarm.links.load().nodes.get("sat02", {}).get("linkd_links")  # nothing held before
    said: list[str] = []
    # a contact plan's shape: the sat01-sat02 contact ends at 1.5 s and comes back at 3.5 s
    timeline = events([{"at": "1.5s", "cut": ["sat01", "sat02"]}, {"at": "3.5s", "heal": ["sat01", "sat02"]}])
    tl = FaultTimeline(swarm.links, timeline, "t4", "run1", said.append)
    t0 = time.time() + 0.5
    tl.start(t0)
    assert any("handed to the userspace link engine" in m and "2 link(s) with no conditions at the start pre-armed "
               "as pass-through" in m and "only those" in m for m in said), said
    recs = swarm.links.load().nodes
    assert recs["sat02"].get("linkd_links") == 1 and recs["sat01"].get("linkd_links") == 1  # one pass-through line
    assert not recs.get("sat03", {}).get("linkd_links")  # a link the timeline does not touch is not armed
    got = isl_rtts(swarm, "sat01", "sat02")  # before the cut: through the engine, unchanged
    # (2 of 3 answers: under load 20 one ping of 3 outlasted its 1 s wait once; "passes, undelayed" is the point)
    assert len(got) >= 2 and min(got) < 5, got
    while time.time() < t0 + 1.6:
        time.sleep(0.05)
    assert not isl_rtts(swarm, "sat01", "sat02")  # cut by the engine, at its instant
    got = isl_rtts(swarm, "sat01", "sat03")
    assert len(got) == 3 and min(got) < 5, got  # untouched link: not held, no delay
    rows = tl.finish(restore=False, timeout=10)
    assert len(rows) == 2
    lags = []
    for r in rows:
        assert r["ok"] and r["applied_by"] == "engine", r
        lags.append((r["applied_ts"] - r["planned_ts"]) * 1000)
    assert_engine_lags(lags)
    print(f"pre-armed contact plan: engine lags {[round(x, 3) for x in lags]} ms")
    got = isl_rtts(swarm, "sat01", "sat02")  # healed by the engine: through again
    assert len(got) == 3 and min(got) < 5, got
    state = swarm.links.load()  # the final state handed back: no cut, no conditions, records stale
    assert state.cuts == set() and state.effective() == {}
    assert all(rec.get("stale") for rec in state.nodes.values())
    swarm.links.restore()  # the next change re-plans: the pass-through lines and rules go
    state = swarm.links.load()
    assert not state.nodes["sat02"].get("linkd_links") and not state.nodes["sat01"].get("linkd_links")
    got = isl_rtts(swarm, "sat01", "sat02")
    assert len(got) == 3 and min(got) < 5, got


def test_the_driver_still_applies_a_contact_plan_on_bare_links_when_asked(bare_swarm):
    """The driver path still works on the same bare links ($SWARM_FAULTS_ENGINE_SCHEDULE=0): applied_by=driver."""
    import os

    swarm = bare_swarm
    said: list[str] = []
    os.environ["SWARM_FAULTS_ENGINE_SCHEDULE"] = "0"
    try:
        tl = FaultTimeline(swarm.links, events([{"at": "0.2s", "cut": ["sat01", "sat02"]},
                                                {"at": "0.4s", "heal": ["sat01", "sat02"]}]), "t5", "run1", said.append)
        tl.start(time.time() + 0.3)
        rows = tl.finish(restore=True, timeout=20)
    finally:
        del os.environ["SWARM_FAULTS_ENGINE_SCHEDULE"]
    assert any("the driver applies each event ($SWARM_FAULTS_ENGINE_SCHEDULE=0)" in m for m in said), said
    assert [r["applied_by"] for r in rows] == ["driver"] * 2 and all(r["ok"] for r in rows), rows


def test_a_contact_plan_goes_to_the_engine_in_windows_planned_before_the_release(bare_swarm, monkeypatch):
    """Issue 40 item 4, live: a contact plan planned by prepare() before its release is chosen and handed to the
    engine in windows handed over while it runs (windows of 4 changes, the next at most 0.6 s ahead of its first
    change, so most go after the start); every change applied by the engine at its instant. Before the fix the
    timeline went in one message planned inside start() (this test failed: no prepare(), one `sched`)."""
    from experiments import fault_schedule
    swarm = bare_swarm
    swarm.links.restore()
    monkeypatch.setattr(fault_schedule, "WINDOW", 4)
    monkeypatch.setattr(fault_schedule, "HORIZON_S", 0.6)
    sent: list[int] = []
    links = swarm.links  # one controller: its engine client counts the `sched` messages
    real = links.linkd.schedule
    monkeypatch.setattr(links.linkd, "schedule", lambda via, lines: sent.append(len(lines)) or real(via, lines))
    pairs = [["sat01", "sat02"], ["sat02", "sat03"], ["sat01", "sat03"]]
    timeline = events([{"at": f"{0.5 + 0.25 * k:g}s", ("cut" if (k // 3) % 2 == 0 else "heal"): pairs[k % 3]}
                       for k in range(12)])  # 12 events, 24 directed-link changes, 0.5-3.25 s
    said: list[str] = []
    tl = FaultTimeline(links, timeline, "t6", "run1", said.append)
    tl.prepare()
    assert not sent  # planned, nothing handed over yet
    t0 = time.time() + 0.5
    tl.start(t0)
    at_start = len(sent)
    rows = tl.finish(restore=False, timeout=10)
    assert any("windows of up to 4 changes" in m and "planned in" in m for m in said), said
    assert sum(sent) == 24 and max(sent) <= 4 and at_start < len(sent), (sent, at_start)  # some went while it ran
    lags = []
    for r in rows:
        assert r["ok"] and r["applied_by"] == "engine", r
        lags.append((r["applied_ts"] - r["planned_ts"]) * 1000)
    assert_engine_lags(lags)
    print(f"windowed contact plan: {len(sent)} windows ({at_start} at the start), engine lags "
          f"{[round(x, 3) for x in lags]} ms")
    swarm.links.restore()
