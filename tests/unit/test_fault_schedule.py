"""The pure planning of a fault timeline run by the userspace engine (experiments.fault_schedule): the link state
after each event (as the link controller would make it), the changes each instant makes, their `sched` lines."""
from __future__ import annotations

import pytest

from experiments.fault_schedule import (Instant, changed_links, link_only, not_held, plan_entries, plan_instants,
                                        state_after, states_after)
from experiments.timeline import FaultEvent
from netem.engines import LinkdHold, UserspaceEngine, linkd_line, plan_ipt, plan_linkd
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
