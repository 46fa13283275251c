"""`dtn.eid: ipn` (issue 36 part 5): node numbers, node IDs, the agents' commands, routes and the traffic plan
(pure planners), and the bad inputs refused with one line naming the field and value."""
from __future__ import annotations

import pytest

from experiments.dtn.model import experiment_from_dict
from experiments.dtn.parse import bundle_rows
from experiments.dtn.plan import traffic_plans
from swarm.dtn.contacts import parse_contact_plan, resolve_nodes
from swarm.dtn.plan import plan_agents
from swarm.errors import SpecError
from swarm.spec.dtn import DtnSpec, eid_glob, node_key, node_numbers, resolve_node, service_of
from swarm.spec.model import spec_from_dict

IPN = {"eid": "ipn"}


def _nodes(*pieces):
    return [(f"n{i}", f"10.1.0.{i + 1}", p) for i, p in enumerate(pieces, start=1)]


def test_node_ids_and_services():
    piece = DtnSpec(**IPN)
    assert piece.node_id("sat01", 3) == "ipn:3.0" and piece.app_eid("sat01", 3) == "ipn:3.1"
    assert DtnSpec(eid="ipn", number=40).node_id("sat01", 3) == "ipn:40.0"
    assert DtnSpec(eid="ipn", ltp={"engine": 7}).node_id("sat01", 3) == "ipn:7.0"  # ION: engine = node number
    assert DtnSpec(eid="ipn", ltp={"engine": 7}, number=9).node_id("x", 1) == "ipn:9.0"
    assert DtnSpec().node_id("sat01", 3) == "dtn://sat01/" and DtnSpec().app_eid("sat01", 3) == "dtn://sat01/in"
    assert [node_key(e) for e in ("ipn:12.0", "dtn://sat01/")] == ["12", "sat01"]
    assert [service_of(e) for e in ("ipn:12.1", "dtn://sat01/in")] == ["1", "in"]
    assert [eid_glob(e) for e in ("ipn:12.0", "dtn://sat01/")] == ["ipn:12.*", "dtn://sat01/*"]


def test_numbers_count_every_node_so_they_agree_with_ion_plans():
    pieces = {"gw": None, "sat01": DtnSpec(**IPN), "sat02": DtnSpec(eid="ipn", number=77)}
    assert node_numbers(pieces) == {"sat01": 2, "sat02": 77}
    plan = parse_contact_plan("a contact +0 +10 2 77 1000\n")
    resolved = resolve_nodes(plan, ["gw", "sat01", "sat02"], numbers=node_numbers(pieces))
    assert (resolved.contacts[0].a, resolved.contacts[0].b) == ("sat01", "sat02")


def test_dtn7_plans_numbered_nodes_peers_and_routes():
    piece = DtnSpec(eid="ipn", routing="static", routes=[{"to": "ipn:3.0", "via": "n2"}])
    plans = plan_agents(_nodes(piece, piece, piece), "10.1.0.0/16", lambda n: f"/w/{n}")
    argv = plans[0].argv
    assert argv[:7] == ["dtnd", "-n", "1", "-W", "/w/n1", "-e", "1"]
    assert argv[-4:] == ["-s", "tcp://10.1.0.3:4556/2", "-s", "tcp://10.1.0.4:4556/3"]
    assert plans[0].node_id == "ipn:1.0" and plans[0].expected_peers == ("2", "3")
    assert plans[0].files["routes.txt"].splitlines()[1:] == [
        "1 ** ipn:2.* ipn:2.0", "2 ** ipn:3.* ipn:3.0", "3 ** ipn:3.* ipn:2.0"]


def test_hardy_plans_numbered_nodes_peers_and_routes():
    piece = DtnSpec(agent="hardy", eid="ipn", routing="static", routes=[{"to": "*", "via": "ipn:2.0"}],
                    static_peers=["ipn:2.0"])
    plans = plan_agents(_nodes(piece, DtnSpec(**IPN)), "10.1.0.0/16", lambda n: "/w")
    argv = plans[0].argv
    assert argv[argv.index("--node") + 1] == "ipn:1.0" and argv[argv.index("--service") + 1] == "1"
    assert [argv[i + 1] for i, w in enumerate(argv) if w in ("--peer", "--route")] == [
        "ipn:2.0@10.1.0.3:4556", "ipn:**=ipn:2.0"]
    assert plans[0].expected_peers == ("2",)


def test_readiness_of_numbered_nodes():
    from swarm.dtn.agents.dtn7.plan import readiness as dtn7_ready
    from swarm.dtn.agents.hardy.plan import readiness as hardy_ready

    plans = plan_agents(_nodes(DtnSpec(**IPN), DtnSpec(agent="hardy", eid="ipn")), "10.1.0.0/16", lambda n: "/w")
    assert dtn7_ready(plans[0], "ipn:1.0", '{"2": {}}') is None
    assert dtn7_ready(plans[0], "dtn://n1/", '{"2": {}}') == "node ID is 'dtn://n1/', not 'ipn:1.0'"
    assert hardy_ready(plans[1], "ipn:2.0", '["ipn:1.0"]') is None
    assert hardy_ready(plans[1], "ipn:2.0", '[]') == "peers missing: 1"


def test_traffic_plan_sends_to_numbered_endpoints_and_rows_name_nodes():
    exp = experiment_from_dict({"type": "dtn", "name": "ipn", "pattern": "chain", "sizes": [1], "rates": [2],
                                "duration": "1s", "dtn": IPN})
    test = exp.tests()[0]
    plans = traffic_plans(exp, test, {"sat01": "10.1.0.2", "ground": "10.1.0.3"}, 100.0, 3000, 0.0,
                          {"sat01": "ipn:1.1", "ground": "ipn:2.1"})
    assert plans["sat01"]["flows"][0]["eid"] == "ipn:2.1" and plans["ground"]["service"] == "1"
    sent = {"sat01": [{"ev": "sent", "dst": "ipn:2.1", "to": "ground", "seq": 0, "t": 1.0, "size": 10, "ok": True}]}
    got = {"ground": [{"ev": "recv", "src": "ipn:1.0", "from": "sat01", "seq": 0, "t": 1.5, "bid": "ipn:1.0-1-0"}]}
    row = bundle_rows(sent, got)[0]
    assert (row["src"], row["dst"], row["delivered"], row["latency_s"]) == ("sat01", "ground", True, 0.5)


@pytest.mark.parametrize("dtn, message", [
    ({"eid": "x500"}, "dtn.eid 'x500': unknown eid (known: dtn, ipn)"),
    ({"eid": "ipn", "static_peers": ["dtn://sat02/"]},
     "node 'sat01': dtn.static_peers 'dtn://sat02/': a dtn endpoint, but dtn.eid is 'ipn' (give the node's name or "
     "its ipn node ID) (DTN nodes: sat01, sat02, sat03)"),
    ({"eid": "ipn", "static_peers": ["ipn:9.0"]},
     "node 'sat01': dtn.static_peers 'ipn:9.0': no DTN node of that number (DTN nodes: sat01, sat02, sat03)"),
    ({"static_peers": ["ipn:2.0"]},
     "node 'sat01': dtn.static_peers 'ipn:2.0': a ipn endpoint, but dtn.eid is 'dtn' (give the node's name or its "
     "dtn node ID) (DTN nodes: sat01, sat02, sat03)"),
    ({"eid": "ipn", "routing": "static", "routes": [{"to": "dtn://sat03/", "via": "sat02"}]},
     "node 'sat01': dtn.routes[0].to 'dtn://sat03/': a dtn endpoint, but dtn.eid is 'ipn'"),
])
def test_bad_endpoint_input_is_one_line(dtn, message):
    with pytest.raises(SpecError) as err:
        spec_from_dict({"name": "ipn", "node_list": [{"name": "sat01", "dtn": dtn}, {"name": "sat02"}, {"name": "sat03"}],
                        "defaults": {"dtn": {"eid": dtn.get("eid", "dtn")}}})
    text = str(err.value)
    assert message in text and "\n" not in text


def test_a_number_used_twice_and_mixed_schemes_are_refused():
    with pytest.raises(SpecError, match=r"dtn.number 1: ipn node number used twice \(also node 'sat01'\)"):
        spec_from_dict({"name": "ipn", "defaults": {"dtn": IPN},
                        "node_list": [{"name": "sat01"}, {"name": "sat02", "dtn": {"eid": "ipn", "number": 1}}]})
    with pytest.raises(SpecError, match=r"dtn.eid: nodes use dtn, ipn; all agents of a swarm share one"):
        spec_from_dict({"name": "ipn", "defaults": {"dtn": {}},
                        "node_list": [{"name": "sat01"}, {"name": "sat02", "dtn": IPN}]})


def test_resolve_node_accepts_names_and_node_ids():
    numbers = {"a": 1, "b": 5}
    assert [resolve_node(t, "ipn", numbers, "f") for t in ("a", "ipn:5.0")] == ["a", "b"]
    assert resolve_node("dtn://b/", "dtn", numbers, "f") == "b"
