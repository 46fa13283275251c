"""ION contact plans: parsing, bad lines named by number, node mapping, and the link schedule they mean."""
import pytest

from swarm.dtn.contacts import (
    LinkEvent,
    availability,
    link_schedule,
    parse_contact_plan,
    periodic_plan,
    resolve_nodes,
)

PLAN = """\
# two satellites and a ground station (ION ionadmin syntax)
1 1 ''
s
m horizon +0
a contact +0 +10 1 2 100000
a contact +0 +10 2 1 100000
a contact +20 +30 sat02 ground 125000 1.0
a range +0 +30 1 2 1
a range +20 +30 sat02 ground 1.3
"""


def test_parses_contacts_and_ranges_and_ignores_other_ionadmin_commands():
    plan = parse_contact_plan(PLAN)
    assert [(c.start, c.end, c.a, c.b, c.rate, c.line) for c in plan.contacts] == [
        (0, 10, "1", "2", 100000, 5), (0, 10, "2", "1", 100000, 6), (20, 30, "sat02", "ground", 125000, 7)]
    assert [(r.a, r.b, r.owlt) for r in plan.ranges] == [("1", "2", 1), ("sat02", "ground", 1.3)]
    assert plan.horizon() == 30


@pytest.mark.parametrize("line, message", [
    ("a contact +0 +10 1 2", "line 3: 'a contact' takes 5 or 6 fields"),
    ("a contact +10 +5 1 2 100", "line 3: until '+5' is not after from '+10'"),
    ("a contact +0 +10 1 1 100", "line 3: node '1' to itself"),
    ("a contact +0 +10 1 2 fast", "line 3: rate (bytes/s) 'fast': expected a non-negative number"),
    ("a contact now +10 1 2 100", "line 3: time 'now': expected +<seconds> or yyyy/mm/dd-hh:mm:ss"),
    ("a contact +0 2026/01/01-00:00:10 1 2 100", "line 3: mixes a relative and an absolute time"),
    ("a contact +0 +10 1 2 100 2", "line 3: confidence '2': must be between 0 and 1"),
    ("a plan +0 +10 1 2 100", "line 3: 'a plan': only 'a contact' and 'a range'"),
    ("contact +0 +10 1 2 100", "line 3: unknown command 'contact'"),
    ("a range +0 +10 1 2", "line 3: 'a range' takes 5 fields"),
])
def test_a_bad_line_is_named_by_its_number(line, message):
    text = "# header\n\n" + line + "\na contact +0 +1 1 2 10\n"
    with pytest.raises(ValueError) as err:
        parse_contact_plan(text, "plan.txt")
    assert str(err.value).startswith("plan.txt " + message)


def test_absolute_times_are_relative_to_the_earliest():
    plan = parse_contact_plan("a contact 2026/11/22-12:00:00 2026/11/22-12:00:30 1 2 10\n"
                              "a contact 2026/11/22-12:01:00 2026/11/22-12:01:00.5 2 1 10\n")
    assert [(c.start, c.end) for c in plan.contacts] == [(0, 30), (60, 60.5)]


def test_node_numbers_map_to_swarm_nodes_and_unknown_nodes_are_refused():
    nodes = ["sat01", "sat02", "ground"]
    plan = resolve_nodes(parse_contact_plan(PLAN), nodes)
    assert {(c.a, c.b) for c in plan.contacts} == {("sat01", "sat02"), ("sat02", "sat01"), ("sat02", "ground")}
    with pytest.raises(ValueError, match=r"line 1: node '7': no such node \(nodes: sat01, sat02, ground, or 1..3\)"):
        resolve_nodes(parse_contact_plan("a contact +0 +1 1 7 10"), nodes)


def test_schedule_cuts_pairs_out_of_contact_and_heals_them_on_time():
    plan = resolve_nodes(parse_contact_plan(PLAN), ["sat01", "sat02", "ground"])
    assert link_schedule(plan) == [
        LinkEvent(0, "down", "ground", "sat02"),
        LinkEvent(10, "down", "sat01", "sat02"),
        LinkEvent(20, "up", "ground", "sat02"),
        LinkEvent(30, "down", "ground", "sat02"),
    ]
    others = link_schedule(plan, ["sat01", "sat02", "ground"], others="down")
    assert LinkEvent(0, "down", "ground", "sat01") in others


def test_overlapping_contacts_in_both_directions_merge():
    plan = parse_contact_plan("a contact +0 +10 a b 1\na contact +5 +15 b a 1\na contact +20 +25 a b 1\n")
    assert link_schedule(plan) == [LinkEvent(15, "down", "a", "b"), LinkEvent(20, "up", "a", "b"),
                                   LinkEvent(25, "down", "a", "b")]
    assert availability(plan, "b", "a") == pytest.approx(20 / 25)


def test_periodic_plan_gives_half_availability():
    text = periodic_plan(["a", "b"], [("a", "b")], period=10, up=5, duration=60)
    plan = parse_contact_plan(text)
    assert availability(plan, "a", "b", 60) == pytest.approx(0.5)
    assert len(plan.contacts) == 12
