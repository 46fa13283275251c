"""The agents of a swarm, planned through their adapters (pure): who peers with whom, each node's longest round
trip, and what the links look like toward each peer; each adapter (swarm.dtn.agents) turns that and the node's
`dtn:` piece into its command and files."""
from __future__ import annotations

from typing import Any, Optional

from netem.spec.links import resolve_links
from swarm.dtn.agents import AgentPlan, LinkView, Peer, agent_of, check_agent
from swarm.spec.dtn import DtnSpec, StaticRoute, node_numbers, resolve_node


def node_rtts(nodes: list[str], one_way_ms: dict[tuple[str, str], float]) -> dict[str, float]:
    """Each node's longest round trip (s) to any other node: `one_way_ms` holds the one-way delay (plus
    jitter) of each directed link that has one (ms); links without one count as 0."""
    out = {n: 0.0 for n in nodes}
    for (a, b), ms in one_way_ms.items():
        rtt = (ms + one_way_ms.get((b, a), 0.0)) / 1000.0
        for node in (a, b):
            if node in out and rtt > out[node]:
                out[node] = rtt
    return out


def spec_link_view(links: Any, names: list[str]) -> Any:
    """a, b -> LinkView of the directed ISL link a->b as a spec's `links:` sets it (pure; netem.spec.links resolves)."""
    resolved = resolve_links(links, names) if links else {}

    def view(a: str, b: str) -> LinkView:
        imp = resolved.get((a, b))
        if imp is None:
            return LinkView()
        return LinkView(delay=(imp.delay or 0.0) / 1000.0, rate=imp.rate or None)
    return view


def plan_agents(nodes: list[tuple[str, str, Optional[DtnSpec]]], isl_subnet: str,
                workdir_of: Any, one_way_ms: Optional[dict[tuple[str, str], float]] = None,
                link_of: Any = None) -> list[AgentPlan]:
    """Agents of a swarm. `nodes`: (name, ISL address, dtn piece or None) in index order; `workdir_of(name)`
    gives a node's work folder; `one_way_ms`: the links' one-way delays (see `node_rtts`); `link_of(a, b)` the
    LinkView of a->b. Static peers default to every other DTN node; auto discovery is expected to find every
    other DTN node (the ISL is one broadcast domain at start)."""
    rtts = node_rtts([n for n, _, _ in nodes], one_way_ms or {})
    index = {n: i for i, (n, _, _) in enumerate(nodes, start=1)}
    dtn_nodes = [(n, ip, p) for n, ip, p in nodes if p is not None]
    engine = {n: p.ltp.engine_of(index[n]) for n, _, p in dtn_nodes}  # LTP engine IDs (dtn.ltp.engine)
    numbers = node_numbers({n: p for n, _, p in nodes})  # ipn node numbers (dtn.number, ltp.engine or index)
    node_id = {n: p.node_id(n, index[n]) for n, _, p in dtn_nodes}
    by_name = {n: Peer(n, ip, engine[n], node_id[n], p.agent if p else "") for n, ip, p in dtn_nodes}
    link_of = link_of or (lambda a, b: LinkView())
    plans = []
    for name, ip, piece in dtn_nodes:
        assert piece is not None
        check_agent(piece)
        if piece.peers == "static" and piece.static_peers is not None:  # names or node IDs
            peers = [by_name[resolve_node(p, piece.eid, numbers, "dtn.static_peers")] for p in piece.static_peers]
        else:
            peers = [by_name[n] for n, _, _ in dtn_nodes if n != name]
        piece = _routes_by_node_id(piece, numbers, node_id)
        plans.append(agent_of(piece).plan(name, index[name], ip, piece, peers, workdir_of(name), isl_subnet,
                                          rtts[name], link_of))
    return plans


def _routes_by_node_id(piece: DtnSpec, numbers: dict[str, int], node_id: dict[str, str]) -> DtnSpec:
    """The piece with its static routes naming nodes by node ID (a spec names them by name or node ID), what the
    adapters write into their routes."""
    if not piece.routes:
        return piece

    def nid(token: str, field: str) -> str:
        return node_id[resolve_node(token, piece.eid, numbers, field)]
    return piece.model_copy(update={"routes": [
        StaticRoute(to=r.to if r.to == "*" else nid(r.to, "dtn.routes.to"), via=nid(r.via, "dtn.routes.via"))
        for r in piece.routes]})
