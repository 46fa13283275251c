"""dtnd's CLA timeouts sized from the links' delays (swarm.dtn.agents.dtn7.plan: cla_timeouts, timeout_args; swarm.dtn.plan: node_rtts):
the patched dtn7's settings that let `cla: tcp` cross 2 s and 4 s one-way."""
import pytest
from pydantic import ValidationError

from netem.spec.links import LinksSpec
from swarm.dtn.agents import Peer
from swarm.dtn.agents.dtn7.plan import (DEFAULT_TIMEOUTS, ClaTimeouts, cla_timeouts, plan_agent, route_attributes,
                                        timeout_args)
from swarm.dtn.plan import node_rtts, plan_agents
from swarm.runtime.dtn import link_delays_ms
from swarm.spec.dtn import DtnSpec


def _opts(argv: list[str]) -> dict[str, str]:
    """dtnd's `-O cla:key=value` options as {cla:key: value}."""
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-O")


def test_short_links_keep_the_published_constants():
    assert DEFAULT_TIMEOUTS == ClaTimeouts(connect=3.0, keepalive=30, http=5.0)
    assert cla_timeouts(0.0) == DEFAULT_TIMEOUTS
    assert cla_timeouts(0.002) == DEFAULT_TIMEOUTS  # a LEO hop: dtnd runs as published
    t = cla_timeouts(1.0)  # TCPCL keeps its constants up to a 1 s round trip, HTTP up to 1/3 s
    assert (t.connect, t.keepalive, t.http) == (3.0, 30, 15.0)
    assert timeout_args("tcp", DEFAULT_TIMEOUTS) == [] and timeout_args("http", DEFAULT_TIMEOUTS) == []


@pytest.mark.parametrize("one_way", [1.3, 2.0, 4.0, 10.0, 600.0])
def test_timeouts_outlast_what_the_round_trip_needs(one_way):
    rtt = 2 * one_way
    t = cla_timeouts(rtt)
    assert t.connect >= 2 * rtt + 1  # a connect needs one round trip; a lost SYN costs 1 s and another
    assert t.keepalive >= 3 * rtt  # the session outlives waiting for an XFER_ACK, with room to spare
    assert t.http >= 10 * rtt  # a POST: handshake, slow start of the body, the answer
    assert isinstance(t.keepalive, int) and t.keepalive <= 65535  # TCPCL's keepalive is a u16 of seconds


def test_lcrd_delays_give_these_timeouts():
    assert cla_timeouts(4.0) == ClaTimeouts(connect=12.0, keepalive=30, http=60.0)  # 2 s one-way
    assert cla_timeouts(8.0) == ClaTimeouts(connect=24.0, keepalive=42, http=120.0)  # 4 s one-way
    with pytest.raises(ValueError, match="negative"):
        cla_timeouts(-1)


def test_options_only_for_the_cla_that_has_them():
    t = cla_timeouts(8.0)
    assert timeout_args("tcp", t) == ["-O", "tcp:connect-timeout=24s", "-O", "tcp:keepalive=42s"]
    assert timeout_args("http", t) == ["-O", "http:timeout=120s"]
    assert timeout_args("mtcp", t) == [] and timeout_args("udp", t) == []
    # 1.3 s one-way: a longer connect timeout; the keepalive stays at the crate's 30 s
    assert timeout_args("tcp", cla_timeouts(2.6)) == ["-O", "tcp:connect-timeout=7800ms"]


def test_node_rtts_take_each_nodes_longest_round_trip():
    one_way = {("sat01", "sat02"): 2000.0, ("sat02", "sat01"): 2000.0,
               ("sat02", "ground"): 4000.0, ("ground", "sat02"): 3000.0,
               ("sat03", "sat01"): 500.0}  # one direction only: the other counts as 0
    rtts = node_rtts(["sat01", "sat02", "sat03", "ground", "sat04"], one_way)
    assert rtts == {"sat01": 4.0, "sat02": 7.0, "ground": 7.0, "sat03": 0.5, "sat04": 0.0}


def test_link_delays_come_from_the_links_spec_with_profiles_and_jitter():
    nodes = ["sat01", "sat02", "ground"]
    assert link_delays_ms(None, nodes) == {}
    links = LinksSpec.model_validate({"default": {"delay": "2s", "jitter": "10ms"},
                                      "overrides": [{"between": ["sat02", "ground"], "delay": "4s"}]})
    got = link_delays_ms(links, nodes)
    assert got[("sat01", "sat02")] == 2010.0 and got[("sat02", "sat01")] == 2010.0
    assert got[("sat02", "ground")] == 4010.0
    lcrd = link_delays_ms(LinksSpec.model_validate({"default": {"profile": "lcrd-ltp-4s"}}), nodes)
    assert set(lcrd.values()) == {4000.0}  # netem/profiles: seed 002's LCRD test at 4 s one-way


def test_dtnd_argv_carries_the_timeouts_of_its_links():
    nodes = [("sat01", "10.180.0.2", DtnSpec()), ("sat02", "10.180.0.3", DtnSpec()),
             ("ground", "10.180.0.4", DtnSpec(cla="tcp"))]
    plans = plan_agents(nodes, "10.180.0.0/24", lambda n: f"/w/{n}",
                        {("sat02", "ground"): 4000.0, ("ground", "sat02"): 4000.0})
    by = {p.node: _opts(p.argv) for p in plans}
    assert by["sat01"] == {}  # its links have no delay: dtnd as published
    # and, an 8 s round trip on an unlimited link, the most TCPCL transfers in flight the framework sets itself
    assert by["sat02"] == by["ground"] == {"tcp:connect-timeout": "24s", "tcp:keepalive": "42s", "tcp:window": "64"}
    # max_delay (one-way) replaces what the links say, e.g. for delays that grow after the start
    piece = DtnSpec(cla="http", max_delay="2s")
    argv = plan_agent("sat01", piece, [Peer("sat02", "10.180.0.3")], "/w", "10.180.0.0/24", rtt=0.0).argv
    assert _opts(argv) == {"http:timeout": "60s"}
    assert DtnSpec(max_delay="0s").max_delay == 0.0


@pytest.mark.parametrize("value, message", [("soon", "dtn.max_delay 'soon'"), ("2h", "dtn.max_delay 7200.0 s")])
def test_bad_max_delay_names_field_and_value(value, message):
    with pytest.raises(ValidationError, match=message):
        DtnSpec(max_delay=value)


def test_long_round_trips_get_larger_initial_windows_on_the_isl_route():
    assert route_attributes(True, 0.0) == ["quickack", "1"]
    assert route_attributes(False, 0.5) == []
    assert route_attributes(True, 8.0) == ["quickack", "1", "initcwnd", "128", "initrwnd", "128"]
    assert route_attributes(False, 1.0) == ["initcwnd", "128", "initrwnd", "128"]
    nodes = [("sat01", "10.180.0.2", DtnSpec()), ("ground", "10.180.0.3", DtnSpec(quickack=False))]
    plans = plan_agents(nodes, "10.180.0.0/24", lambda n: f"/w/{n}",
                        {("sat01", "ground"): 2000.0, ("ground", "sat01"): 2000.0})
    assert [p.route_attrs for p in plans] == [("quickack", "1", "initcwnd", "128", "initrwnd", "128"),
                                              ("initcwnd", "128", "initrwnd", "128")]
