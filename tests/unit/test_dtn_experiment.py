"""The dtn experiment's model and pure planners: sweep axes, swarm per test, contact plan into cuts and heals,
traffic plans, the UDP probe's table."""
import pytest

from experiments.dtn.model import chain_neighbours, experiment_from_dict, flows, swarm_nodes
from experiments.dtn.parse import ip_rows
from experiments.dtn.plan import probe_pairs, traffic_plans
from swarm.errors import SpecError

NETS = {"networks": {"isl": {"subnet": "10.210.9.0/24"}, "ground": {"subnet": "10.211.9.0/24"}}}


def exp(**kw):
    return experiment_from_dict({"type": "dtn", "name": "dtn-u", "swarm": NETS, **kw}, "u.yaml")


def test_patterns():
    nodes = swarm_nodes(3)
    assert nodes == ["sat01", "sat02", "sat03", "ground"]
    assert flows("chain", nodes) == [("sat01", "ground")]
    assert flows("all-to-ground", nodes) == [("sat01", "ground"), ("sat02", "ground"), ("sat03", "ground")]
    assert len(flows("all-to-all", nodes)) == 12
    assert chain_neighbours(nodes) == {"sat01": ["sat02"], "sat02": ["sat01", "sat03"], "sat03": ["sat02", "ground"],
                                       "ground": ["sat03"]}
    assert probe_pairs("chain", nodes) == [("sat01", "sat02"), ("sat02", "sat03"), ("sat03", "ground")]


def test_sweep_axes_make_one_test_each():
    e = exp(sizes=[1, 2], clas=["tcp", "mtcp"], rates=[10, "max"], bundle_sizes=["1kB", "100kB"], repeats=2,
            profiles=["none", {"rate": "10Mbit"}])
    tests = e.tests()
    assert len(tests) == 2 * 2 * 2 * 2 * 2 * 2
    assert tests[0].test_id == "n1-tcp-epidemic-none-1000B-10ps-r1"
    assert {t.rate for t in tests} == {10.0, 0.0} and {t.profile for t in tests} == {"none", "rate=10Mbit"}


def test_swarm_of_a_chain_test_has_agents_and_neighbour_peers():
    e = exp(sizes=[2], dtn={"janitor": "500ms"})
    spec = e.swarm_spec(e.tests()[0])
    nodes = spec.resolved_nodes()
    assert [n.name for n in nodes] == ["sat01", "sat02", "ground"] and nodes[2].role == "ground"
    assert nodes[1].dtn.static_peers == ["sat01", "ground"] and nodes[1].dtn.janitor == 0.5


@pytest.mark.parametrize("doc, message", [
    ({"pattern": "star"}, "pattern 'star': unknown pattern"),
    ({"rates": ["fast"]}, "rates 'fast': expected bundles per second"),
    ({"bundle_sizes": ["huge"]}, "bundle_sizes 'huge': expected a size"),
    ({"dtn": {"cla": "tcp"}}, "dtn.cla: set by the experiment (clas)"),
    ({"swarm": {"nodes": 3}}, "swarm.nodes: set by the experiment"),
    ({"dtn": {"storage": {"limit": "1kB"}}, "bundle_sizes": ["10kB"]}, "larger than the storage limit (1000 bytes)"),
    ({"contacts": {"text": "a contact +0 +1 sat01 ground 10", "periodic": {"period": "2s", "up": "1s"}}},
     "give exactly one of plan, text, periodic"),
    ({"contacts": {"periodic": {"period": "2s"}}}, "contacts.periodic.up: missing"),
    ({"faults": [{"at": "100s", "cut": ["sat01", "ground"]}]}, "at or after the experiment's end"),
])
def test_bad_experiments(doc, message):
    with pytest.raises(SpecError) as err:
        exp(**{"sizes": [2], **doc}) if "swarm" not in doc else experiment_from_dict(
            {"type": "dtn", "name": "dtn-u", **doc}, "u.yaml")
    assert message in str(err.value) and str(err.value).startswith("u.yaml")


def test_contact_plan_becomes_cuts_heals_and_delays():
    e = exp(sizes=[2], contacts={"text": "a contact +0 +30 sat01 sat02 1000\na contact +5 +30 sat02 ground 1000\n"
                                         "a range +0 +30 sat02 ground 1.3\n", "others": "down"})
    events = e.contact_events(swarm_nodes(2))
    assert [(ev.at, ev.action, ev.a, ev.b) for ev in events] == [
        (0, "down", "ground", "sat01"), (0, "down", "ground", "sat02"), (5, "up", "ground", "sat02"),
        (30, "down", "ground", "sat02"), (30, "down", "sat01", "sat02")]
    data = e.swarm_data(e.tests()[0])
    assert data["links"]["overrides"] == [{"between": ["ground", "sat02"], "delay": "1.3s"}]


def test_traffic_plans_count_expect_and_probe():
    e = exp(sizes=[2], rates=[4], duration="5s", ip_probe=True)
    test = e.tests()[0]
    ips = {"sat01": "10.210.9.2", "sat02": "10.210.9.3", "ground": "10.210.9.4"}
    plans = traffic_plans(e, test, ips, 1000.0, 3000)
    assert plans["sat01"]["flows"] == [{"dst": "ground", "size": 100000, "rate": 4.0, "count": 20}]
    assert plans["ground"]["receive"] and plans["ground"]["expect"] == 20 and not plans["sat02"]["receive"]
    assert plans["sat02"]["ip_probe"]["dsts"] == [{"dst": "ground", "ip": "10.210.9.4"}]
    m = exp(sizes=[2], rates=["max"], drain="3s")
    maxed = traffic_plans(m, m.tests()[0], ips, 1000.0, 3000)
    assert "expect" not in maxed["ground"] and maxed["ground"]["quiet"] == 3.0


def test_max_rate_receivers_wait_out_long_round_trips():
    """At 2 s one-way a TCPCL session's first bundle arrived ~6 round trips after the start (measured: session
    up after 12 s, the first 100 kB written in 8.3 s more): a receiver that called the link quiet 5 s after the
    sending ended got 0 bundles."""
    ips = {"sat01": "10.180.9.2", "ground": "10.180.9.3"}
    m = exp(sizes=[1], rates=["max"], drain="60s")
    assert traffic_plans(m, m.tests()[0], ips, 1000.0, 3000)["ground"]["quiet"] == 5.0
    assert traffic_plans(m, m.tests()[0], ips, 1000.0, 3000, rtt=4.0)["ground"]["quiet"] == 29.0
    assert traffic_plans(m, m.tests()[0], ips, 1000.0, 3000, rtt=8.0)["ground"]["quiet"] == 53.0
    assert traffic_plans(m, m.tests()[0], ips, 1000.0, 3000, rtt=20.0)["ground"]["quiet"] == 60.0  # the drain


def test_ip_rows_bin_per_second():
    sent = {"a": [{"ev": "ip_sent", "dst": "b", "seq": i, "t": 100.0 + 0.25 * i} for i in range(8)]}
    recv = {"b": [{"ev": "ip_recv", "src": "a", "seq": i, "t_sent": 0, "t": 0} for i in (0, 1, 2, 3, 7)]}
    rows = ip_rows(sent, recv, 100.0, "r", "t")
    assert [(r["second"], r["sent"], r["received"], r["lost"]) for r in rows] == [(0, 4, 4, 0), (1, 4, 1, 3)]


def test_static_routing_down_a_chain():
    e = exp(sizes=[2], routings=["static"])
    nodes = e.swarm_spec(e.tests()[0]).resolved_nodes()
    assert [(r.to, r.via) for r in nodes[0].dtn.routes] == [("*", "sat02")]
    assert [(r.to, r.via) for r in nodes[1].dtn.routes] == [("*", "ground")] and nodes[2].dtn.routes == []


def test_swarms_lists_each_distinct_swarm_once():
    """Issue 29 defect 1: `--check` of a dtn experiment asked the model for `swarm_spec(size)` and crashed; the
    type now lists its swarms: one per size x CLA x routing x profile, not per bundle size, rate or repeat."""
    from experiments.dtn.entry import TYPE
    exp = experiment_from_dict({"type": "dtn", "name": "d", "sizes": [2, 3], "clas": ["tcp"], "routings": ["epidemic"],
                                "profiles": ["none", {"delay": "10ms"}], "bundle_sizes": ["1kB", "10kB"],
                                "rates": [1, 2], "repeats": 2, "backend": "netns"}, "d.yaml")
    swarms = TYPE.swarms(exp)
    assert len(swarms) == 4
    assert sorted(len(s.resolved_nodes()) for s in swarms) == [3, 3, 4, 4]


def test_dtn_durations_take_every_unit_swarm_units_knows():
    """`duration: 30min` was refused though every other duration field takes `min` (issue 40, item 11): the DTN
    fields read swarm.units' one table of duration units."""
    e = exp(duration="30min", drain="1.5h", contacts={"periodic": {"period": "2min", "up": "1min"}})
    assert (e.duration, e.drain) == (1800.0, 5400.0)
    assert exp(duration="1d").duration == 86400.0
    with pytest.raises(SpecError, match="duration '30 fortnights'"):
        exp(duration="30 fortnights")
