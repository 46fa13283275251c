"""Issue 39: a large swarm's link state held as it is (pure): links.json keeps a condition most pairs share once,
with the pairs without it, and reads back the same links; events group a change many links share."""
from __future__ import annotations

import json

from netem.spec.links import Impairment, impairment
from netem.state import LinkState, by_node, shared_default
from swarm.observe.events import grouped_link_changes, link_changes, link_view

NAMES = [f"sat{i:03d}" for i in range(1, 41)]


def _default_links() -> dict:
    delay = impairment(delay="10ms")
    base = {(s, d): delay for s in NAMES for d in NAMES if s != d}
    base[("sat001", "sat002")] = impairment(delay="50ms")
    base[("sat002", "sat001")] = Impairment(up=False)
    del base[("sat003", "sat004")]
    return base


def test_links_json_holds_a_shared_default_once_and_reads_back_the_same_links():
    state = LinkState(engine="userspace", base=_default_links(), cuts={("sat005", "sat006")})
    doc = json.loads(json.dumps(state.to_json()))
    assert doc["default"]["values"] == {"delay": 10.0} and doc["default"]["nodes"] == NAMES
    assert sorted(doc["default"]["except"]) == [["sat001", "sat002"], ["sat002", "sat001"], ["sat003", "sat004"]]
    assert len(doc["links"]) == 2  # only the pairs with another condition
    back = LinkState.from_json(doc)
    assert back.base == state.base and back.cuts == state.cuts


def test_a_small_or_mixed_state_keeps_a_row_per_link():
    small = {("a", "b"): impairment(delay="10ms"), ("b", "a"): impairment(delay="10ms")}
    assert shared_default(small) is None and "default" not in LinkState(base=small).to_json()
    mixed = {(s, d): impairment(delay=f"{(i % 3) + 1}ms") for i, (s, d) in
             enumerate((s, d) for s in NAMES for d in NAMES if s != d)}
    assert shared_default(mixed) is None  # no condition on more than half the pairs
    assert LinkState.from_json(LinkState(base=mixed).to_json()).base == mixed


def test_each_node_gets_its_own_share_of_the_links():
    base = _default_links()
    shares = by_node(base)
    assert set(shares["sat003"]) == {p for p in base if "sat003" in p}
    assert ("sat003", "sat004") not in shares["sat004"]


def test_a_change_many_links_share_is_one_event_with_examples():
    after = link_view(_default_links(), set())
    single, bulked = grouped_link_changes(link_changes({}, after))
    assert [(c["src"], c["dst"], c["state"]) for c in single] == [("sat001", "sat002", "up"), ("sat002", "sat001", "down")]
    assert len(bulked) == 1 and bulked[0]["links"] == 40 * 39 - 3 and bulked[0]["conditions"] == "delay 10ms"
    assert bulked[0]["examples"][0] == "sat001->sat003" and bulked[0]["was"] == {"state": "up", "conditions": ""}


def test_show_groups_links_by_condition_largest_first():
    from netem.runtime.links import LinkController

    ctl = object.__new__(LinkController)  # condition_groups needs only the node order
    ctl.names = NAMES
    state = LinkState(base=_default_links(), cuts={("sat005", "sat006"), ("sat040", "sat039")})
    groups = ctl.condition_groups(state)
    assert [g["links"] for g in groups] == [40 * 39 - 3 - 2, 2, 1, 1]  # the two cuts were on default links
    assert groups[0]["configured"] == "delay 10ms" and groups[0]["cut"] is False
    assert groups[0]["examples"] == ["sat001 -> sat003", "sat001 -> sat004", "sat001 -> sat005"]
    assert groups[1]["cut"] is True and groups[1]["configured"] == "delay 10ms" and groups[1]["effective"] == "down"
    assert groups[1]["examples"] == ["sat005 -> sat006", "sat040 -> sat039"]


def test_progress_every_tenth_of_the_nodes_and_nothing_for_a_small_swarm():
    from netem.runtime.links import progress_reporter

    said: list[str] = []
    report = progress_reporter(said.append, 250, "link conditions")
    for _ in range(250):
        report()
    assert len(said) == 10 and said[-1].startswith("link conditions: 250/250 nodes configured (")
    small = progress_reporter(said.append, 10, "x")
    small()
    assert len(said) == 10


def test_attach_uses_the_capabilities_up_recorded():
    import dataclasses

    from swarm.caps import Capabilities
    from swarm.runtime.swarm import recorded_caps

    caps = Capabilities(kernel="6.1", root=True, docker=False, docker_version="", compose=[], compose_version="",
                        netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True, iperf3_version="",
                        batmand=False, ddsperf=False, linkd="/x/swarm-linkd")
    doc = json.loads(json.dumps({"caps": dataclasses.asdict(caps)}))
    assert recorded_caps(doc) == caps
    assert recorded_caps({}) is None  # a state written before: probe as before
    assert recorded_caps({"caps": {**doc["caps"], "new_field": 1}}) is None


def test_grouping_a_view_directly_gives_the_same_events_as_listing_every_change():
    from swarm.observe.events import grouped_view_changes

    before = link_view({("sat001", "sat002"): impairment(delay="5ms"), ("sat009", "sat001"): Impairment(up=False)},
                       {("sat004", "sat005")})
    after = link_view(_default_links(), {("sat005", "sat006")})
    assert grouped_view_changes(before, after, bulk=8) == grouped_link_changes(link_changes(before, after), bulk=8)


def test_the_rules_of_many_nodes_go_to_the_switch_in_one_restore(tmp_path):
    """Linkd.batched_rules (issue 39): one listing, one sysctl, one iptables-restore filling one node's chain and
    jump (an old port's jump dropped) and removing another node's jump and chain."""
    import threading
    from types import SimpleNamespace

    from netem.engines.drivers.linkd import Linkd
    from netem.engines.hold import LinkdHold
    from swarm.runtime.backends.netns.backend import NetnsHop
    from swarm.runtime.runner import RecordingRunner, Result

    listing = ("-P FORWARD ACCEPT\n-N SWARM_EMU_LINKS_2\n"
               "-A FORWARD -m physdev --physdev-out vp2 -j SWARM_EMU_LINKS_2\n"
               "-A FORWARD -m physdev --physdev-out old9 -j SWARM_EMU_LINKS_1\n")
    runner = RecordingRunner(answers=[(lambda a: a[-2:] == ["mangle", "-S"], lambda a: Result(a, 0, listing))])
    inputs: list = []
    record = runner.run

    def run(argv, **kw):
        inputs.append(kw.get("input"))
        return record(argv, **kw)
    runner.run = run  # type: ignore[method-assign]
    linkd = object.__new__(Linkd)
    linkd.swarm = SimpleNamespace(runner=runner, name="s")
    linkd.at_hop = NetnsHop(runner, lambda s: tmp_path)
    linkd._start_lock, linkd._batch = threading.Lock(), None
    prefix = ["ip", "netns", "exec", "swarm-emu_s"]
    with linkd.batched_rules() as nodes:
        linkd._batch["a"] = (prefix, "vp1", LinkdHold.at_hop(1),
                             "*mangle\n:SWARM_EMU_LINKS_1 - [0:0]\n-A SWARM_EMU_LINKS_1 -j NFQUEUE --queue-num 2\nCOMMIT\n")
        linkd._batch["b"] = (prefix, "vp2", LinkdHold.at_hop(2), None)
    assert nodes == ["a", "b"]
    assert [c[4:6] for c in runner.calls] == [["iptables", "-t"], ["sysctl", "-q"], ["iptables-restore", "--noflush"]]
    assert inputs[-1] == ("*mangle\n:SWARM_EMU_LINKS_1 - [0:0]\n-A SWARM_EMU_LINKS_1 -j NFQUEUE --queue-num 2\n"
                          "-D FORWARD -m physdev --physdev-out old9 -j SWARM_EMU_LINKS_1\n"
                          "-I FORWARD -m physdev --physdev-out vp1 -j SWARM_EMU_LINKS_1\n"
                          "-D FORWARD -m physdev --physdev-out vp2 -j SWARM_EMU_LINKS_2\n"
                          "-F SWARM_EMU_LINKS_2\n-X SWARM_EMU_LINKS_2\nCOMMIT\n")
