"""The dtnd command of each node, and what the agent must answer to count as ready (pure).

Every agent runs
    dtnd -n <node> -W <workdir> -e in -C <cla>[:port=P] -r <routing> -w <web port> -j <janitor> ...
with static peers (`-s <cla>://<isl address>:<port>/<peer>`) and neighbour discovery off, or with IPND
beacons sent to the ISL subnet's broadcast address (`-E <broadcast>:3003`), so that agents find each
other over the inter-satellite network and never over the ground network. `routing: static` gets a routes
file (dtn7-rs's format: `<index> <source glob> <destination glob> <next-hop EID>`).

Long delays: dtnd's TCPCL connect timeout, TCPCL keepalive and HTTP-CLA request timeout were constants (3 s,
30 s, 5 s) that stopped every bundle above ~1.5 s one-way; images/dtn/dtn7-0.21.0.patch makes them settings
(`-O tcp:connect-timeout=..`, `-O tcp:keepalive=..`, `-O http:timeout=..`), which `cla_timeouts` sizes from
the longest round trip of the node's links (swarm.dtn.plan.node_rtts).

`cla: ltp`: dtnd runs with its external convergence layer (`--ecla`) and static peers
`ecla+ltp://<isl address>:1113/<peer>`; beside it swarm-ltpcla (flightsw/ltpcla, swarm.dtn.agents.ltp) registers
over dtnd's WebSocket as `ltp` and carries the bundles over LTP on UDP.
"""
from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass
from typing import Callable, Optional

from swarm.dtn.agents.base import AgentPlan, Peer
from swarm.dtn.agents.tcpcl import session_window
from swarm.spec.dtn import DISCOVERY_PORT, DtnSpec, eid_glob, endpoint, node_key

DTND = "dtnd"
ROUTES_FILE = "routes.txt"


@dataclass(frozen=True)
class ClaTimeouts:
    """dtnd's CLA timeouts (s), settings of the patched dtn7 (see the module text)."""

    connect: float  # TCPCL: TcpStream::connect (one round trip when nothing is lost)
    keepalive: int  # TCPCL session keepalive: dtnd ends a session that stays silent this long
    http: float  # HTTP CLA: one POST of a whole bundle, answer included


#: The published crate's constants: kept wherever they suffice, so short links run dtnd as published.
DEFAULT_TIMEOUTS = ClaTimeouts(connect=3.0, keepalive=30, http=5.0)


def cla_timeouts(rtt: float) -> ClaTimeouts:
    """Timeouts for an agent whose longest round trip to a peer is `rtt` s; the crate's constants for short round
    trips (TCPCL up to 1 s, HTTP up to 1/3 s), so that short links run dtnd as published:
    - connect: 3 round trips, so that one lost SYN (sent again after Linux's 1 s initial RTO, then another
      round trip: 2 RTT + 1 s) still connects;
    - keepalive: the longest silence of a healthy session is waiting a round trip for an XFER_ACK after the
      segments left the socket buffer: 4 round trips plus 10 s;
    - http: one POST is the handshake, slow start of the body (~12 round trips reach several MB from the
      initial window of 10 segments) and the answer: 15 round trips."""
    if rtt < 0:
        raise ValueError(f"round trip {rtt}: negative")
    return ClaTimeouts(connect=max(DEFAULT_TIMEOUTS.connect, round(3 * rtt, 3)),
                       keepalive=max(DEFAULT_TIMEOUTS.keepalive, math.ceil(4 * rtt + 10)),
                       http=max(DEFAULT_TIMEOUTS.http, round(15 * rtt, 3)))


def timeout_args(cla: str, timeouts: ClaTimeouts) -> list[str]:
    """dtnd's `-O` options for the timeouts that differ from the crate's constants (none for mtcp/udp, which
    have no such timeouts)."""
    args: list[str] = []
    if cla == "tcp":
        if timeouts.connect != DEFAULT_TIMEOUTS.connect:
            args += ["-O", f"tcp:connect-timeout={_humantime(timeouts.connect)}"]
        if timeouts.keepalive != DEFAULT_TIMEOUTS.keepalive:
            args += ["-O", f"tcp:keepalive={timeouts.keepalive}s"]
    if cla == "http" and timeouts.http != DEFAULT_TIMEOUTS.http:
        args += ["-O", f"http:timeout={_humantime(timeouts.http)}"]
    return args


def window_args(piece: DtnSpec, rtt: float, rate: Optional[float]) -> list[str]:
    """`cla: tcp`: TCPCL transfers in flight per session (the patched dtn7's `-O tcp:window=N`): the spec's
    `dtn.tcpcl.window`, else sized from the node's fastest link toward its peers (`rate` bit/s, None: unlimited)
    and its longest round trip; none when it is 1, the crate's own behaviour."""
    if piece.cla != "tcp":
        return []
    window = session_window(piece.tcpcl.window, rate, rtt, piece.tcpcl.bundle)
    return [] if window == 1 else ["-O", f"tcp:window={window}"]


#: Round trips from which the ISL route gets larger initial windows, and their size in segments (~185 kB).
LONG_RTT_S = 1.0
INIT_WINDOW = 128


def route_attributes(quickack: bool, rtt: float) -> list[str]:
    """Attributes of the node's ISL subnet route for its TCP-based CLAs: `quickack 1` (no 40 ms delayed ACK
    per transfer), and from a 1 s round trip an initial congestion and receive window of 128 segments: TCPCL
    waits a round trip for each bundle's XFER_ACK, the connection idles meanwhile, and Linux restarts slow
    start from the initial window (10 segments; the receiver offers ~20), so a 100 kB bundle took 3-4 round
    trips instead of one (measured at 4 s one-way: 16.6 s to write it, 26.5 s more to its acknowledgement)."""
    attrs = ["quickack", "1"] if quickack else []
    if rtt >= LONG_RTT_S:
        attrs += ["initcwnd", str(INIT_WINDOW), "initrwnd", str(INIT_WINDOW)]
    return attrs


def peer_url(cla: str, peer: Peer, port: int) -> str:
    """dtn7-rs's static peer URL: <cla>://<address>:<port>/<node name, or ipn node number> (an external CLA:
    ecla+<cla>://...); dtnd makes an all-digit path the node ipn:<number>.0."""
    scheme = f"ecla+{cla}" if cla == "ltp" else cla
    return f"{scheme}://{peer.isl_ip}:{port}/{peer.key}"


def outside_ltp_peers(piece: DtnSpec) -> list[tuple[str, str]]:
    """(address, node ID) of each LTP peer outside the swarm whose node ID is known (`dtn.ltp.peers`: `node`,
    or ipn:<engine>.0 with eid ipn): dtnd gets it as a static peer, so bundles for it leave over LTP."""
    if piece.cla != "ltp":
        return []
    return [(ext.address, node_id) for ext in piece.ltp.peers if (node_id := ext.node_id(piece.eid)) is not None]


def static_routes(node: str, piece: DtnSpec, peers: list[Peer]) -> str:
    """The routes file of `routing: static`: first one route per direct peer (bundles to a peer go straight to
    it), then the spec's routes in order; dtn7-rs takes the first match. Patterns are glob-match globs, where
    `*` stops at '/': any source (an EID such as dtn://sat01/ holds slashes) is `**`. Routes name nodes by node
    ID (swarm.dtn.plan resolves them: dtn://<name>/ or ipn:<number>.0); the next hop is the peer's node ID."""
    lines = [f"# static routes of {node} (swarm-emu)"]
    index = 1
    for eid in [p.eid for p in peers] + [outside for _, outside in outside_ltp_peers(piece)]:
        lines.append(f"{index} ** {eid_glob(eid)} {eid}")
        index += 1
    for route in piece.routes:
        dst = "**" if route.to == "*" else eid_glob(_node_id(route.to))
        lines.append(f"{index} ** {dst} {_node_id(route.via)}")
        index += 1
    return "\n".join(lines) + "\n"


def _node_id(token: str) -> str:
    """A route's node: its node ID, or (a plan made without swarm.dtn.plan) a node name -> dtn://<name>/."""
    return token if ":" in token else endpoint(token)


def broadcast_address(isl_subnet: str) -> str:
    return str(ipaddress.IPv4Network(isl_subnet).broadcast_address)


def plan_agent(node: str, piece: DtnSpec, peers: list[Peer], workdir: str, isl_subnet: str,
               rtt: float = 0.0, isl_ip: str = "", rate: Optional[float] = None, node_id: str = "") -> AgentPlan:
    """The agent of `node`. `peers`: the DTN nodes it should know (static mode: its static peers; auto
    mode: the nodes discovery is expected to find), in index order. `rtt`: the longest round trip (s) of
    the node's links; the piece's `max_delay` (one-way) replaces it when set. `isl_ip`: the node's ISL
    address, the only one its convergence layer listens on (dtn7's `bind=`), so no other network reaches it.
    `node_id`: its endpoint ID (default dtn://<node>/); for ipn:<n>.0 dtnd gets `-n <n>` and `-e 1`."""
    node_id = node_id or endpoint(node)
    argv = [DTND, "-n", node_key(node_id), "-W", workdir, "-e", piece.app_service(), "-r", piece.routing,
            "-w", str(piece.web_port), "-j", _humantime(piece.janitor)]
    cla = piece.cla if piece.cla == "http" else f"{piece.cla}:port={piece.cla_port()}"
    if isl_ip and piece.cla != "http":
        cla += f":bind={isl_ip}"
    if piece.cla == "ltp":
        argv += ["--ecla"]  # no built-in CLA: bundles leave through swarm-ltpcla only
    else:
        argv += ["-C", cla]
        rtt = 2 * piece.max_delay if piece.max_delay is not None else rtt
        argv += timeout_args(piece.cla, cla_timeouts(rtt))
        argv += window_args(piece, rtt, rate)
    if piece.storage.backend != "mem":
        argv += ["-D", piece.storage.backend]
    files: dict[str, str] = {}
    if piece.routing == "sprayandwait":
        argv += ["-R", f"sprayandwait.num_copies={piece.copies}"]
    if piece.routing == "static":
        files[ROUTES_FILE] = static_routes(node, piece, peers)
        argv += ["-R", f"static.routes={workdir.rstrip('/')}/{ROUTES_FILE}"]
    if piece.peers == "static":
        argv += ["--disable_nd"]
        for peer in peers:
            argv += ["-s", peer_url(piece.cla, peer, piece.cla_port())]
        for address, outside in outside_ltp_peers(piece):  # ION & co: swarm-ltpcla knows them by this address
            argv += ["-s", f"ecla+ltp://{address}/{node_key(outside)}"]
    else:
        argv += ["-i", _humantime(piece.discovery_interval), "-p", _humantime(piece.peer_timeout),
                 "-E", f"{broadcast_address(isl_subnet)}:{DISCOVERY_PORT}"]
    if piece.debug:
        argv += ["-d"]
    return AgentPlan(node=node, argv=argv, workdir=workdir, files=files, web_port=piece.web_port, node_id=node_id,
                     expected_peers=tuple(p.key for p in peers),
                     route_attrs=tuple(route_attributes(piece.quickack, rtt)))


def _humantime(seconds: float) -> str:
    """Seconds as dtn7-rs's humantime argument: whole seconds as '2s', else milliseconds."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


# ------------------------------------------------------------------------------------------ readiness
def readiness(plan: AgentPlan, nodeid: str, peers_json: str,
              names: Callable[[str], list[str]] = lambda text: peer_names(text)) -> Optional[str]:
    """None when the agent of `plan` is ready (it answers with its own node ID and lists every expected peer),
    else why not, in a few words. `names` reads the agent's peers answer (dtnd's by default)."""
    want = plan.node_id or endpoint(plan.node)
    if nodeid.strip() != want:
        return f"node ID is {nodeid.strip()[:60]!r}, not {want!r}"
    try:
        peers = names(peers_json)
    except ValueError as exc:
        return str(exc)
    missing = [p for p in plan.expected_peers if p not in peers]
    if missing:
        return f"peers missing: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
    return None


def peer_names(peers_json: str) -> list[str]:
    """Node names of the peers in dtnd's /status/peers answer (a JSON object keyed by node name)."""
    try:
        data = json.loads(peers_json)
    except json.JSONDecodeError:
        raise ValueError(f"peers answer is not JSON: {peers_json[:60]!r}") from None
    if not isinstance(data, dict):
        raise ValueError(f"peers answer is not an object: {peers_json[:60]!r}")
    return sorted(data)


def peer_clas(peers_json: str) -> list[str]:
    """The convergence layers dtnd reaches its peers by (each peer's `cla_list` in /status/peers, e.g. "tcp" or
    "ltp" for the ECLA module), sorted, without duplicates; [] for an answer that is not what dtnd sends."""
    try:
        data = json.loads(peers_json)
    except json.JSONDecodeError:
        return []
    names = set()
    for peer in data.values() if isinstance(data, dict) else []:
        for entry in (peer.get("cla_list") or []) if isinstance(peer, dict) else []:
            if isinstance(entry, list) and entry and isinstance(entry[0], str):
                names.add(entry[0])
    return sorted(names)


#: The nft table that keeps each node's agent to the swarm's ISL (so a host user cannot inject bundles), in
#: the node's own namespace; it goes with the node.
GUARD_TABLE = "swarm_dtn_guard"


def guard_rules(piece: DtnSpec, isl_subnet: str, local_tcp: tuple[int, ...] = ()) -> str:
    """nft script for one node (pure). dtnd 0.21.0 cannot bind its HTTP port to one address (it listens on
    every one), so the node's own firewall keeps the agent to the ISL: the HTTP port answers loopback (the
    node's own programs, swarm-ltpcla) and, with `cla: http`, the ISL subnet (peers push bundles there); the
    convergence-layer and discovery ports answer the ISL subnet only. Everything else, the ground network
    through which every local user of the host reaches the node and IPv6 included, is refused. So is the ISL
    subnet's gateway address: on compose (and a Docker overlay) the bridge holding it is the host's, so every
    local user would pass as a peer; its frames come in on the ISL interface like a peer's, so only the
    address tells them apart (netns keeps its bridges out of the host: no one holds it there). `local_tcp`: more
    TCP ports an agent binds on every address that only the node's own programs may reach (loopback). Re-applying
    replaces the table."""
    web, cla = piece.web_port, piece.cla_port()
    proto = "udp" if piece.cla in ("udp", "ltp") else "tcp"
    # the bridge's address, as swarm.spec.model.gateway_address (not imported: the spec model reads the agent registry)
    gateway = str(ipaddress.IPv4Network(isl_subnet).network_address + 1)
    tcp, udp = sorted({web} | ({cla} if proto == "tcp" else set())), sorted({DISCOVERY_PORT} | ({cla} if proto == "udp" else set()))
    rules = ['iif "lo" accept', f"ip saddr {gateway} tcp dport {{ {', '.join(map(str, tcp))} }} reject with tcp reset",
             f"ip saddr {gateway} udp dport {{ {', '.join(map(str, udp))} }} drop"]
    if piece.cla == "http":
        rules.append(f"ip saddr {isl_subnet} tcp dport {web} accept")
    rules.append(f"tcp dport {web} reject with tcp reset")
    if piece.cla != "http":
        rules += [f"ip saddr {isl_subnet} {proto} dport {cla} accept",
                  f"{proto} dport {cla} " + ("reject with tcp reset" if proto == "tcp" else "drop")]
    rules += [f"ip saddr {isl_subnet} udp dport {DISCOVERY_PORT} accept", f"udp dport {DISCOVERY_PORT} drop"]
    if local_tcp:
        rules.append(f"tcp dport {{ {', '.join(map(str, sorted(local_tcp)))} }} reject with tcp reset")
    body = "".join(f"    {r}\n" for r in rules)
    return (f"table inet {GUARD_TABLE}\ndelete table inet {GUARD_TABLE}\ntable inet {GUARD_TABLE} {{\n"
            f"  chain input {{\n    type filter hook input priority -10; policy accept;\n{body}  }}\n}}\n")
