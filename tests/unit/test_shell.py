"""The batch protocol of the long-lived tc / nft processes (swarm.runtime.shell, pure parts) and the orbit
driver's per-node batches planned ahead (netem.runtime.orbit_batches). The processes themselves are exercised
live in tests/integration/test_orbit_batches_live.py (real tc and nft in namespaces)."""
from __future__ import annotations

import pytest

from netem.engines import ENGINES
from netem.runtime.orbit_batches import plan_node_batch
from netem.spec.links import Impairment
from netem.state import node_links, signature
from netem.tc import nft_clear_script, plan_nft
from swarm.caps import Capabilities
from swarm.runtime.shell import NFT, TC, TC_ACK_DEV, _check_lines, one_line_nft

# ------------------------------------------------------------------------------------------------ tc
LINES = ["class change dev e parent 5eed: classid 5eed:1 htb rate 5mbit ceil 5mbit quantum 1514",
         "class change dev e parent 5eed: classid 5eed:2 htb rate 9mbit ceil 9mbit quantum 1514",
         "qdisc change dev e parent 5eed:2 handle 2: netem limit 1000 delay 3ms"]


def test_tc_frame_puts_the_sentinel_after_the_batch_and_counts_it():
    text, taken = TC.frame(LINES, first=7, seq=3)
    assert text.splitlines() == [*LINES, f"qdisc show dev {TC_ACK_DEV}"]
    assert taken == len(LINES) + 1 and len(TC_ACK_DEV) <= 15  # a device name the kernel could hold


def test_tc_parse_waits_for_the_sentinel_line_number():
    first = 7  # the batch is lines 7..9, the sentinel line 10
    assert TC.parse([], LINES, first, 1) is None
    assert TC.parse([f'Cannot find device "{TC_ACK_DEV}"'], LINES, first, 1) is None  # its reason, not yet its end
    # an earlier batch's sentinel (line 6) does not end this one
    assert TC.parse([f'Cannot find device "{TC_ACK_DEV}"', "Command failed -:6"], LINES, first, 1) is None
    assert TC.parse([f'Cannot find device "{TC_ACK_DEV}"', "Command failed -:10"], LINES, first, 1) == []


def test_tc_parse_attributes_each_failure_to_its_line_with_its_reason():
    said = ["RTNETLINK answers: No such file or directory", "Command failed -:8",
            "Error: Exclusivity flag on, cannot modify.", "We have an error talking to the kernel", "Command failed -:9",
            f'Cannot find device "{TC_ACK_DEV}"', "Command failed -:10"]
    assert TC.parse(said, LINES, 7, 1) == [
        (LINES[1], "RTNETLINK answers: No such file or directory"),
        (LINES[2], "Error: Exclusivity flag on, cannot modify. We have an error talking to the kernel")]


def test_tc_parse_does_not_take_a_warning_of_a_good_line_for_a_failure():
    said = ["Warning: sch_htb: quantum of class 50001 is big.", f'Cannot find device "{TC_ACK_DEV}"',
            "Command failed -:10"]
    assert TC.parse(said, LINES, 7, 1) == []


# ----------------------------------------------------------------------------------------------- nft
TABLE = one_line_nft(plan_nft("eth1", {"02:00:0a:00:00:02": Impairment(up=False),
                                       "02:00:0a:00:00:03": Impairment(loss=5)}, {"02:00:0a:00:00:02": "a->b"}) or "")


def test_one_line_nft_is_the_script_with_statements_joined():
    assert "\n" not in TABLE
    assert TABLE.startswith("table netdev swarm_emu; delete table netdev swarm_emu; table netdev swarm_emu { "
                            "chain links_in { type filter hook ingress device \"eth1\" priority -500; policy accept; ")
    assert TABLE.endswith('counter drop comment "02:00:0a:00:00:03 loss 5%"; }; }')  # `}` `}` need a `;` between
    assert ";;" not in TABLE and "{ ;" not in TABLE
    assert one_line_nft(nft_clear_script()) == "table netdev swarm_emu; delete table netdev swarm_emu"


def test_nft_frame_ends_with_a_word_that_is_no_command():
    text, taken = NFT.frame([TABLE], first=1, seq=42)
    assert text == f"{TABLE}\nswarm_ack_42\n" and taken == 2


def test_nft_parse_done_at_its_own_sentinel_only():
    sentinel_error = ["Error: syntax error, unexpected newline, expecting string"]
    assert NFT.parse(sentinel_error, [TABLE], 1, 5) is None
    assert NFT.parse([*sentinel_error, "swarm_ack_4", "^^^^^^^^^^^"], [TABLE], 1, 5) is None  # the batch before
    assert NFT.parse(["^^^^^^^^^^^", *sentinel_error, "swarm_ack_5"], [TABLE], 1, 5) == []


def test_nft_parse_attributes_an_error_to_the_echoed_line():
    bad = "add rule netdev swarm_emu links_in bogus"
    said = ["Error: syntax error, unexpected newline", bad, "                                        ^",
            "Error: syntax error, unexpected newline, expecting string", "swarm_ack_2"]
    assert NFT.parse(said, [bad, TABLE], 3, 2) == [(bad, "Error: syntax error, unexpected newline")]
    kernel = ["Error: Could not process rule: No such file or directory", TABLE, "^^^^^",
              "Error: syntax error, unexpected newline, expecting string", "swarm_ack_2"]
    assert NFT.parse(kernel, [TABLE], 3, 2) == [(TABLE, "Error: Could not process rule: No such file or directory")]


@pytest.mark.parametrize("line", ["qdisc add dev e root\nqdisc del dev e root", "class change dev e \\"])
def test_a_line_that_would_become_two_or_join_the_next_is_refused(line):
    with pytest.raises(ValueError, match="batch line"):
        _check_lines([line])


def test_blank_lines_and_comments_are_not_sent():
    assert _check_lines(["", "  # note", " qdisc show dev e "]) == ["qdisc show dev e"]


# ---------------------------------------------------------------------------------- batches planned ahead
MACS = {"a": "02:00:0a:00:00:01", "b": "02:00:0a:00:00:02", "c": "02:00:0a:00:00:03"}
CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True, iperf3_version="",
                    batmand=False, ddsperf=False, htb=True, nfqueue=True, linkd="/bin/true")


def nft_engine():
    return ENGINES["nft"](CAPS)


def applied(engine, node: str, links: dict) -> tuple[dict, list]:
    """A node's record and tc plan as the controller leaves them after applying `links`."""
    egress, ingress, labels = node_links(links, node, MACS)
    cmds = engine.plan_node("eth1", egress, ingress, labels)
    return {"iface": "eth1", "tc": signature(cmds.tc), "nft": signature(cmds.nft)}, cmds.tc


def test_a_rate_change_is_an_in_place_class_change_and_no_nft():
    engine = nft_engine()
    before = {("a", "b"): Impairment(rate=10_000_000), ("b", "a"): Impairment(rate=10_000_000)}
    rec, tc = applied(engine, "a", before)
    after = {**before, ("a", "b"): Impairment(rate=20_000_000)}
    batch = plan_node_batch(engine, "a", rec, after, MACS, tc, nftables=True)
    assert batch is not None and batch.tc_kind == "in_place" and batch.nft_line is None
    assert batch.tc_lines == ["class change dev eth1 parent 5eed: classid 5eed:1 htb rate 20mbit ceil 20mbit "
                              "quantum 200000"]
    assert (batch.tc_sig, batch.nft_sig) == (applied(engine, "a", after)[0]["tc"], rec["nft"])


def test_a_link_going_down_replaces_the_receivers_table_and_rebuilds_the_senders_tree():
    engine = nft_engine()
    before = {("a", "b"): Impairment(rate=10_000_000), ("a", "c"): Impairment(rate=10_000_000)}
    after = {("a", "b"): Impairment(rate=10_000_000, up=False), ("a", "c"): Impairment(rate=10_000_000)}
    rec_b, tc_b = applied(engine, "b", before)
    batch_b = plan_node_batch(engine, "b", rec_b, after, MACS, tc_b, nftables=True)
    assert batch_b is not None and not batch_b.tc_lines
    assert batch_b.nft_line is not None and "ether saddr 02:00:0a:00:00:01 counter drop" in batch_b.nft_line
    rec_a, tc_a = applied(engine, "a", before)
    batch_a = plan_node_batch(engine, "a", rec_a, after, MACS, tc_a, nftables=True)
    assert batch_a is not None and batch_a.tc_kind == "rebuilt"  # one class fewer: another shape
    assert batch_a.tc_lines[0] == "qdisc del dev eth1 root" and batch_a.tc_lines[1].startswith("qdisc add dev eth1 root")
    assert len(batch_a.tc_lines) == 1 + len(batch_a.tc)


def test_the_first_tree_is_added_without_deleting_anything():
    engine = nft_engine()
    rec, tc = applied(engine, "a", {})
    batch = plan_node_batch(engine, "a", rec, {("a", "b"): Impairment(rate=10_000_000)}, MACS, tc, nftables=True)
    assert batch is not None and batch.tc_kind == "rebuilt" and batch.tc_lines[0].startswith("qdisc add dev eth1 root")


def test_unchanged_links_give_an_empty_batch():
    engine = nft_engine()
    links = {("a", "b"): Impairment(rate=10_000_000, up=False)}
    rec, tc = applied(engine, "a", links)
    batch = plan_node_batch(engine, "a", rec, links, MACS, tc, nftables=True)
    assert batch is not None and not batch.tc_lines and batch.nft_line is None and not batch.tc_kind


@pytest.mark.parametrize("change", ["stale", "no_iface", "tree_unknown", "segmentation", "linkd"])
def test_a_node_the_record_does_not_vouch_for_gets_the_full_apply(change):
    engine = nft_engine()
    links = {("a", "b"): Impairment(rate=10_000_000)}
    rec, tc = applied(engine, "a", links)
    if change == "stale":
        rec["stale"] = True
    elif change == "no_iface":
        rec.pop("iface")
    elif change == "tree_unknown":
        rec["tc"] = "something else"
    elif change == "segmentation":  # loss on a link it sends on: gso_max_segs must change, a command of its own
        links = {("a", "b"): Impairment(rate=10_000_000, loss=1)}
    else:
        rec["linkd_links"] = 2
    assert plan_node_batch(engine, "a", rec, links, MACS, tc, nftables=True) is None


def test_the_userspace_engine_has_no_batches():
    engine = ENGINES["userspace"](CAPS)
    assert plan_node_batch(engine, "a", {"iface": "eth1", "tc": signature([]), "nft": signature(None)}, {}, MACS, [],
                           nftables=True) is None
