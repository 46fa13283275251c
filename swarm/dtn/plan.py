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
the longest round trip of the node's links (`node_rtts`).

`cla: ltp`: dtnd runs with its external convergence layer (`--ecla`) and static peers
`ecla+ltp://<isl address>:1113/<peer>`; beside it swarm-ltpcla (flightsw/ltpcla) registers over dtnd's
WebSocket as `ltp` and carries the bundles over LTP on UDP. Its engine ID is the node's index, and each peer's
one-way light time and pacing rate are those of the link toward it (`links:`), or `dtn.ltp.rate`.
"""
from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from netem.spec.links import resolve_links
from swarm.spec.dtn import APP_SERVICE, DISCOVERY_PORT, DtnSpec, endpoint

DTND = "dtnd"
LTPCLA = "swarm-ltpcla"
ROUTES_FILE = "routes.txt"
LTP_LOG = "ltp.csv"  # every block, retransmission, cancel and refusal (swarm-ltpcla --log)
LTP_STATUS = "ltp-status.json"  # counters, rewritten each second (swarm-ltpcla --status)
LTP_DOWN = "ltp-down.txt"  # link-down windows from the contact plan (swarm-ltpcla --down)


@dataclass(frozen=True)
class Peer:
    """Another node's agent as seen from one node: its name and ISL address."""

    name: str
    isl_ip: str
    index: int = 0  # the node's index in the swarm (LTP engine ID)


@dataclass(frozen=True)
class AgentPlan:
    """One node's agent: the command, the files it needs in its work folder, and what readiness expects."""

    node: str
    argv: list[str]
    workdir: str
    files: dict[str, str] = field(default_factory=dict)  # name in workdir -> text
    web_port: int = 3000
    expected_peers: tuple[str, ...] = ()  # node names the agent must list before it counts as ready
    route_attrs: tuple[str, ...] = ()  # attributes for the node's ISL subnet route (see route_attributes)
    ltp_argv: Optional[list[str]] = None  # cla: ltp: swarm-ltpcla's command, started beside dtnd


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


@dataclass(frozen=True)
class LinkView:
    """What the framework knows of the directed link toward a peer: one-way delay (s) and rate (bit/s, 0 or
    None: unlimited)."""

    delay: float = 0.0
    rate: Optional[int] = None


def peer_url(cla: str, peer: Peer, port: int) -> str:
    """dtn7-rs's static peer URL: <cla>://<address>:<port>/<node name> (an external CLA: ecla+<cla>://...)."""
    scheme = f"ecla+{cla}" if cla == "ltp" else cla
    return f"{scheme}://{peer.isl_ip}:{port}/{peer.name}"


def spec_link_view(links: Any, names: list[str]) -> Any:
    """a, b -> LinkView of the directed ISL link a->b as a spec's `links:` sets it (pure; netem.spec.links resolves)."""
    resolved = resolve_links(links, names) if links else {}

    def view(a: str, b: str) -> LinkView:
        imp = resolved.get((a, b))
        if imp is None:
            return LinkView()
        return LinkView(delay=(imp.delay or 0.0) / 1000.0, rate=imp.rate or None)
    return view


def plan_ltp(node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             link_of: Any) -> list[str]:
    """swarm-ltpcla's argv for `node` (pure). `link_of(a, b)` -> LinkView of the directed link a->b. ValueError
    (one line naming the field) for a peer whose link has no rate and no `dtn.ltp.rate` to pace at."""
    ltp = piece.ltp
    wd = workdir.rstrip("/")
    argv = [LTPCLA, "--ws", f"ws://127.0.0.1:{piece.web_port}/ws/ecla", "--engine", str(index),
            "--bind", f"{isl_ip}:{piece.cla_port()}", "--segment", str(ltp.segment), "--red", f"{ltp.red:g}",
            "--margin", f"{ltp.margin:g}", "--rtx-limit", str(ltp.rtx_limit), "--attempts", str(ltp.attempts),
            "--log", f"{wd}/{LTP_LOG}", "--status", f"{wd}/{LTP_STATUS}", "--down", f"{wd}/{LTP_DOWN}"]
    for peer in peers:
        link: LinkView = link_of(node, peer.name)
        rate = link.rate or ltp.rate
        if not rate:
            raise ValueError(f"dtn.ltp.rate: link {node}->{peer.name} has no rate to pace LTP at; give the link a "
                             f"rate (links:) or set dtn.ltp.rate")
        if link.delay < 0:
            raise ValueError(f"links: link {node}->{peer.name} delay {link.delay:g} s: not a one-way light time")
        argv += ["--peer", f"{peer.index},{peer.isl_ip}:{piece.cla_port()},{int(rate)},{link.delay:g}"]
    return argv


def ltp_down_windows(windows: list[tuple[str, float, float]], engine_of: dict[str, int], t0: float) -> str:
    """The down file of one node (pure): `windows` = (peer node, from s, until s) relative to `t0` (Unix s)
    -> lines `<peer engine> <from unix> <until unix>`."""
    lines = ["# link-down windows (swarm-emu): <peer engine> <from, unix s> <until, unix s>"]
    for peer, a, b in windows:
        lines.append(f"{engine_of[peer]} {t0 + a:.3f} {t0 + b:.3f}")
    return "\n".join(lines) + "\n"


def static_routes(node: str, piece: DtnSpec, peers: list[Peer]) -> str:
    """The routes file of `routing: static`: first one route per direct peer (bundles to a peer go straight to
    it), then the spec's routes in order; dtn7-rs takes the first match. Patterns are glob-match globs, where
    `*` stops at '/': any source (an EID such as dtn://sat01/ holds slashes) is `**`."""
    lines = [f"# static routes of {node} (swarm-emu)"]
    index = 1
    for peer in peers:
        lines.append(f"{index} ** {endpoint(peer.name)}* {endpoint(peer.name)}")
        index += 1
    for route in piece.routes:
        dst = "**" if route.to == "*" else f"{endpoint(route.to)}*"
        lines.append(f"{index} ** {dst} {endpoint(route.via)}")
        index += 1
    return "\n".join(lines) + "\n"


def broadcast_address(isl_subnet: str) -> str:
    return str(ipaddress.IPv4Network(isl_subnet).broadcast_address)


def plan_agent(node: str, piece: DtnSpec, peers: list[Peer], workdir: str, isl_subnet: str,
               rtt: float = 0.0, isl_ip: str = "") -> AgentPlan:
    """The agent of `node`. `peers`: the DTN nodes it should know (static mode: its static peers; auto
    mode: the nodes discovery is expected to find), in index order. `rtt`: the longest round trip (s) of
    the node's links; the piece's `max_delay` (one-way) replaces it when set. `isl_ip`: the node's ISL
    address, the only one its convergence layer listens on (dtn7's `bind=`; issue 29, defect 13)."""
    argv = [DTND, "-n", node, "-W", workdir, "-e", APP_SERVICE, "-r", piece.routing,
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
    else:
        argv += ["-i", _humantime(piece.discovery_interval), "-p", _humantime(piece.peer_timeout),
                 "-E", f"{broadcast_address(isl_subnet)}:{DISCOVERY_PORT}"]
    if piece.debug:
        argv += ["-d"]
    return AgentPlan(node=node, argv=argv, workdir=workdir, files=files, web_port=piece.web_port,
                     expected_peers=tuple(p.name for p in peers),
                     route_attrs=tuple(route_attributes(piece.quickack, rtt)))


def plan_agents(nodes: list[tuple[str, str, Optional[DtnSpec]]], isl_subnet: str,
                workdir_of: Any, one_way_ms: Optional[dict[tuple[str, str], float]] = None,
                link_of: Any = None) -> list[AgentPlan]:
    """Agents of a swarm. `nodes`: (name, ISL address, dtn piece or None) in index order; `workdir_of(name)`
    gives a node's work folder; `one_way_ms`: the links' one-way delays (see `node_rtts`); `link_of(a, b)` the
    LinkView of a->b (cla: ltp). Static peers default to every other DTN node; auto discovery is expected to
    find every other DTN node (the ISL is one broadcast domain at start)."""
    rtts = node_rtts([n for n, _, _ in nodes], one_way_ms or {})
    index = {n: i for i, (n, _, _) in enumerate(nodes, start=1)}
    dtn_nodes = [(n, ip, p) for n, ip, p in nodes if p is not None]
    by_name = {n: Peer(n, ip, index[n]) for n, ip, _ in dtn_nodes}
    link_of = link_of or (lambda a, b: LinkView())
    plans = []
    for name, ip, piece in dtn_nodes:
        assert piece is not None
        if piece.peers == "static" and piece.static_peers is not None:
            peers = [by_name[p] for p in piece.static_peers]
        else:
            peers = [by_name[n] for n, _, _ in dtn_nodes if n != name]
        if piece.cla == "ltp" and piece.peers != "static":
            raise ValueError(f"node {name!r}: dtn.peers {piece.peers!r}: cla ltp needs static peers (its one-way "
                             "light time and rate come from the links toward them)")
        plan = plan_agent(name, piece, peers, workdir_of(name), isl_subnet, rtts[name], isl_ip=ip)
        if piece.cla == "ltp":
            plan = replace(plan, ltp_argv=plan_ltp(name, index[name], ip, piece, peers, workdir_of(name), link_of))
        plans.append(plan)
    return plans


def _humantime(seconds: float) -> str:
    """Seconds as dtn7-rs's humantime argument: whole seconds as '2s', else milliseconds."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


# ------------------------------------------------------------------------------------------ readiness
def readiness(plan: AgentPlan, nodeid: str, peers_json: str) -> Optional[str]:
    """None when the agent of `plan` is ready (it answers with its own node ID and lists every expected peer),
    else why not, in a few words."""
    want = endpoint(plan.node)
    if nodeid.strip() != want:
        return f"node ID is {nodeid.strip()[:60]!r}, not {want!r}"
    try:
        peers = peer_names(peers_json)
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


def ltp_summary(counters: dict) -> dict:
    """What `swarm dtn` shows of swarm-ltpcla's counters (its ltp-status.json): registered with dtnd, LTP
    sessions open (sending + receiving), blocks sent / received, segments retransmitted, sessions cancelled
    (by us or by the peer), bundles refused or dropped."""
    get = lambda k: int(counters.get(k) or 0)  # noqa: E731
    return {"registered": bool(counters.get("registered")), "sessions_open": get("send_sessions") + get("recv_sessions"),
            "blocks_sent": get("blocks_sent"), "blocks_received": get("blocks_received"),
            "retransmitted_segments": get("retransmitted_segments"), "cancels": get("cancels") + get("recv_cancels"),
            "refused": get("refused"), "dropped": get("dropped"), "queued": get("queued")}


#: The nft table that keeps each node's agent to the swarm's ISL (issue 29, defect 13), in the node's own
#: namespace; it goes with the node.
GUARD_TABLE = "swarm_dtn_guard"


def guard_rules(piece: DtnSpec, isl_subnet: str) -> str:
    """nft script for one node (pure). dtnd 0.21.0 cannot bind its HTTP port to one address (it listens on
    every one), so the node's own firewall keeps the agent to the ISL: the HTTP port answers loopback (the
    node's own programs, swarm-ltpcla) and, with `cla: http`, the ISL subnet (peers push bundles there); the
    convergence-layer and discovery ports answer the ISL subnet only. Everything else, the ground network
    through which every local user of the host reaches the node and IPv6 included, is refused. Re-applying
    replaces the table."""
    web, cla = piece.web_port, piece.cla_port()
    proto = "udp" if piece.cla in ("udp", "ltp") else "tcp"
    rules = ['iif "lo" accept']
    if piece.cla == "http":
        rules.append(f"ip saddr {isl_subnet} tcp dport {web} accept")
    rules.append(f"tcp dport {web} reject with tcp reset")
    if piece.cla != "http":
        rules += [f"ip saddr {isl_subnet} {proto} dport {cla} accept",
                  f"{proto} dport {cla} " + ("reject with tcp reset" if proto == "tcp" else "drop")]
    rules += [f"ip saddr {isl_subnet} udp dport {DISCOVERY_PORT} accept", f"udp dport {DISCOVERY_PORT} drop"]
    body = "".join(f"    {r}\n" for r in rules)
    return (f"table inet {GUARD_TABLE}\ndelete table inet {GUARD_TABLE}\ntable inet {GUARD_TABLE} {{\n"
            f"  chain input {{\n    type filter hook input priority -10; policy accept;\n{body}  }}\n}}\n")
