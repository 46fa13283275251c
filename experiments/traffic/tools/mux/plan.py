"""Pure planning for the multiplexing traffic tool (`engine: mux`).

The engine itself is flightsw/trafficd.py (or the Rust swarm-trafficd): one process per node carries all of the
node's flows. `engine_plans` gives each node's plan (what it receives on one port, what it sends where at which
rate); result.py reads the records the engines give back.
"""
from __future__ import annotations

from experiments.traffic.model import ExperimentSpec, Flow, TestCase, flow_ips, server_ip
from flightsw import protocol as proto

_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


def size_bytes(text: str | None) -> int | None:
    """'1400' -> 1400, '128K' -> 131072 (iperf3's -l convention), None -> None."""
    if text is None:
        return None
    unit = text[-1] if text[-1] in "KMG" else ""
    return int(text[:-1] if unit else text) * _SIZE_UNITS[unit]


def engine_plans(flows: list[Flow], exp: ExperimentSpec, test: TestCase) -> dict[str, dict]:
    """{node name: the plan its engine reads}; every node that sends or receives gets one.

    All flows into a node share one port (`base_port`); a flow is told apart by its index, the source
    node's index (unique per destination).
    """
    plans: dict[str, dict] = {}

    def plan_of(node) -> dict:
        if node.name not in plans:
            plans[node.name] = proto.mux_plan(test.protocol, server_ip(node, exp.network), exp.base_port,
                                              size_bytes(exp.iperf3.length), exp.iperf3.interval)
        return plans[node.name]

    for f in flows:
        _src_ip, dst_ip = flow_ips(f, exp.network)
        plan_of(f.src)["out"].append(proto.mux_out(f.flow_id, f.src.index, dst_ip, exp.base_port,
                                                   test.rate_bps if test.protocol == "udp" else None))
        plan_of(f.dst)["in"].append(proto.mux_in(f.flow_id, f.src.index))
    return plans
