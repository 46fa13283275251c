"""flightsw/protocol.py, the host <-> node protocol of the in-node programs: the host side's messages are read by
the real node programs (agent.py run as a script, as in a node; trafficd's engine and records; dtn_traffic's
events), and what those programs write is what the host side's readers recognise. Plus: the node programs stay
standard-library only and the protocol module ships in the node image."""
from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.dtn.parse import read_events
from experiments.dtn.plan import traffic_plans
from experiments.dtn.run import TrafficReader
from experiments.traffic.tools.mux.result import flow_result
from flightsw import dtn_traffic, protocol as proto, trafficd
from swarm.runtime.image import image_context_files

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "flightsw" / "agent.py"
NODE_PROGRAMS = ["protocol.py", "agent.py", "trafficd.py", "dtn_traffic.py", "swarm_logic.py"]


@pytest.mark.parametrize("name", NODE_PROGRAMS)
def test_node_programs_import_only_the_standard_library_and_their_siblings(name):
    siblings = {p.stem for p in (REPO / "flightsw").glob("*.py")}
    tree = ast.parse((REPO / "flightsw" / name).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    foreign = imported - set(sys.stdlib_module_names) - siblings - {"flightsw", "__future__"}
    assert foreign == set()


def test_the_protocol_module_ships_in_the_node_image():
    rel = {str(p.relative_to(REPO)) for p in image_context_files(REPO)}
    assert {"flightsw/protocol.py", "flightsw/agent.py", "flightsw/trafficd.py", "flightsw/dtn_traffic.py"} <= rel


def test_host_side_clients_conversation_with_the_real_agent_script(tmp_path):
    """The host's half written with the protocol's helpers, the node's half the agent run as a node runs it."""
    env = {**os.environ, proto.RUN_DIR_ENV: str(tmp_path)}
    env.pop("SWARM_APPS", None)
    proc = subprocess.Popen([sys.executable, str(AGENT), proto.CLIENTS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    flows = [proto.client_flow("f1", [sys.executable, "-c", "print('out-1')"]),
             proto.client_flow("f2", [sys.executable, "-c", "import sys; sys.exit(4)"])]
    proc.stdin.write(proto.dumps(flows) + "\n")
    proc.stdin.flush()
    assert proto.is_parked(proc.stdout.readline())
    release = time.time() + 0.2
    proc.stdin.write(proto.release_line(release))
    proc.stdin.close()
    lines = proc.stdout.read().splitlines()
    assert proc.wait(timeout=30) == 0
    assert [proto.is_release_report(line) for line in lines] == [True, False, False]
    reports = {r[proto.ID]: r for r in (json.loads(line) for line in lines if proto.is_flow_report(line))}
    assert reports["f1"]["output"].strip() == "out-1" and reports["f1"]["returncode"] == 0
    assert reports["f2"]["returncode"] == 4
    assert reports["f1"][proto.RELEASE_TS] >= release
    assert set(reports["f1"]) == set(proto.flow_report("x", 0.0, 0.0, 0, ""))


def test_agent_refuses_a_command_outside_the_protocol(tmp_path):
    res = subprocess.run([sys.executable, str(AGENT), "servers-and-more"], capture_output=True, text=True,
                         env={**os.environ, proto.RUN_DIR_ENV: str(tmp_path)}, timeout=30)
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_mux_commands_parse_as_the_engine_reads_them():
    assert proto.parse_mux_command(proto.CONNECT + "\n")[0] == proto.CONNECT
    assert proto.parse_mux_command(proto.mux_release_line(1700000000.25, 3.0)) == ("release", 1700000000.25, 3.0)
    with pytest.raises(ValueError, match="not a command"):
        proto.parse_mux_command("go now please\n")


def test_the_engine_takes_the_host_plan_and_its_records_feed_the_host_result():
    """A plan built with the host's helpers binds a real engine on loopback; the engine's own records of one
    flow (sender and receiver side) give the host's FlowResult."""
    plan = proto.mux_plan("udp", "127.0.0.1", 0, 200, 1.0)
    plan["out"].append(proto.mux_out("a->b", 1, "127.0.0.1", 9, 80_000))
    plan["in"].append(proto.mux_in("b->a", 2))
    engine = trafficd.Engine(json.loads(proto.dumps(plan)))
    try:
        assert engine.rx.getsockname()[1] > 0 and engine.length == 200
        out, inflow = engine.outs[0], engine.ins[2]
        out.first_ts, out.last_ts, out.seq, out.bytes = 100.0, 101.9, 100, 20_000
        out.bins_packets = [50, 50]
        inflow.first_ts, inflow.last_ts, inflow.packets, inflow.bytes = 100.01, 101.95, 90, 18_000
        inflow.bins_bytes, inflow.bins_sent_packets = [9_000, 9_000], [45, 45]
        send, recv = (json.loads(proto.dumps(r)) for r in engine.records())
    finally:
        engine.rx.close()
        engine.tx.close()
    assert (send[proto.SIDE], recv[proto.SIDE]) == (proto.SEND, proto.RECV)
    result = flow_result("udp", send, recv, release=100.0, duration=2.0, interval=1.0)
    assert result.ok and result.packets == 100 and result.lost_packets == 10
    assert math.isclose(result.lost_percent, 10.0)
    assert [i.lost_packets for i in result.intervals] == [5, 5]


def test_bins_grow_to_the_interval_and_never_go_negative():
    bins: list[int] = []
    trafficd._bin(bins, 3, 5)
    trafficd._bin(bins, -2, 1)  # a datagram stamped before the release counts in the first interval
    assert bins == [1, 0, 0, 5]


def test_dtn_events_as_the_program_writes_them_are_what_the_host_recognises(capsys, tmp_path):
    dtn_traffic.emit({proto.EV: proto.EV_SENT, "dst": "dtn://b/in", "seq": 0, "t": 1.0, "t_ack": 1.1, "size": 10,
                      "ok": True})
    dtn_traffic.emit({proto.EV: proto.EV_RECV_DONE, "t": 2.0, "received": 0})
    text = capsys.readouterr().out
    lines = text.splitlines(keepends=True)
    assert [proto.is_event(line, proto.EV_RECV_DONE) for line in lines] == [False, True]
    assert [e[proto.EV] for e in read_events(text)] == [proto.EV_SENT, proto.EV_RECV_DONE]

    class Program:  # the host's reader on the program's real output lines
        stdout = iter(lines)

    reader = TrafficReader(Program(), tmp_path / "a.traffic.jsonl")
    reader.run()
    assert reader.finished_receiving and (tmp_path / "a.traffic.jsonl").read_text() == text


def test_dtn_plans_carry_what_the_program_reads():
    from experiments.dtn.model import experiment_from_dict, swarm_nodes

    exp = experiment_from_dict({"type": "dtn", "name": "p", "pattern": "chain", "sizes": [3], "duration": "4s",
                                "drain": "2s", "bundle_sizes": [1000], "rates": [2]}, "p.yaml")
    test = exp.tests()[0]
    nodes = swarm_nodes(test.size)
    plans = traffic_plans(exp, test, {n: f"10.140.0.{i}" for i, n in enumerate(nodes, 1)}, release=50.0, web_port=3000)
    shape = set(proto.dtn_plan("n", 1, 0.0, 0.0, 0.0, 0.0, 0.0))
    assert all(shape <= set(p) for p in plans.values())
    sender = plans[nodes[0]]
    assert sender["flows"] == [proto.dtn_flow(nodes[-1], 1000, 2.0, sender["flows"][0]["count"])]
    assert plans[nodes[-1]]["receive"] and "expect" in plans[nodes[-1]]
