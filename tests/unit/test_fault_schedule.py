"""The pure planning of a fault timeline run by the userspace engine (experiments.fault_schedule): the link state
after each event (as the link controller would make it), the changes each instant makes, their `sched` lines."""
from __future__ import annotations

import pytest

from experiments.fault_schedule import (Instant, changed_links, link_only, not_held, plan_entries, plan_instants,
                                        state_after, states_after)
from experiments.timeline import FaultEvent
from netem.engines.hold import LinkdHold
from netem.engines.userspace import UserspaceEngine, linkd_line, plan_ipt, plan_linkd
from netem.runtime.orbit_schedule import Target
from netem.spec.links import Impairment
from netem.state import LinkState
from swarm.caps import Capabilities

NAMES = ["sat01", "sat02", "sat03", "sat04"]
MACS = {n: f"02:aa:00:00:00:0{i + 1}" for i, n in enumerate(NAMES)}
D5 = Impairment.model_validate({"delay": "5ms"})
CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True, htb=True, nfqueue=True,
                    linkd="/opt/swarm-linkd")


def ev(doc: dict) -> FaultEvent:
    return FaultEvent.model_validate(doc)


def start() -> LinkState:
    return LinkState(engine="userspace", base={(s, d): D5 for s in NAMES for d in NAMES if s != d})


def test_state_after_each_event_follows_the_controllers_meaning_and_leaves_the_input_alone():
    s0 = start()
    events = [ev({"at": "1s", "cut": ["sat01", "sat02"]}),
              ev({"at": "2s", "partition": [["sat01", "sat02"], ["sat03", "sat04"]]}),
              ev({"at": "3s", "heal": ["sat01", "sat02"]}),
              ev({"at": "4s", "impair": {"between": ["sat03", "sat04"], "direction": "a->b", "loss": "10%"}}),
              ev({"at": "5s", "heal": "all"})]
    states = states_after(s0, events, NAMES)
    assert s0.cuts == set() and s0.base[("sat03", "sat04")] == D5  # the input is not changed
    assert states[0].cuts == {("sat01", "sat02"), ("sat02", "sat01")}
    cross = {(a, b) for a in ("sat01", "sat02") for b in ("sat03", "sat04")}
    assert states[1].cuts == states[0].cuts | cross | {(b, a) for a, b in cross}
    assert states[2].cuts == states[1].cuts - states[0].cuts
    assert states[3].base[("sat03", "sat04")].values() == {"delay": 5.0, "loss": 10.0}
    assert states[3].base[("sat04", "sat03")] == D5  # one direction only
    assert states[4].cuts == set() and states[4].base == states[3].base


def test_each_instant_changes_only_the_links_that_differ_and_same_time_events_merge():
    s0 = start()
    timeline = list(enumerate([ev({"at": "1s", "cut": ["sat01", "sat02"]}),
                               ev({"at": "1s", "impair": {"between": ["sat01", "sat02"], "delay": "20ms"}}),
                               ev({"at": "2s", "heal": ["sat01", "sat02"]}),
                               ev({"at": "3s", "heal": "all"})]))
    instants, final = plan_instants(s0, timeline, NAMES)
    assert [i.at for i in instants] == [1.0, 2.0, 3.0] and instants[0].events == [0, 1]
    # at 1 s: both directions down (the cut wins over the merged delay: still cut)
    assert set(instants[0].links) == {("sat01", "sat02"), ("sat02", "sat01")}
    assert all(imp.effective().down for imp in instants[0].links.values())
    # at 2 s: healed, at the new 20 ms delay
    assert {p: imp.values() for p, imp in instants[1].links.items()} == {
        ("sat01", "sat02"): {"delay": 20.0}, ("sat02", "sat01"): {"delay": 20.0}}
    assert instants[2].links == {}  # nothing left to heal: no engine change
    assert final.cuts == set() and final.base[("sat01", "sat02")].values() == {"delay": 20.0}
    assert changed_links(s0, final) == instants[1].links


def test_sched_lines_are_the_planners_engine_lines_at_each_instant_in_the_receivers_queue():
    instants = [Instant(1.5, [0], {("sat01", "sat02"): D5.merge(Impairment(up=False))}),
                Instant(2.0, [1], {("sat01", "sat02"): D5, ("sat03", "sat02"): Impairment()})]
    queues = {"sat02": 2}
    entries = plan_entries(instants, 1000.0, MACS, lambda n: Target("switch", "sat01", queues[n]))
    lines = [e[0] for e in entries["switch"]]
    assert lines == [f"1001500000000 2 {linkd_line(MACS['sat01'], D5.merge(Impairment(up=False)))}",
                     f"1002000000000 2 {linkd_line(MACS['sat01'], D5)}",
                     f"1002000000000 2 link {MACS['sat03']}"]  # no conditions: passed straight through
    assert [e[1:] for e in entries["switch"]] == [(0, ("sat01", "sat02")), (1, ("sat01", "sat02")),
                                                  (1, ("sat03", "sat02"))]


def test_links_without_conditions_at_the_start_are_not_held_and_node_actions_are_not_link_events():
    s0 = LinkState(base={("sat01", "sat02"): D5, ("sat02", "sat01"): D5})
    instants, _ = plan_instants(s0, [(0, ev({"at": "1s", "cut": ["sat01", "sat03"]})),
                                     (1, ev({"at": "2s", "cut": ["sat01", "sat02"]}))], NAMES)
    assert not_held(s0, instants) == [("sat01", "sat03"), ("sat03", "sat01")]
    assert link_only([ev({"at": "1s", "cut": ["sat01", "sat02"]})])
    assert not link_only([ev({"at": "1s", "node": "sat01", "action": "restart"})])
    with pytest.raises(Exception, match="not a link event"):
        state_after(s0, ev({"at": "1s", "node": "sat01", "action": "restart"}), NAMES)


def test_a_contact_plans_up_links_are_the_ones_pre_armed_and_only_they():
    """A contact plan's shape: links with no conditions (up) cut at t and healed at t2 are pre-armed (both
    directions); a link already cut at the start (held: down) and links the timeline never touches are not."""
    s0 = LinkState(cuts={("sat03", "sat04"), ("sat04", "sat03")})
    instants, final = plan_instants(s0, list(enumerate([ev({"at": "1s", "cut": ["sat01", "sat02"]}),
                                                        ev({"at": "2s", "heal": ["sat03", "sat04"]}),
                                                        ev({"at": "3s", "heal": ["sat01", "sat02"]})])), NAMES)
    assert not_held(s0, instants) == [("sat01", "sat02"), ("sat02", "sat01")]
    assert final.cuts == set()
    # a heal of a link that was never cut changes nothing: nothing to arm
    instants, _ = plan_instants(LinkState(), [(0, ev({"at": "1s", "heal": ["sat01", "sat03"]}))], NAMES)
    assert not_held(LinkState(), instants) == []


def test_pre_armed_links_are_pass_through_lines_and_rules_in_the_receivers_engine():
    """LinkdHold.passthrough: a source MAC without conditions gets a bare `link <mac>` line and its NFQUEUE rule
    (no --queue-bypass: fail closed); without it a link with no conditions is neither configured nor queued."""
    a, b = MACS["sat01"], MACS["sat03"]
    ingress = {a: Impairment(), b: D5}
    hold = LinkdHold(passthrough=frozenset({a}))
    cmds = UserspaceEngine(CAPS).plan_node("eth1", {}, ingress, {a: "sat01->sat02 (pre-armed)"}, hold)
    assert cmds.linkd == f"link {a}  # sat01->sat02 (pre-armed)\n{linkd_line(b, D5)}\n"
    assert f"--mac-source {a} -j NFQUEUE" in (cmds.ipt or "") and f"--mac-source {b} -j NFQUEUE" in (cmds.ipt or "")
    assert "bypass" not in (cmds.ipt or "")
    plain = UserspaceEngine(CAPS).plan_node("eth1", {}, ingress, {}, LinkdHold())
    assert plain.linkd == f"{linkd_line(b, D5)}\n" and a not in (plain.ipt or "")
    assert plan_linkd({a: Impairment()}) is None and plan_ipt({a: Impairment()}) is None


def _reference_instants(s0: LinkState, timeline, names):
    """plan_instants as defined: the whole state after each event, compared whole (slow, obviously right)."""
    instants: list[Instant] = []
    state = s0
    for index, e in timeline:
        after = state_after(state, e, names)
        if not instants or instants[-1].at != e.at:
            instants.append(Instant(e.at, [], {}, {}))
            inst_start = state
        instants[-1].events.append(index)
        instants[-1].per_event[index] = set(changed_links(state, after))
        instants[-1].links = changed_links(inst_start, after)
        state = after
    return instants, state


def _random_timeline(rng, names, n):
    out = []
    for i in range(n):
        a, b = rng.sample(names, 2)
        kind = rng.choice(["cut", "cut", "heal", "heal", "heal_all", "partition", "impair", "impair"])
        doc = {"at": f"{i // 3}s"}
        if kind == "heal_all":
            doc["heal"] = "all"
        elif kind == "partition":
            cut = rng.randrange(1, len(names))
            doc["partition"] = [names[:cut], names[cut:]]
        elif kind == "impair":
            doc["impair"] = {"between": [a, b], "direction": rng.choice(["a->b", "both"]),
                             **rng.choice([{"loss": "1%"}, {"loss": "0%"}, {"delay": "20ms"}, {"delay": "0ms"}])}
        else:
            doc[kind] = [a, b]
        out.append((i, ev(doc)))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_incremental_planning_gives_what_comparing_whole_states_gives(seed):
    import random
    rng = random.Random(seed)
    s0 = start() if seed % 2 else LinkState(engine="userspace", cuts={("sat01", "sat03")})
    timeline = _random_timeline(rng, NAMES, 60)
    got, final = plan_instants(s0, timeline, NAMES)
    want, want_final = _reference_instants(s0, timeline, NAMES)
    assert [(i.at, i.events, i.links, i.per_event) for i in got] == [(i.at, i.events, i.links, i.per_event) for i in want]
    assert final.effective() == want_final.effective() and final.cuts == want_final.cuts
    assert s0.cuts in (set(), {("sat01", "sat03")})  # the input is not changed


def test_a_long_contact_timeline_plans_in_time_proportional_to_its_events():
    """Issue 40 item 4: 13 nodes, 16,338 cut/heal events (the periodic DTN plan's size) took 55.9 s copying the
    whole link state per event; the engine path was abandoned and events fired late."""
    import random
    import time
    names = [f"sat{i:02d}" for i in range(1, 14)]
    s0 = LinkState(engine="userspace", base={(s, d): D5 for s in names for d in names if s != d})
    rng = random.Random(1)
    timeline = [(i, ev({"at": f"{i // 8 * 10}s", ("cut" if i % 2 else "heal"): rng.sample(names, 2)}))
                for i in range(16_338)]
    t = time.monotonic()
    instants, _ = plan_instants(s0, timeline, names)
    took = time.monotonic() - t
    assert len(instants) == 2043 and took < 5.0, f"{took:.1f} s to plan"


def test_run_check_says_how_long_the_largest_tests_timeline_takes_to_plan(tmp_path):
    """The issue's 13-node all-to-all DTN experiment with periodic contacts (1,800 s + 300 s drain)."""
    import re
    import yaml
    from test_reliability import cli
    exp = {"type": "dtn", "name": "rfp13", "backend": "netns", "pattern": "all-to-all", "sizes": [12],
           "bundle_sizes": ["10kB"], "rates": [1], "clas": ["tcp"], "routings": ["epidemic"], "duration": "1800s",
           "drain": "300s", "contacts": {"periodic": {"period": "20s", "up": "10s"}},
           "swarm": {"networks": {"isl": {"subnet": "10.208.0.0/24"}, "ground": {"subnet": "10.209.0.0/24"}}}}
    path = tmp_path / "p13.yaml"
    path.write_text(yaml.safe_dump(exp))
    code, out, err = cli("run", "--check", str(path))
    assert code == 0, err
    m = re.search(r"timeline of (\d+) events planned in ([\d.]+) s[,)]", out)
    assert m and int(m.group(1)) > 16_000 and float(m.group(2)) < 5.0, out


# ------------------------------------------------------------------ planned before the release, handed over in windows
P13 = {"type": "dtn", "name": "rfp13", "backend": "netns", "pattern": "all-to-all", "sizes": [12],
       "bundle_sizes": ["10kB"], "rates": [1], "clas": ["tcp"], "routings": ["epidemic"], "duration": "1800s",
       "drain": "300s", "contacts": {"periodic": {"period": "20s", "up": "10s"}},
       "swarm": {"networks": {"isl": {"subnet": "10.208.0.0/24"}, "ground": {"subnet": "10.209.0.0/24"}}}}


class FakeEngine:
    """The engine's schedule as sched.rs keeps it: all entries of a message or none (an entry in the past, more
    pending than its bound), applied at their due time on a clock the test moves (`now`)."""

    def __init__(self, bound: int):
        self.bound, self.now = bound, 0.0
        self.pending: dict[int, int] = {}  # id -> due ns
        self.log: list[tuple[int, int, int]] = []
        self.next_id, self.messages, self.most = 1, [], 0

    def schedule(self, via, lines):
        from swarm.errors import SpecError
        dues = [int(line.split()[0]) for line in lines]
        for k, due in enumerate(dues, 1):
            if due < self.now * 1e9:
                raise SpecError(f"link schedule: userspace link engine: error: entry {k}: due {due} ns, in the past")
            if len(self.pending) + k > self.bound:
                raise SpecError(f"link schedule: userspace link engine: error: entry {k}: the schedule would hold "
                                f"more than {self.bound} pending changes, this engine's bound (--max-sched)")
        first = self.next_id
        for due in dues:
            self.pending[self.next_id] = due
            self.next_id += 1
        self.messages.append(len(lines))
        self.most = max(self.most, len(self.pending))
        return {"entries": str(len(lines)), "first_id": str(first), "pending": str(len(self.pending))}

    def advance(self, now: float) -> None:
        self.now = now
        for id_, due in sorted(self.pending.items()):
            if due <= now * 1e9:
                self.log.append((id_, due, due + 50_000))
                del self.pending[id_]

    def schedule_log(self, via):
        out, self.log = self.log, []
        return len(self.pending), out

    def schedule_clear(self, via):
        self.pending.clear()

    def hop(self, plan, iface):
        return [], f"port{plan.index}"  # one engine at the forwarding hop serves every node (netns: "switch")

    def hold(self, plan, iface):
        return LinkdHold()


class FakeLinks:
    """What EngineFaults and FaultTimeline ask of a swarm's link controller, with one engine for every node."""

    def __init__(self, names: list[str], state: LinkState, bound: int = 1_000_000):
        from types import SimpleNamespace
        self.swarm = SimpleNamespace(nodes=[SimpleNamespace(name=n, index=i, isl_mac=f"02:aa:00:00:00:{i + 1:02x}")
                                            for i, n in enumerate(names)])
        self.engine = SimpleNamespace(schedules=True, name="userspace")
        self.linkd = FakeEngine(bound)
        self.state = state

    def load(self) -> LinkState:
        return self.state

    def isl_iface(self, plan) -> str:
        return "eth1"

    def prearm(self, links) -> None:
        pass

    def transaction(self):
        from contextlib import nullcontext
        return nullcontext(self.state)


def contact_timeline(names: list[str], n: int, every: float) -> list[tuple[int, FaultEvent]]:
    """`n` cut/heal events `every` seconds apart over pairs of `names` (a contact plan's shape)."""
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    out = []
    for i in range(n):
        a, b = pairs[(i // 2) % len(pairs)]
        out.append((i, ev({"at": f"{1 + i * every:g}s", ("cut" if i % 2 == 0 else "heal"): [a, b]})))
    return out


def test_windows_hold_whole_instants_and_at_most_their_size_unless_one_instant_is_larger():
    from experiments.fault_schedule import window_bounds
    instant_of = [0, 0, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 4]
    bounds = window_bounds(instant_of, 4)
    assert bounds == [(0, 2), (2, 6), (6, 12), (12, 13)]  # instant 3 (6 changes) is a window alone
    for start, end in bounds:  # no instant split over two windows
        assert start == 0 or instant_of[start] != instant_of[start - 1]
    assert window_bounds([], 4) == [] and window_bounds([0, 1, 2], 10) == [(0, 3)]


def test_hold_check_accepts_a_timeline_far_longer_than_the_bound_and_refuses_what_windows_cannot_help():
    from experiments.fault_schedule import hold_check, window_bounds
    # 5,000 changes, 2 a second: 50 times the bound, but never more than a window and 20 s of changes pending
    dues = [1 + i / 2 for i in range(5_000)]
    assert hold_check(dues, window_bounds(list(range(5_000)), 40), bound=100, horizon=10.0) == ""
    # one instant of 150 changes: no window can hold it
    why = hold_check([5.0] * 150, window_bounds([0] * 150, 40), bound=100, horizon=10.0)
    assert "at 5 s the engine would hold 150 pending link changes" in why and "--max-sched" in why, why
    # 30 changes a second: what is due within the horizon before a window, plus the window, exceeds the bound
    dues = [1 + i / 30 for i in range(3_000)]
    why = hold_check(dues, window_bounds(list(range(3_000)), 40), bound=100, horizon=10.0)
    assert why.startswith("at ") and "even handed over in windows" in why, why


def test_the_timeline_is_planned_before_the_release_and_start_only_shifts_it(monkeypatch):
    """Issue 40 item 4: EngineFaults planned inside FaultTimeline.start(release), so a long plan ate the
    release's lead. Before the fix FaultTimeline had no prepare() and start() planned (this test failed)."""
    import time
    from experiments import fault_schedule
    from experiments.timeline import FaultTimeline
    names = [f"sat{i:02d}" for i in range(1, 6)]
    links = FakeLinks(names, LinkState(engine="userspace", base={(s, d): D5 for s in names for d in names if s != d}))
    events = [e for _, e in contact_timeline(names, 40, 0.25)]
    said: list[str] = []
    tl = FaultTimeline(links, events, "t1", "r", said.append)
    tl.prepare()
    assert tl._planned is not None and tl._planned[0].entries  # planned and built from instant 0

    def no_planning(*a, **k):
        raise AssertionError("planned after the release was fixed")
    monkeypatch.setattr(fault_schedule, "plan_instants", no_planning)
    release = time.time() + 0.5
    links.linkd.advance(time.time())
    tl.start(release)
    try:
        ef = tl.engine_faults
        assert ef is not None and any("handed to the userspace link engine" in m for m in said), said
        first = min(int(line.split()[0]) for es in ef.entries.values() for line, _, _ in es)
        assert first == int(round((release + events[0].at) * 1e9))  # shifted to the release
    finally:
        tl.stop()
        tl.finish(restore=False, timeout=2)


def test_a_timeline_longer_than_the_engines_bound_is_handed_over_in_windows_never_above_it(monkeypatch):
    """Issue 40 item 4: the fault hand-over sent the whole timeline in one `sched` message, so a timeline of more
    changes than the engine's --max-sched was refused at the start of a test. Before the fix hand_over() sent
    all 4,000 changes at once and this engine (bound 700) refused them (this test failed)."""
    from experiments import fault_schedule
    from experiments.fault_schedule import EngineFaults
    monkeypatch.setattr(fault_schedule, "MAX_SCHED", 700, raising=False)
    names = [f"sat{i:02d}" for i in range(1, 9)]
    links = FakeLinks(names, LinkState(engine="userspace", base={(s, d): D5 for s in names for d in names if s != d}),
                      bound=700)
    timeline = contact_timeline(names, 2_000, 0.5)  # 1,000 s, 4,000 link changes
    ef = EngineFaults(links, timeline)
    ef.build()
    assert ef.holds() == ""
    release = 1_000.0
    ef.shift_to(release)
    links.linkd.advance(release - 2.0)
    assert ef.hand_over(now=release - 2.0) == 4_000
    now = release - 2.0
    while now < release + 1_002:
        now += fault_schedule.POLL_S
        links.linkd.advance(now)
        ef.collect()
        ef.send_windows(now=now)
    ef.collect()
    assert len(links.linkd.messages) > 10 and max(links.linkd.messages) <= ef.window == 350, links.linkd.messages
    assert links.linkd.most <= 700 and sum(links.linkd.messages) == 4_000
    assert len(ef.applied) == 4_000 and ef.collect() == 0  # every change applied by the engine, none left
    assert all(ef.event_applied(k, i)[0] is not None for k, inst in enumerate(ef.instants) for i in inst.events)


def test_run_check_refuses_a_timeline_the_engine_cannot_hold_even_in_windows(tmp_path, monkeypatch):
    """The periodic 13-node plan changes ~156 links at each contact instant: with a bound of 200 (a window of
    100 on top of the 156 still pending) the engine cannot hold it; with 1,000 it goes in windows."""
    import yaml
    from experiments import fault_schedule
    from test_reliability import cli, one_line
    path = tmp_path / "p13.yaml"
    path.write_text(yaml.safe_dump(P13))
    monkeypatch.setattr(fault_schedule, "MAX_SCHED", 200, raising=False)
    code, out, err = cli("run", "--check", str(path))
    line = one_line(err)
    assert code == 2 and not out, (code, out)
    assert "contacts/faults" in line and "more than its bound (200, swarm-linkd --max-sched)" in line, line
    monkeypatch.setattr(fault_schedule, "MAX_SCHED", 1_000)
    code, out, err = cli("run", "--check", str(path))
    assert code == 0 and "link changes handed to the engine in" in out and "windows of up to 500" in out, out


def test_the_bound_the_planner_assumes_is_the_engines_default():
    from pathlib import Path
    from experiments.fault_schedule import MAX_SCHED
    src = (Path(__file__).resolve().parents[2] / "netem" / "linkd" / "src" / "main.rs").read_text()
    assert f"max_sched: {MAX_SCHED:_}," in src
