"""Pure planning of a `dtn` test: what each node's traffic program (flightsw/dtn_traffic.py) is told to do, and
where the UDP probe beside the bundles goes. The plan's shape is flightsw/protocol.py's (dtn_plan, dtn_flow,
dtn_probe), which the program reads."""
from __future__ import annotations

from typing import Optional

from experiments.dtn.model import DtnExperiment, DtnTest, flows, swarm_nodes
from flightsw import protocol as proto
from swarm.spec.dtn import APP_SERVICE, service_of

IP_PORT = 5999
QUIET_MAX_S = 5.0  # max-rate tests: receivers stop after this long without a bundle once sending ended


def traffic_plans(exp: DtnExperiment, test: DtnTest, isl_ips: dict[str, str], release: float, web_port: int,
                  rtt: float = 0.0, app_eids: Optional[dict[str, str]] = None) -> dict[str, dict]:
    """{node: the plan its traffic program reads} (pure). `app_eids`: each node's applications' endpoint
    (dtn://<node>/in or ipn:<number>.1; default dtn). `rtt`: the swarm's longest round trip (s): a
    max-rate receiver waits six round trips longer before it calls the link quiet: a TCPCL session's set-up
    takes three (TCP handshake, contact headers, session init) and its first bundle about three more (TCP slow
    start from a small socket buffer); then it carries one bundle per round trip."""
    nodes = swarm_nodes(test.size)
    pairs = flows(exp.pattern, nodes)
    eids = app_eids or {}
    count = exp.flow_counts(test)
    expect: dict[str, int] = {}
    plans: dict[str, dict] = {}
    for n in nodes:
        plans[n] = proto.dtn_plan(n, web_port, release, exp.duration, exp.drain, exp.lifetime, exp.store_interval,
                                  service_of(eids[n]) if n in eids else APP_SERVICE)
    for src, dst in pairs:
        plans[src]["flows"].append(proto.dtn_flow(dst, test.bundle_size, test.rate, count, eids.get(dst)))
        plans[dst]["receive"] = True
        expect[dst] = expect.get(dst, 0) + (count or 0)
    for n, plan in plans.items():
        if plan["receive"]:
            if count is not None:
                plan["expect"] = expect[n]
            else:
                plan["quiet"] = min(QUIET_MAX_S + 6 * rtt, exp.drain)
    if exp.probe_ip():
        probes = probe_pairs(exp.pattern, nodes)
        for n, plan in plans.items():
            dsts = [(d, isl_ips[d]) for s, d in probes if s == n]
            plan["ip_probe"] = proto.dtn_probe(isl_ips[n], IP_PORT, exp.ip_probe_rate, dsts)
    return plans


def probe_pairs(pattern: str, nodes: list[str]) -> list[tuple[str, str]]:
    """Where the UDP probe goes: over each hop of the chain (the links the bundles take: plain IP has no
    multi-hop path without a mesh), else beside each bundle flow."""
    if pattern == "chain":
        return list(zip(nodes, nodes[1:]))
    return flows(pattern, nodes)
