"""Pure planning of an orbits run's bundle traffic (`dtn:`): each node's traffic program plan, in the shape of
flightsw/protocol.py (dtn_plan, dtn_flow), which flightsw/dtn_traffic.py reads."""
from __future__ import annotations

from experiments.orbits.model import OrbitsExperiment
from flightsw import protocol as proto


def traffic_plans(exp: OrbitsExperiment, release: float, wall_s: float, port: int) -> dict[str, dict]:
    """{node: its traffic program's plan} (pure). Bundles are created in [release, release + send window);
    receivers listen until the plan's end plus `drain`."""
    d = exp.dtn
    assert d is not None
    send_s = (d.send_until if d.send_until is not None else exp.orbits_spec().duration) / exp.speedup
    plans = {n: proto.dtn_plan(n, port, release, send_s, max(0.0, wall_s - send_s) + d.drain, d.lifetime,
                               d.store_interval) for n in d.agent_nodes(exp.orbits_spec().node_names())}
    for src, dst, flow in d.flows_by_source(exp.agent_satellites()):
        plans[src]["flows"].append(proto.dtn_flow(dst, flow.size, flow.rate, None))
        plans[dst]["receive"] = True
    return plans
