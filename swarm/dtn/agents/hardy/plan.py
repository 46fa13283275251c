"""swarm-hardy's command for a node, its readiness and its log (pure).

    swarm-hardy --node <node> --listen <ISL address>:<tcp port> --http <web port> --service in
                --keepalive <s> [--window <n>] --peer <peer>@<peer ISL address>:<tcp port> ...

A node is its name (node ID dtn://<node>/) or, with `dtn.eid: ipn`, its node ID ipn:<number>.0 (applications on
service 1). `--window`: TCPCL transfers in flight per session, from `dtn.tcpcl.window` or the links' rate x round
trip as for dtn7 (swarm.dtn.agents.tcpcl; Hardy's crate as patched at build time,
images/hardy/hardy-tcpclv4-0.4.0.patch), left out at 1. One `--peer` per
static peer (every other DTN node by default): swarm-hardy dials each and re-dials it whenever
its session is gone; a TCPCL session gives a route to the peer's node ID (hardy-bpa adds it), so bundles go
straight to a peer (whatever `dtn.routing` says: Hardy has no epidemic routing); with `routing: static`, each of
`dtn.routes` is a `--route <pattern>=<next hop>` (dtn://<to>/** or ipn:<n>.*; for `*`, every endpoint of the
scheme). Hardy's ingress filter keeps its RFC 9171 checks, the primary block's CRC (section 4.3.1) included:
dtn7 as patched here sets one (images/dtn/dtn7-0.21.0.patch item 6; the published 0.21.0 sent none and needed the
check turned off). The keepalive is sized like dtn7's
(swarm.dtn.agents.dtn7.plan.cla_timeouts), and so are the TCP attributes of the node's ISL route (`dtn.quickack`:
no 40 ms delayed ACK per transfer; larger initial windows from a 1 s round trip). Its log is one event per line, `<epoch s> <kind> <words>`
(flightsw/hardy-node/src/main.rs).
"""
from __future__ import annotations

import json
from typing import Optional

from swarm.dtn.agents.base import AgentPlan, Peer
from swarm.dtn.agents.dtn7.plan import cla_timeouts, route_attributes
from swarm.dtn.agents.dtn7.plan import readiness as dtn7_readiness
from swarm.dtn.agents.tcpcl import session_window
from swarm.spec.dtn import DtnSpec, endpoint, node_key

PROGRAM = "swarm-hardy"
#: Hardy's EID pattern for every endpoint of a scheme (a static route `to: '*'`)
ANY_NODE = {"dtn": "dtn:**", "ipn": "ipn:**"}
#: Log kinds that are events of a bundle (swarm.dtn.agents.base.Agent.log_events); the others (ready, peer-up,
#: peer-down, dial-failed) are about sessions.
BUNDLE_EVENTS = {"created", "received", "forwarded", "failed", "delivered"}


def plan_hardy(node: str, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str, rtt: float,
               node_id: str = "", rate: Optional[float] = None) -> AgentPlan:
    """The agent of `node` (endpoint ID `node_id`, default dtn://<node>/; `rate`: its fastest link toward its
    peers, bit/s, None unlimited); ValueError (one line naming the field) for a piece swarm-hardy cannot run."""
    node_id = node_id or endpoint(node)
    if piece.peers != "static":
        raise ValueError(f"node {node!r}: dtn.peers {piece.peers!r}: agent 'hardy' needs static peers (no discovery)")
    port = piece.cla_port()
    argv = [PROGRAM, "--node", _node_arg(node_id), "--listen", f"{isl_ip}:{port}", "--http", str(piece.web_port),
            "--service", piece.app_service(), "--keepalive", str(cla_timeouts(rtt).keepalive)]
    window = session_window(piece.tcpcl.window, rate, rtt, piece.tcpcl.bundle)
    if window > 1:  # transfers in flight per session, sized like dtn7's (swarm.dtn.agents.tcpcl)
        argv += ["--window", str(window)]
    for peer in peers:
        argv += ["--peer", f"{_node_arg(peer.eid)}@{peer.isl_ip}:{port}"]
    for route in piece.routes:  # routing: static (without routes: each peer directly, as a session gives)
        to = ANY_NODE[piece.eid] if route.to == "*" else _pattern(_node_id(route.to))
        argv += ["--route", f"{to}={_node_id(route.via)}"]
    if piece.debug:
        argv += ["--debug", "1"]  # Hardy's own trace in the log
    return AgentPlan(node=node, argv=argv, workdir=workdir, web_port=piece.web_port, node_id=node_id,
                     expected_peers=tuple(p.key for p in peers), agent="hardy",
                     route_attrs=tuple(route_attributes(piece.quickack, rtt)))


def _node_arg(node_id: str) -> str:
    """A node as swarm-hardy takes it: a bare name for dtn://<name>/ (the form every swarm-hardy takes), else the
    node ID (ipn:<number>.0)."""
    return node_key(node_id) if node_id.startswith("dtn://") else node_id


def _node_id(token: str) -> str:
    """A route's node: its node ID (swarm.dtn.plan resolves names to them), or a bare name -> dtn://<name>/."""
    return token if ":" in token else endpoint(token)


def _pattern(node_id: str) -> str:
    """Hardy's EID pattern of every endpoint of a node: dtn://<name>/** or ipn:<number>.*."""
    return f"ipn:{node_key(node_id)}.*" if node_id.startswith("ipn:") else node_id.rstrip("/") + "/**"


def peer_names(peers_json: str) -> list[str]:
    """The peers in swarm-hardy's /status/peers answer (a JSON list of node IDs dtn://<name>/ or ipn:<n>.0) by
    their key (swarm.spec.dtn.node_key: name, or ipn number), as dtnd lists its peers."""
    try:
        data = json.loads(peers_json)
    except json.JSONDecodeError:
        raise ValueError(f"peers answer is not JSON: {peers_json[:60]!r}") from None
    if not isinstance(data, list):
        raise ValueError(f"peers answer is not a list: {peers_json[:60]!r}")
    return sorted({node_key(str(p)) for p in data})


def readiness(plan: AgentPlan, nodeid: str, peers_json: str) -> Optional[str]:
    """None when the agent answers with its own node ID and has a session with every expected peer (dtn7's
    check, on swarm-hardy's peers answer)."""
    return dtn7_readiness(plan, nodeid, peers_json, names=peer_names)


def parse_log(log: str) -> list[dict]:
    """swarm-hardy's log as bundle events {"t", "kind", "bid", ...} (words `key=value` become fields)."""
    events = []
    for line in log.splitlines():
        words = line.split()
        if len(words) < 2 or words[1] not in BUNDLE_EVENTS:
            continue
        try:
            t = float(words[0])
        except ValueError:
            continue
        ev: dict = {"t": t, "kind": words[1], "bid": ""}
        for w in words[2:]:
            key, eq, value = w.partition("=")
            if eq:
                ev["to" if key == "to" else key] = value
            elif not ev["bid"]:
                ev["bid"] = w
        events.append(ev)
    return events


#: swarm-hardy's event kinds that say something went wrong (its own log lines; Hardy's trace adds WARN/ERROR)
FAILURE_EVENTS = {"failed", "dial-failed"}


def failure_lines(log: str) -> list[tuple[Optional[float], str]]:
    """swarm-hardy's failed / dial-failed events (with their time) and Hardy's own WARN / ERROR trace lines
    (`--debug`; no time parsed), in log order (pure)."""
    out: list[tuple[Optional[float], str]] = []
    for line in log.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1] in FAILURE_EVENTS:
            try:
                out.append((float(words[0]), line.strip()))
            except ValueError:
                pass
        elif " WARN " in line or " ERROR " in line:
            out.append((None, line.strip()))
    return out
