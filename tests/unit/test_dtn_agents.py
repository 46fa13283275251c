"""The DTN agent registry (swarm.dtn.agents): names and CLAs checked at the edge with one line, and the dtn7
adapter's plan (golden)."""
import re
import shutil
import subprocess

import pytest

from swarm.dtn.agents import REGISTRY, Agent, LinkView, Peer, carriers, check_agent, get_agent
from swarm.dtn.agents.dtn7 import Dtn7
from swarm.dtn.plan import plan_agents
from swarm.errors import SpecError
from swarm.spec.dtn import CLAS, DtnSpec
from swarm.spec.model import spec_from_dict

from conftest import REPO


def test_registry_holds_dtn7_with_every_cla_and_hardy_with_tcp():
    assert list(REGISTRY) == ["dtn7", "hardy", "ion", "ud3tn", "hdtn"] and isinstance(get_agent("dtn7"), Dtn7)
    assert REGISTRY["hardy"].clas == ("tcp",) and carriers("tcp") == ["dtn7", "hardy", "hdtn"]
    assert REGISTRY["dtn7"].clas == tuple(c for c in CLAS if c != "stcp") and carriers("ltp") == ["dtn7", "ion", "hdtn"]
    assert REGISTRY["ion"].clas == ("ltp", "udp") and REGISTRY["ion"].install.user_tree
    assert REGISTRY["ud3tn"].clas == ("mtcp",) and carriers("mtcp") == ["dtn7", "ud3tn"] and \
        REGISTRY["ud3tn"].install.user_tree
    assert REGISTRY["hdtn"].clas == ("tcp", "udp", "ltp", "stcp") and carriers("stcp") == ["hdtn"] and REGISTRY["hdtn"].install.user_tree
    assert all(isinstance(a, Agent) and a.install.programs and a.title for a in REGISTRY.values())


def test_unknown_agent_is_one_line_naming_field_and_value():
    with pytest.raises(ValueError, match=r"^dtn.agent 'dtnme': unknown agent \(known: dtn7, hardy, ion, ud3tn, hdtn\)$"):
        check_agent(DtnSpec(agent="dtnme"))
    with pytest.raises(SpecError, match=r"dtn.agent 'dtnme': unknown agent \(known: dtn7, hardy, ion, ud3tn, hdtn\)"):
        spec_from_dict({"name": "agents", "nodes": 2, "defaults": {"dtn": {"agent": "dtnme"}}})


def test_an_agent_without_the_cla_is_refused(monkeypatch):
    class TcpOnly(Dtn7):
        """dtn7's adapter claiming fewer CLAs: the check reads the claim, whatever the agent."""
        name = "tcponly"
        clas = ("tcp",)

    monkeypatch.setitem(REGISTRY, TcpOnly.name, TcpOnly())
    check_agent(DtnSpec(agent="tcponly", cla="tcp"))
    with pytest.raises(ValueError, match=r"^dtn.cla 'ltp': agent 'tcponly' does not carry it \(it carries tcp; "
                                         r"ltp is carried by dtn7, ion, hdtn\)$"):
        check_agent(DtnSpec(agent="tcponly", cla="ltp"))


def test_dtn7_adapter_plans_dtnd_and_tags_the_plan():
    nodes = [("sat01", "10.210.0.2", DtnSpec()), ("sat02", "10.210.0.3", DtnSpec()), ("gw", "10.210.0.4", None)]
    plans = plan_agents(nodes, "10.210.0.0/16", lambda n: f"/w/{n}")
    assert [p.agent for p in plans] == ["dtn7", "dtn7"]
    assert plans[0].argv == ["dtnd", "-n", "sat01", "-W", "/w/sat01", "-e", "in", "-r", "epidemic", "-w", "3000",
                             "-j", "1s", "-C", "tcp:port=4556:bind=10.210.0.2", "--disable_nd",
                             "-s", "tcp://10.210.0.3:4556/sat02"]
    assert plans[0].expected_peers == ("sat02",)
    direct = Dtn7().plan("sat01", 1, "10.210.0.2", DtnSpec(), [Peer("sat02", "10.210.0.3", 2)], "/w/sat01",
                         "10.210.0.0/16", 0.0, lambda a, b: LinkView())
    assert direct == plans[0]


def test_hardy_is_refused_on_a_cla_it_does_not_carry():
    with pytest.raises(SpecError, match=r"dtn.cla 'ltp': agent 'hardy' does not carry it \(it carries tcp; "
                                        r"ltp is carried by dtn7, ion, hdtn\)"):
        spec_from_dict({"name": "agents", "nodes": 2, "defaults": {"dtn": {"agent": "hardy", "cla": "ltp"}}})


def test_a_mixed_swarm_plans_each_node_with_its_own_agent():
    hardy = DtnSpec(agent="hardy")
    nodes = [("sat01", "10.210.0.2", DtnSpec()), ("sat02", "10.210.0.3", hardy), ("sat03", "10.210.0.4", hardy)]
    plans = plan_agents(nodes, "10.210.0.0/16", lambda n: f"/w/{n}",
                        {("sat02", "sat01"): 150.0, ("sat01", "sat02"): 150.0})
    assert [p.agent for p in plans] == ["dtn7", "hardy", "hardy"]
    assert plans[0].argv[-4:] == ["-s", "tcp://10.210.0.3:4556/sat02", "-s", "tcp://10.210.0.4:4556/sat03"]
    # sat02: 0.3 s round trip -> keepalive 4 x 0.3 + 10 s, rounded up (like dtnd's); links of no rate: the most
    # transfers in flight the framework sets by itself (swarm.dtn.agents.tcpcl.AUTO_MAX_WINDOW)
    assert plans[1].argv == ["swarm-hardy", "--node", "sat02", "--listen", "10.210.0.3:4556", "--http", "3000",
                             "--service", "in", "--keepalive", "30", "--window", "64",
                             "--peer", "sat01@10.210.0.2:4556",
                             "--peer", "sat03@10.210.0.4:4556"]
    assert plans[1].expected_peers == ("sat01", "sat03") and plans[1].workdir == "/w/sat02"
    assert plans[2].argv[plans[2].argv.index("--keepalive") + 1] == "30"


def test_hardy_keepalive_grows_with_the_round_trip():
    from swarm.dtn.agents.hardy import Hardy

    plan = Hardy().plan("sat01", 1, "10.210.0.2", DtnSpec(agent="hardy"), [Peer("sat02", "10.210.0.3", 2)],
                        "/w", "10.210.0.0/16", 8.0, lambda a, b: LinkView())
    assert plan.argv[plan.argv.index("--keepalive") + 1] == "42"  # 4 x 8 s + 10 s


@pytest.mark.parametrize("piece, message", [
    ({"peers": "auto"}, "node 'sat01': dtn.peers 'auto': agent 'hardy' needs static peers (no discovery)"),
])
def test_hardy_refuses_what_it_cannot_run(piece, message):
    from swarm.dtn.agents.hardy import Hardy

    with pytest.raises(ValueError) as err:
        Hardy().plan("sat01", 1, "10.210.0.2", DtnSpec(agent="hardy", **piece), [Peer("sat02", "10.210.0.3", 2)],
                      "/w", "10.210.0.0/16", 0.0, lambda a, b: LinkView())
    assert str(err.value) == message


def test_hardy_static_routes_become_route_options():
    from swarm.dtn.agents.hardy import Hardy

    piece = DtnSpec(agent="hardy", routing="static", routes=[{"to": "ground", "via": "sat02"}, {"to": "*", "via": "sat02"}])
    plan = Hardy().plan("sat01", 1, "10.210.0.2", piece, [Peer("sat02", "10.210.0.3", 2)], "/w", "10.210.0.0/16", 0.0,
                        lambda a, b: LinkView())
    assert [plan.argv[i + 1] for i, w in enumerate(plan.argv) if w == "--route"] == [
        "dtn://ground/**=dtn://sat02/", "dtn:**=dtn://sat02/"]


def test_hardy_readiness_and_log():
    from swarm.dtn.agents.hardy.plan import parse_log, readiness

    plan = plan_agents([("a", "10.1.0.2", DtnSpec(agent="hardy")), ("b", "10.1.0.3", DtnSpec())], "10.1.0.0/16",
                       lambda n: "/w")[0]
    assert readiness(plan, "dtn://a/", '["dtn://b/"]') is None
    assert readiness(plan, "dtn://a/", "[]") == "peers missing: b"
    assert readiness(plan, "dtn://x/", "[]") == "node ID is 'dtn://x/', not 'dtn://a/'"
    assert readiness(plan, "dtn://a/", "{}").startswith("peers answer is not a list")
    log = ("1700000000.500000 ready dtn://a/ tcpcl=10.1.0.2:4556 http=127.0.0.1:3000\n"
           "1700000001.000000 created dtn://a/Zk-812-0 dst=dtn://b/in\n"
           "1700000001.200000 forwarded bytes=100050 to=tcp:10.1.0.3:4556\n"
           "1700000002.000000 peer-down tcp:10.1.0.3:4556\n"
           "1700000003.000000 delivered service=in bytes=1200\n")
    assert parse_log(log) == [
        {"t": 1700000001.0, "kind": "created", "bid": "dtn://a/Zk-812-0", "dst": "dtn://b/in"},
        {"t": 1700000001.2, "kind": "forwarded", "bid": "", "bytes": "100050", "to": "tcp:10.1.0.3:4556"},
        {"t": 1700000003.0, "kind": "delivered", "bid": "", "service": "in", "bytes": "1200"}]


def test_dtn7_tells_the_traffic_program_its_client():
    assert Dtn7().client(DtnSpec(web_port=3100)) == {"client": "dtn7-http", "port": 3100}


def test_every_agent_names_a_client_the_traffic_program_has():
    from flightsw.dtn_traffic import CLIENTS

    assert {a.client(DtnSpec())["client"] for a in REGISTRY.values()} <= set(CLIENTS)


# ------------------------------------------------------------------------ TCPCL window (rate x round trip)
def test_tcp_window_fills_rate_times_rtt_with_bundles():
    from swarm.dtn.agents.tcpcl import AUTO_MAX_WINDOW, tcp_window
    from swarm.spec.dtn import MAX_TCP_WINDOW

    assert tcp_window(100e6, 0.1, 100_000) == 14  # 1.25 MB in flight = 12.5 bundles of 100 kB, + 1 queued
    assert tcp_window(10e6, 0.1, 100_000) == 3  # 125 kB = 1.25 bundles
    assert tcp_window(1e6, 0.01, 100_000) == 2  # less than one bundle in flight: one, + 1 queued
    assert tcp_window(100e6, 0.0, 100_000) == 1  # no round trip: the published behaviour
    assert tcp_window(None, 0.1, 100_000) == AUTO_MAX_WINDOW == 64  # unlimited link: the framework's most
    # a rated link gets its product, not the unlimited link's 64 (0.3 s one-way at 100 Mbit/s: 76 filled the link,
    # 64 left it at 0.87), up to the most a user may set
    assert tcp_window(100e6, 0.6, 100_000) == 76
    assert tcp_window(10e9, 4.0, 1_000) == MAX_TCP_WINDOW == 1024 and tcp_window(10e9, 4.0, 1_000, most=8) == 8
    assert tcp_window(None, 0.1, 100_000, most=8) == 8
    with pytest.raises(ValueError, match="round trip -1"):
        tcp_window(1e6, -1, 1000)


def _window(piece: DtnSpec, delay_ms: float, rate=None) -> list[str]:
    nodes = [("sat01", "10.210.0.2", piece), ("ground", "10.210.0.3", piece)]
    plan = plan_agents(nodes, "10.210.0.0/16", lambda n: f"/w/{n}", {("sat01", "ground"): delay_ms,
                                                                     ("ground", "sat01"): delay_ms},
                       link_of=lambda a, b: LinkView(delay_ms / 1000, rate))[0]
    return [plan.argv[i + 1] for i, w in enumerate(plan.argv) if w == "-O" and "window" in plan.argv[i + 1]]


@pytest.mark.parametrize("tcpcl, rtt, rate, window", [
    ({}, 0.1, 100e6, "14"),          # 100 Mbit/s x 100 ms over 100 kB bundles, + 1 queued: as dtn7's
    ({}, 0.1, None, "64"),           # an unlimited link: the framework's most
    ({}, 0.0, 100e6, None),          # no round trip: Hardy's published behaviour, no option
    ({"window": 8}, 0.1, 100e6, "8"),  # the spec's own
    ({"window": 1}, 0.1, 100e6, None),
])
def test_hardy_window_from_the_links_or_the_spec(tcpcl, rtt, rate, window):
    from swarm.dtn.agents.hardy import Hardy

    plan = Hardy().plan("sat01", 1, "10.210.0.2", DtnSpec(agent="hardy", tcpcl=tcpcl),
                        [Peer("sat02", "10.210.0.3", 2)], "/w", "10.210.0.0/16", rtt,
                        lambda a, b: LinkView(rtt / 2, rate))
    got = plan.argv[plan.argv.index("--window") + 1] if "--window" in plan.argv else None
    assert got == window


def test_dtnd_window_from_the_links_or_the_spec():
    assert _window(DtnSpec(), 0) == []  # no delay: dtnd as published (window 1)
    assert _window(DtnSpec(), 50) == ["tcp:window=64"]  # 100 ms round trip, unlimited link
    assert _window(DtnSpec(), 50, rate=100_000_000) == ["tcp:window=14"]  # 100 Mbit/s: 12.5 bundles + 1
    assert _window(DtnSpec(tcpcl={"bundle": "1MB"}), 50, rate=100_000_000) == ["tcp:window=3"]
    assert _window(DtnSpec(tcpcl={"window": 8}), 50) == ["tcp:window=8"]  # the user's override wins
    assert _window(DtnSpec(tcpcl={"window": 8}), 0) == ["tcp:window=8"]
    assert _window(DtnSpec(tcpcl={"window": 1}), 50) == []
    assert _window(DtnSpec(cla="mtcp"), 50) == []  # only TCPCL pipelines


@pytest.mark.parametrize("piece, message", [
    ({"tcpcl": {"window": 0}}, "dtn.tcpcl.window 0: must be a whole number of transfers in 1..1024"),
    ({"tcpcl": {"window": "many"}}, "dtn.tcpcl.window 'many': must be a whole number of transfers in 1..1024"),
    ({"tcpcl": {"window": 5000}}, "dtn.tcpcl.window 5000: must be a whole number of transfers in 1..1024"),
    ({"tcpcl": {"bundle": "big"}}, "dtn.tcpcl.bundle 'big': expected a size like 100kB, 64m or 1000"),
    ({"cla": "udp", "tcpcl": {"window": 4}}, "dtn.tcpcl: only for cla 'tcp' (cla is 'udp')"),
])
def test_bad_tcpcl_settings_name_field_and_value(piece, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        DtnSpec(**piece)
    assert message in str(err.value)


def test_the_dtn_experiment_sizes_the_window_for_its_bundles():
    from experiments.dtn.model import experiment_from_dict

    exp = experiment_from_dict({"type": "dtn", "name": "win", "backend": "netns", "pattern": "all-to-ground",
                                "sizes": [1], "bundle_sizes": ["50kB"], "rates": ["max"], "clas": ["tcp", "mtcp"],
                                "dtn": {"tcpcl": {"window": 16}}})
    pieces = {t.cla: exp.swarm_data(t)["defaults"]["dtn"] for t in exp.tests()}
    assert pieces["tcp"]["tcpcl"] == {"bundle": 50_000, "window": 16} and "tcpcl" not in pieces["mtcp"]
    spec = exp.swarm_spec(next(t for t in exp.tests() if t.cla == "tcp"))
    assert spec.defaults.dtn.tcpcl.window == 16 and spec.defaults.dtn.tcpcl.bundle == 50_000


def test_an_experiment_names_the_first_cla_its_agent_lacks(monkeypatch):
    from experiments.dtn.model import experiment_from_dict

    class TcpOnly(Dtn7):
        name = "tcponly"
        clas = ("tcp",)

    monkeypatch.setitem(REGISTRY, TcpOnly.name, TcpOnly())
    doc = {"type": "dtn", "name": "agentcla", "backend": "netns", "pattern": "all-to-ground", "sizes": [1],
           "bundle_sizes": ["1kB"], "rates": [1], "clas": ["tcp", "ltp"], "dtn": {"agent": "tcponly"}}
    with pytest.raises(SpecError, match=r"dtn.cla 'ltp': agent 'tcponly' does not carry it"):
        experiment_from_dict(doc)
    experiment_from_dict({**doc, "clas": ["tcp"]})


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo not installed")
def test_the_hardy_nodes_own_unit_tests_pass():
    """swarm-hardy's unit tests (flightsw/hardy-node: its store's poll leaves out the bundles in flight) through
    cargo, against the crates as patched (images/hardy/build.sh test)."""
    res = subprocess.run(["bash", str(REPO / "images" / "hardy" / "build.sh"), "test"], capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert re.search(r"test result: ok\. [1-9]\d* passed", res.stdout), res.stdout[-2000:]  # some ran, none failed
