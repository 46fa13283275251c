"""`cla: ltp` (pure parts): the spec piece, swarm-ltpcla's command per node, the down windows of a contact plan."""
import pytest
from pydantic import ValidationError

from swarm.dtn.contacts import LinkEvent, down_windows
from swarm.dtn.agents import LinkView
from swarm.dtn.agents.ltp import ltp_down_windows
from swarm.dtn.plan import plan_agents
from swarm.spec.dtn import LTP_MAX_BUNDLE, DtnSpec, LtpSpec


def test_ltp_defaults():
    d = DtnSpec(cla="ltp")
    assert d.cla_port() == 1113 and d.ltp.segment == 1360 and d.ltp.red == 1.0
    assert d.max_bundle() == LTP_MAX_BUNDLE
    assert DtnSpec(cla="ltp", ltp={"rate": "1Gbit"}).ltp.rate == 1_000_000_000


@pytest.mark.parametrize("value", [63, 65_508, 0, "big", True])
def test_segment_outside_udp_datagram_refused_naming_field(value):
    with pytest.raises(ValidationError) as err:
        LtpSpec(segment=value)
    assert f"dtn.ltp.segment {value!r}: must be a whole number of bytes in 64..65,507" in str(err.value)


def test_segment_bounds_accepted():
    assert LtpSpec(segment=64).segment == 64 and LtpSpec(segment=65_507).segment == 65_507


@pytest.mark.parametrize("field, value, message", [
    ("rate", "0", "dtn.ltp.rate '0': must be positive"),
    ("rate", "fast", "dtn.ltp.rate 'fast': expected a rate"),
    ("red", 1.5, "less than or equal to 1"),
])
def test_bad_ltp_values(field, value, message):
    with pytest.raises(ValidationError) as err:
        LtpSpec(**{field: value})
    assert message in str(err.value)


def _plans(link_of, piece=None):
    piece = piece or DtnSpec(cla="ltp")
    nodes = [("sat01", "10.190.0.1", piece), ("gw", "10.190.0.2", None), ("sat03", "10.190.0.3", piece)]
    return plan_agents(nodes, "10.190.0.0/24", lambda n: f"/w/{n}", link_of=link_of)


def test_plan_runs_dtnd_with_ecla_and_ltpcla_per_node():
    plans = _plans(lambda a, b: LinkView(delay=4.0, rate=1_000_000_000))
    p1 = plans[0]
    assert "--ecla" in p1.argv and "-C" not in p1.argv
    assert p1.argv[p1.argv.index("-s") + 1] == "ecla+ltp://10.190.0.3:1113/sat03"
    a = p1.ltp_argv
    assert a[0] == "swarm-ltpcla"
    # engine IDs follow the node index (sat03 is the swarm's third node even though node 2 has no agent)
    assert a[a.index("--engine") + 1] == "1"
    assert a[a.index("--peer") + 1] == "3,10.190.0.3:1113,1000000000,4"
    assert a[a.index("--bind") + 1] == "10.190.0.1:1113"
    assert a[a.index("--ws") + 1] == "ws://127.0.0.1:3000/ws/ecla"
    assert a[a.index("--segment") + 1] == "1360"
    assert a[a.index("--log") + 1] == "/w/sat01/ltp.csv" and a[a.index("--down") + 1] == "/w/sat01/ltp-down.txt"
    assert plans[1].ltp_argv[plans[1].ltp_argv.index("--engine") + 1] == "3"


def test_plan_other_clas_have_no_ltpcla():
    plans = _plans(lambda a, b: LinkView(), DtnSpec(cla="tcp"))
    assert all(p.ltp_argv is None for p in plans) and "--ecla" not in plans[0].argv


def test_link_without_rate_takes_ltp_rate_or_is_refused():
    with pytest.raises(ValueError, match=r"dtn.ltp.rate: link sat01->sat03 has no rate to pace LTP at"):
        _plans(lambda a, b: LinkView(delay=2.0, rate=None))
    plans = _plans(lambda a, b: LinkView(delay=2.0), DtnSpec(cla="ltp", ltp={"rate": "100Mbit"}))
    a = plans[0].ltp_argv
    assert a[a.index("--peer") + 1] == "3,10.190.0.3:1113,100000000,2"


def test_ltp_with_discovery_refused():
    with pytest.raises(ValueError, match="cla ltp needs static peers"):
        _plans(lambda a, b: LinkView(rate=1), DtnSpec(cla="ltp", peers="auto"))


def test_down_windows_from_link_schedule():
    events = [LinkEvent(0.0, "down", "a", "b"), LinkEvent(10.0, "up", "a", "b"), LinkEvent(20.0, "down", "a", "b"),
              LinkEvent(25.0, "up", "a", "b"), LinkEvent(30.0, "down", "b", "c")]
    w = down_windows(events, horizon=60.0)
    assert w["a"] == [("b", -3600.0, 10.0), ("b", 20.0, 25.0)]
    assert ("a", 20.0, 25.0) in w["b"] and ("c", 30.0, 60.0 + 86_400.0) in w["b"]
    assert w["c"] == [("b", 30.0, 60.0 + 86_400.0)]


def test_ltp_down_file_is_absolute_unix_per_engine():
    text = ltp_down_windows([("sat03", 20.0, 25.5)], {"sat01": 1, "sat03": 3}, t0=1000.0)
    assert text.splitlines()[1] == "3 1020.000 1025.500"


def test_ltp_handovers_counts_only_bundles_given_to_the_ltp_module():
    from swarm.dtn.agents.dtn7.log import handovers
    log = (" 2026-11-25T09:53:31.116Z INFO  dtn7::core::processing      > Sending bundle succeeded: "
           "dtn://sat01/-848915611115-0 10.192.1.3:1113 ltp in 509.33µs\n"
           " 2026-11-25T09:53:31.117Z INFO  dtn7::core::processing      > Sending bundle succeeded: "
           "dtn://sat01/-848915611116-0 10.192.1.3:4556 tcp in 1ms\n"
           " 2026-11-25T09:53:31.119Z INFO  dtn7::core::processing      > Sending bundle succeeded: "
           "dtn://sat01/-848915611118-0 10.192.1.3:1113 ltp in 407.177µs\n")
    assert handovers(log, "ltp") == 2 and handovers("", "ltp") == 0 and handovers(log, "tcp") == 1


def test_engine_ids_settable_and_outside_peers_passed_to_ltpcla():
    ion = {"engine": 9, "address": "192.0.2.7:1113", "rate": "10Mbit", "owlt": "1.5s"}
    plans = plan_agents([("sat01", "10.190.0.1", DtnSpec(cla="ltp", ltp={"engine": 41, "peers": [ion]})),
                         ("sat02", "10.190.0.2", DtnSpec(cla="ltp"))], "10.190.0.0/24", lambda n: f"/w/{n}",
                        link_of=lambda a, b: LinkView(delay=0.5, rate=1_000_000))
    a, b = plans[0].ltp_argv, plans[1].ltp_argv
    assert a[a.index("--engine") + 1] == "41" and b[b.index("--engine") + 1] == "2"
    assert [a[i + 1] for i, x in enumerate(a) if x == "--peer"] == ["2,10.190.0.2:1113,1000000,0.5",
                                                                    "9,192.0.2.7:1113,10000000,1.5"]
    assert [b[i + 1] for i, x in enumerate(b) if x == "--peer"] == ["41,10.190.0.1:1113,1000000,0.5"]
    with pytest.raises(ValueError, match=r"dtn.ltp.peers\[0\].rate: peer 192.0.2.7:1113 has no rate"):
        plan_agents([("s1", "10.190.0.1", DtnSpec(cla="ltp", ltp={"peers": [{**ion, "rate": None}]})),
                     ("s2", "10.190.0.2", DtnSpec(cla="ltp"))], "10.190.0.0/24", lambda n: f"/w/{n}",
                    link_of=lambda a, b: LinkView(rate=1))


@pytest.mark.parametrize("address", ["ion:1113", "192.0.2.7", "192.0.2.7:0", "192.0.2.7:70000", "300.1.1.1:1113"])
def test_outside_peer_with_a_bad_address_names_field_and_value(address):
    with pytest.raises(ValidationError) as err:
        LtpSpec(peers=[{"engine": 9, "address": address}])
    assert f"dtn.ltp.peers.address {address!r}: expected IPv4:port" in str(err.value)


@pytest.mark.parametrize("pieces, message", [
    ({"sat01": {"engine": 2}, "sat02": {}}, "node 'sat02': dtn.ltp.engine 2: used twice (also node 'sat01')"),
    ({"sat01": {"peers": [{"engine": 2, "address": "192.0.2.7:1113"}]}, "sat02": {}},
     "node 'sat01': dtn.ltp.peers engine 2: used twice (also node 'sat02')"),
    ({"sat01": {"peers": [{"engine": 9, "address": "192.0.2.7:1113"}]},
      "sat02": {"peers": [{"engine": 9, "address": "192.0.2.8:1113"}]}},
     "node 'sat02': dtn.ltp.peers engine 9: used twice (also peer 192.0.2.7:1113)"),
])
def test_an_engine_id_used_twice_is_refused(pieces, message):
    from swarm.spec.dtn import check_dtn_nodes
    with pytest.raises(ValueError) as err:
        check_dtn_nodes({n: DtnSpec(cla="ltp", ltp=p) for n, p in pieces.items()})
    assert str(err.value) == message


def test_one_outside_peer_declared_on_every_node_is_one_engine():
    from swarm.spec.dtn import check_dtn_nodes
    ion = {"engine": 9, "address": "192.0.2.7:1113"}
    check_dtn_nodes({n: DtnSpec(cla="ltp", ltp={"peers": [ion]}) for n in ("sat01", "sat02", "sat03")})


def _static(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, x in enumerate(argv) if x == "-s"]


def test_an_outside_ltp_peer_with_a_node_id_is_a_static_peer_of_dtnd():
    """dtnd sends to the outside engine only if it knows it as a peer: its address (where swarm-ltpcla knows it)
    and its node ID (given, or ipn:<engine>.0 with eid ipn); a dtn:// name cannot be guessed from an engine ID."""
    link = lambda a, b: LinkView(delay=0.5, rate=1_000_000)  # noqa: E731
    ion = {"engine": 77, "address": "192.0.2.7:1113", "rate": "10Mbit"}

    def plans(eid, peer, routing="epidemic"):
        return plan_agents([(n, f"10.190.0.{i}", DtnSpec(cla="ltp", eid=eid, routing=routing, ltp={"peers": [peer]}))
                            for i, n in enumerate(("sat01", "sat02"), start=1)], "10.190.0.0/24", lambda n: f"/w/{n}",
                           link_of=link)

    ipn = plans("ipn", ion)
    assert _static(ipn[0].argv) == ["ecla+ltp://10.190.0.2:1113/2", "ecla+ltp://192.0.2.7:1113/77"]
    assert ipn[0].expected_peers == ("2",)  # readiness waits for the swarm's peers only
    named = plans("dtn", {**ion, "node": "dtn://ion77/"})
    assert _static(named[1].argv) == ["ecla+ltp://10.190.0.1:1113/sat01", "ecla+ltp://192.0.2.7:1113/ion77"]
    assert _static(plans("dtn", ion)[0].argv) == ["ecla+ltp://10.190.0.2:1113/sat02"]
    routes = plans("ipn", {**ion, "node": "ipn:900.0"}, routing="static")[0].files["routes.txt"]
    assert routes.splitlines()[1:] == ["1 ** ipn:2.* ipn:2.0", "2 ** ipn:900.* ipn:900.0"]


@pytest.mark.parametrize("eid, node, message", [
    ("ipn", "dtn://ion/", "node 'sat01': dtn.ltp.peers[0].node 'dtn://ion/': a dtn node ID, but dtn.eid is 'ipn'"),
    ("dtn", "dtn://sat02/", "node 'sat01': dtn.ltp.peers[0].node 'dtn://sat02/': that is node 'sat02' of this swarm, "
                            "not a node outside it"),
    ("ipn", None, "node 'sat01': dtn.ltp.peers[0].node 'ipn:2.0': that is node 'sat02' of this swarm, not a node "
                  "outside it"),
])
def test_an_outside_peers_node_id_of_the_wrong_scheme_or_a_swarm_nodes_is_refused(eid, node, message):
    from swarm.spec.dtn import check_dtn_nodes
    peer = {"engine": 2 if node is None else 9, "address": "192.0.2.7:1113", **({"node": node} if node else {})}
    pieces = {"sat01": DtnSpec(cla="ltp", eid=eid, ltp={"engine": 5, "peers": [peer]}),
              "sat02": DtnSpec(cla="ltp", eid=eid, number=2 if eid == "ipn" else None, ltp={"engine": 6})}
    with pytest.raises(ValueError) as err:
        check_dtn_nodes(pieces)
    assert str(err.value) == message


def test_an_outside_peers_node_that_is_no_node_id_names_field_and_value():
    with pytest.raises(ValidationError) as err:
        LtpSpec(peers=[{"engine": 9, "address": "192.0.2.7:1113", "node": "ion77"}])
    assert "dtn.ltp.peers.node 'ion77': expected a node ID, dtn://<name>/ or ipn:<number>.0" in str(err.value)
