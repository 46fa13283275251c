"""The `dtn:` spec piece and the dtnd command planner (pure)."""
import pytest
from pydantic import ValidationError

from swarm.dtn.agents import Peer
from swarm.dtn.agents.dtn7.plan import plan_agent, readiness, static_routes
from swarm.dtn.plan import plan_agents
from swarm.spec.dtn import DtnSpec, check_dtn_nodes, endpoint, parse_seconds, parse_size


def test_defaults_and_endpoint():
    d = DtnSpec()
    assert (d.agent, d.cla, d.routing, d.peers, d.storage.backend) == ("dtn7", "tcp", "epidemic", "static", "mem")
    assert d.cla_port() == 4556 and DtnSpec(cla="mtcp").cla_port() == 16162 and DtnSpec(cla="http").cla_port() == 3000
    assert endpoint("sat01") == "dtn://sat01/" and endpoint("ground", "in") == "dtn://ground/in"


@pytest.mark.parametrize("field, value, message", [
    ("cla", "bibe", "dtn.cla 'bibe': unknown cla (known: tcp, mtcp, udp, http, ltp, stcp)"),
    ("routing", "prophet", "dtn.routing 'prophet': unknown routing (known: epidemic, sprayandwait, flooding, static)"),
    ("peers", "manual", "dtn.peers 'manual': unknown peers (known: auto, static)"),
    ("janitor", "soon", "dtn.janitor 'soon': expected a duration like 2s, 500ms or 1m"),
])
def test_bad_values_name_field_and_value(field, value, message):
    with pytest.raises(ValidationError) as err:
        DtnSpec(**{field: value})
    assert message in str(err.value)


def test_storage_limit_and_largest_bundle():
    assert DtnSpec(storage={"limit": "64m"}).max_bundle() == 64_000_000
    assert DtnSpec(cla="udp").max_bundle() == 65_507
    assert DtnSpec().max_bundle() is None
    assert parse_size("100kB") == 100_000 and parse_size("1MiB") == 1_048_576 and parse_size(1000) == 1000
    assert parse_seconds("500ms") == 0.5
    with pytest.raises(ValidationError, match="storage.backend 'disk'"):
        DtnSpec(storage={"backend": "disk"})


def test_swarm_checks_peers_routes_and_one_cla():
    ok = {"a": DtnSpec(static_peers=["b"]), "b": DtnSpec(), "c": None}
    check_dtn_nodes(ok)
    with pytest.raises(ValueError, match=r"node 'a': dtn.static_peers 'c': no DTN node of that name \(DTN nodes: a, b\)"):
        check_dtn_nodes({"a": DtnSpec(static_peers=["c"]), "b": DtnSpec(), "c": None})
    with pytest.raises(ValueError, match="all agents of a swarm must share one"):
        check_dtn_nodes({"a": DtnSpec(cla="udp"), "b": DtnSpec()})
    with pytest.raises(ValueError, match=r"dtn.routes\[0\].via 'a': not another DTN node"):
        check_dtn_nodes({"a": DtnSpec(routing="static", routes=[{"to": "b", "via": "a"}]), "b": DtnSpec()})
    with pytest.raises(ValidationError, match="dtn.routes: only for routing 'static'"):
        DtnSpec(routes=[{"to": "b", "via": "a"}])


def test_dtnd_command_static_peers_tcp():
    plan = plan_agent("sat01", DtnSpec(), [Peer("sat02", "10.210.0.3")], "/w/sat01", "10.210.0.0/16")
    assert plan.argv == ["dtnd", "-n", "sat01", "-W", "/w/sat01", "-e", "in", "-r", "epidemic", "-w", "3000",
                         "-j", "1s", "-C", "tcp:port=4556", "--disable_nd", "-s", "tcp://10.210.0.3:4556/sat02"]
    assert plan.expected_peers == ("sat02",) and plan.files == {}


def test_dtnd_command_auto_discovery_on_the_isl_broadcast_and_options():
    piece = DtnSpec(cla="mtcp", peers="auto", routing="sprayandwait", copies=3, storage={"backend": "sled"},
                    janitor="500ms", discovery_interval="2s", peer_timeout="20s", debug=True)
    argv = plan_agent("sat01", piece, [], "/w", "10.210.0.0/16").argv
    assert argv[argv.index("-C") + 1] == "mtcp:port=16162"
    assert argv[argv.index("-j") + 1] == "500ms"
    assert ["-D", "sled"] == argv[argv.index("-D"):argv.index("-D") + 2]
    assert "sprayandwait.num_copies=3" in argv
    assert argv[argv.index("-E") + 1] == "10.210.255.255:3003"
    assert argv[argv.index("-i") + 1] == "2s" and argv[argv.index("-p") + 1] == "20s" and argv[-1] == "-d"
    assert "--disable_nd" not in argv


def test_static_routing_writes_a_routes_file():
    piece = DtnSpec(routing="static", static_peers=["sat02"], routes=[{"to": "ground", "via": "sat02"}])
    plan = plan_agent("sat01", piece, [Peer("sat02", "10.210.0.3")], "/w/sat01/", "10.210.0.0/16")
    assert "static.routes=/w/sat01/routes.txt" in plan.argv
    assert plan.files["routes.txt"].splitlines()[1:] == [
        "1 ** dtn://sat02/* dtn://sat02/", "2 ** dtn://ground/* dtn://sat02/"]
    assert static_routes("x", DtnSpec(routing="static", routes=[{"to": "*", "via": "y"}]), []).splitlines()[1] == "1 ** ** dtn://y/"


def test_plan_agents_peers_default_to_every_other_dtn_node():
    nodes = [("sat01", "10.210.0.2", DtnSpec()), ("sat02", "10.210.0.3", DtnSpec(static_peers=["sat01"])),
             ("plain", "10.210.0.4", None), ("ground", "10.210.0.5", DtnSpec())]
    plans = plan_agents(nodes, "10.210.0.0/16", lambda n: f"/w/{n}")
    assert [p.node for p in plans] == ["sat01", "sat02", "ground"]
    assert plans[0].expected_peers == ("sat02", "ground") and plans[1].expected_peers == ("sat01",)


def test_readiness():
    plan = plan_agent("sat01", DtnSpec(), [Peer("sat02", "10.210.0.3")], "/w", "10.210.0.0/16")
    assert readiness(plan, "dtn://sat01/", '{"sat02": {}}') is None
    assert readiness(plan, "dtn://sat01/", "{}") == "peers missing: sat02"
    assert "node ID is" in readiness(plan, "dtn://xyz/", "{}")
    assert "not JSON" in readiness(plan, "dtn://sat01/", "<html>")


def test_agent_wrapper_records_pid_and_log_without_interpolation():
    from swarm.runtime.dtn import WRAPPER, wrapper_argv

    argv = wrapper_argv("/w/sat01", ["dtnd", "-n", "sat01"])
    assert argv == ["sh", "-c", WRAPPER, "/w/sat01", "dtnd", "-n", "sat01"]
    assert '"$0/dtnd.pid"' in WRAPPER and '>> "$0/dtnd.log"' in WRAPPER and "sat01" not in WRAPPER
