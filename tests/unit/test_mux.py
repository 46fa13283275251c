"""Multiplexing engine: plans per node, and joining sender and receiver records into FlowResults."""
import math

import pytest

from swarm.errors import SpecError
from experiments.traffic.model import experiment_from_dict, plan_flows, plan_tests
from experiments.traffic.tools.mux.plan import engine_plans, size_bytes
from experiments.traffic.tools.mux.result import flow_result
from experiments.traffic.tools.result import concurrent_window, start_skew, window_figures
from swarm.spec.model import plan_nodes, spec_from_dict

EXP = {"name": "m", "sizes": [3], "protocols": ["udp", "tcp"], "rates": ["1M"], "duration": 2, "engine": "mux",
       "swarm": {"networks": {"isl": {"subnet": "10.9.0.0/24"}, "ground": {"subnet": "10.8.0.0/24"}}}}


def _setup(**over):
    exp = experiment_from_dict({**EXP, **over})
    nodes = plan_nodes(spec_from_dict({"name": "m", "nodes": 3, **EXP["swarm"]}))
    return exp, plan_flows(nodes, exp.pattern, exp.base_port)


def test_size_bytes():
    assert size_bytes("1400") == 1400 and size_bytes("128K") == 131072 and size_bytes("1M") == 1048576
    assert size_bytes(None) is None


def test_plans_one_port_per_node_and_every_flow_on_both_ends():
    exp, flows = _setup(iperf3={"length": "1200"})
    udp = next(t for t in plan_tests(exp) if t.protocol == "udp")
    plans = engine_plans(flows, exp, udp)
    assert sorted(plans) == ["sat01", "sat02", "sat03"]
    p1 = plans["sat01"]
    assert (p1["bind"], p1["port"], p1["length"], p1["protocol"]) == ("10.9.0.2", 5201, 1200, "udp")
    assert [(o["dst"], o["port"], o["rate_bps"], o["index"]) for o in p1["out"]] == [
        ("10.9.0.3", 5201, 1_000_000, 1), ("10.9.0.4", 5201, 1_000_000, 1)]
    assert sorted(i["id"] for i in p1["in"]) == ["sat02__sat01", "sat03__sat01"]
    # flow indexes are unique per receiver (the source's index)
    for plan in plans.values():
        assert len({i["index"] for i in plan["in"]}) == len(plan["in"])
    tcp = next(t for t in plan_tests(exp) if t.protocol == "tcp")
    assert all(o["rate_bps"] is None for o in engine_plans(flows, exp, tcp)["sat02"]["out"])


def test_ground_network_addresses():
    exp, flows = _setup(network="ground")
    plans = engine_plans(flows, exp, plan_tests(exp)[0])
    assert plans["sat01"]["bind"] == "10.8.0.2" and plans["sat01"]["out"][0]["dst"] == "10.8.0.3"


@pytest.mark.parametrize("key,value", [("window", "1M"), ("parallel", 2), ("pacing_timer_us", 100)])
def test_iperf3_only_options_refused_with_mux(key, value):
    with pytest.raises(SpecError, match=f"iperf3.{key}.*not used by engine mux"):
        experiment_from_dict({**EXP, "iperf3": {key: value}})


def test_unknown_engine_refused():
    with pytest.raises(SpecError, match="engine"):
        experiment_from_dict({**EXP, "engine": "iperf2"})


def _send(first, packets, bins, **extra):
    return {"first_send_ts": first, "last_send_ts": first + 1.9, "packets": packets, "bytes": packets * 1000,
            "bins_packets": bins, "bins_bytes": [b * 1000 for b in bins], "error": "", **extra}


def _recv(packets, bins_bytes, bins_sent, jitter=0.5):
    return {"packets": packets, "bytes": sum(bins_bytes), "bins_bytes": bins_bytes, "bins_sent_packets": bins_sent,
            "jitter_ms": jitter}


def test_udp_flow_loss_per_interval_and_whole_test():
    release = 1000.0
    r = flow_result("udp", _send(1000.25, 200, [75, 100, 25]), _recv(180, [70_000, 90_000, 20_000], [70, 90, 20]),
                    release, 2.0, 1.0)
    assert r.ok and r.spawn_ts == 1000.25
    # the 3rd bin (late arrivals / last sends past the 2 s mark) folds into the last interval, for the bytes
    # received and for the packets sent and lost alike: the intervals add up to the whole test's 200 sent, 20 lost
    assert [(iv.start, iv.end, iv.bytes) for iv in r.intervals] == [(0.0, 0.75, 70_000), (0.75, 1.75, 110_000)]
    assert [(iv.packets, iv.lost_packets) for iv in r.intervals] == [(75, 5), (125, 15)]
    assert sum(iv.packets for iv in r.intervals) == r.packets and sum(iv.lost_packets for iv in r.intervals) == 20
    assert (r.packets, r.lost_packets, r.lost_percent, r.jitter_ms) == (200, 20, 10.0, 0.5)
    assert r.bits_per_second == pytest.approx(8 * 180_000 / 1.75)
    assert r.intervals_from_receiver


def test_window_and_skew_from_real_first_sends():
    release = 50.0
    a = flow_result("udp", _send(50.0, 10, [5, 5]), _recv(10, [5000, 5000], [5, 5]), release, 2.0, 1.0)
    b = flow_result("udp", _send(50.5, 8, [3, 5]), _recv(6, [2000, 4000], [2, 4]), release, 2.0, 1.0)
    assert start_skew([a.spawn_ts, b.spawn_ts]) == pytest.approx(0.5)
    t0, t1 = concurrent_window([a, b])
    assert (t0, t1) == (50.5, 52.0)
    fb = window_figures(b, t0, t1)
    assert fb["lost_packets"] == pytest.approx(1 + 1) and fb["packets"] == pytest.approx(3 + 5)
    fa = window_figures(a, t0, t1)  # half of a's first interval is inside the window
    assert fa["packets"] == pytest.approx(2.5 + 5) and fa["bits_per_second"] == pytest.approx(8 * 7500 / 1.5)


def test_missing_reports_are_errors():
    assert flow_result("udp", None, None, 0, 1, 1).error == "no report from the sending node's engine"
    r = flow_result("udp", _send(0.0, 1, [1]), None, 0, 1, 1)
    assert not r.ok and r.error == "no report from the receiving node's engine"
    r = flow_result("tcp", {"first_send_ts": None, "error": "connect to 10.9.0.3:5201: refused"}, None, 0, 1, 1)
    assert not r.ok and "refused" in r.error


def test_tcp_send_error_fails_the_flow_but_keeps_bytes():
    send = {"first_send_ts": 0.0, "last_send_ts": 0.5, "bytes": 5000, "error": "send to 10.9.0.3: reset"}
    r = flow_result("tcp", send, {"bytes": 4000, "bins_bytes": [4000]}, 0.0, 1.0, 1.0)
    assert not r.ok and r.bytes == 4000 and "reset" in r.error
    assert math.isnan(r.lost_percent)


def test_traffic_type_may_be_written_out():
    assert experiment_from_dict({**EXP, "type": "traffic"}).type == "traffic"


def test_the_report_reads_every_tools_raw_record_through_one_function():
    """experiments.traffic.tools.read_flow: the runner's mux record and iperf3's own JSON come back as the FlowResults
    their tools' readers give, each record owned by exactly one tool, without the caller naming a tool."""
    import json
    from pathlib import Path

    from experiments.traffic.tools import TOOLS, read_flow
    from experiments.traffic.tools.iperf3.parse import parse_client_json
    from experiments.traffic.tools.mux.runner import MuxRunner

    send, recv = _send(1000.25, 200, [75, 100, 25]), _recv(180, [70_000, 90_000, 20_000], [70, 90, 20])
    record = json.dumps(MuxRunner.tool.raw_record(send, recv, 1000.0, "swarm-trafficd", "trafficd.py"))
    assert read_flow(record, "udp", None, 2.0, 1.0) == flow_result("udp", send, recv, 1000.0, 2.0, 1.0)
    iperf = (Path(__file__).resolve().parents[1] / "fixtures" / "iperf3" / "udp.json").read_text()
    assert read_flow(iperf, "udp", 5.0, 2.0, 1.0) == parse_client_json(iperf, 5.0)
    for text in (record, iperf, ""):
        assert sum(t.owns_raw(t.load(text)) for t in TOOLS.values()) == 1
    assert not read_flow("", "tcp", None, 2.0, 1.0).ok
