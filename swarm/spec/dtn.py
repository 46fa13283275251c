"""The `dtn:` piece of a swarm spec: a Bundle Protocol agent on a node.

```yaml
defaults:                 # every node; or per group / per node (the most specific piece wins whole)
  dtn:
    agent: dtn7           # a BPv7 agent of the registry (swarm.dtn.agents), which must carry the `cla`
    eid: dtn              # dtn: node `sat01` is dtn://sat01/ | ipn: node i is ipn:<i>.0 (see `number`)
    cla: tcp              # tcp (TCPCLv4, RFC 9174) | mtcp | udp | http | ltp (LTP, RFC 5326) | stcp (HDTN's)
    ltp: {segment: 1360, red: 1.0}   # cla: ltp only: segment size (bytes), red (reliable) fraction, ...
    tcpcl: {window: 32}   # cla: tcp only: transfers in flight per session (default: from the links' rate x RTT)
    # ltp: {engine: 7, peers: [{engine: 1, address: 192.0.2.1:1113, rate: 10Mbit, owlt: 1s}]}  # an outside peer
    routing: epidemic     # epidemic | sprayandwait | flooding | static
    peers: static         # static: every other DTN node (or `static_peers`) | auto: IPND beacons on the ISL
    storage: {backend: mem, limit: 256m}
```

Node `<name>` is the endpoint `dtn://<name>/`; applications receive on `dtn://<name>/in`. With `eid: ipn` (the
scheme of ION and CCSDS) node i is `ipn:<i>.0` and applications receive on service 1, `ipn:<i>.1`; the number is
`dtn.number`, else the node's LTP engine ID `dtn.ltp.engine`, else its index in the swarm, so that ION contact
plans (node N = ipn:N) name the same nodes. A ground station is
an ordinary node of the swarm (name it, e.g. `ground`, or give it `role: ground`): it is a DTN endpoint like
any other. Pure: validation only, nothing is started here. The agent's name and the CLAs it carries are checked
against the agents' registry (swarm.dtn.agents.check_agent) when the swarm spec is validated.
"""
from __future__ import annotations

import ipaddress
import os
import re
from typing import Any, Optional

from pydantic import Field, field_validator, model_validator

from swarm.spec.validation import Strict
from swarm.units import duration_seconds, parse_link_rate

CLAS = ("tcp", "mtcp", "udp", "http", "ltp", "stcp")  # stcp: HDTN's simple TCP CLA (length-prefixed bundles)
ROUTINGS = ("epidemic", "sprayandwait", "flooding", "static")
STORES = ("mem", "sled", "sneakers")
PEER_MODES = ("auto", "static")
#: The port each CLA listens on (dtn7-rs's defaults; `http` rides on the agent's web port).
CLA_PORTS = {"tcp": 4556, "mtcp": 16162, "udp": 4556, "ltp": 1113, "stcp": 4556}  # ltp: IANA's LTP port
WEB_PORT = 3000
DISCOVERY_PORT = 3003
#: UDP CLA: one bundle per datagram, so a bundle must fit into one IPv4 UDP datagram with its headers.
UDP_MAX_BUNDLE = 65_507
#: LTP CLA: a received block goes to dtnd as base64 in one WebSocket frame (dtnd's limit 16 MiB).
LTP_MAX_BUNDLE = 12_000_000
#: The endpoint (service) every agent registers for applications: dtn://<node>/in, or ipn:<number>.1.
APP_SERVICE = "in"
APP_SERVICE_NUMBER = 1
#: Endpoint ID schemes (RFC 9171 section 4.2.5.1): dtn://<node name>/<service>, ipn:<node number>.<service number>
EID_SCHEMES = ("dtn", "ipn")
#: The most TCPCL transfers in flight per session a user may ask for (dtn.tcpcl.window).
MAX_TCP_WINDOW = 1024

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\Z", re.IGNORECASE)


def parse_size(value: Any, field: str = "size") -> int:
    """'100kB', '100k', '64m', '1MiB', 100000 -> bytes (> 0). k/m/g/t are decimal; ki/mi/... binary."""
    if isinstance(value, bool):
        raise ValueError(f"{field} {value!r}: expected a size like 100kB, 64m or 1000")
    match = _SIZE_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"{field} {value!r}: expected a size like 100kB, 64m or 1000")
    base = 1024 if match.group(3) else 1000
    power = "_kmgt".index(match.group(2).lower() or "_") if match.group(2) else 0
    size = int(round(float(match.group(1)) * base ** power))
    if size <= 0:
        raise ValueError(f"{field} {value!r}: must be positive")
    return size


def parse_seconds(value: Any, field: str = "duration", allow_zero: bool = False) -> float:
    """'2s', '500ms', '1m', 2 -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{field} {value!r}: expected a duration like 2s or 500ms")
    seconds = duration_seconds(value)
    if seconds is None:
        raise ValueError(f"{field} {value!r}: expected a duration like 2s, 500ms or 1m")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{field} {value!r}: must be positive")
    return seconds


def _one_of(kind: str, value: Any, known: tuple[str, ...]) -> str:
    if value not in known:
        raise ValueError(f"{kind} {value!r}: unknown {kind.split('.')[-1]} (known: {', '.join(known)})")
    return value


class DtnStorage(Strict):
    """Where an agent keeps bundles. `limit` is the framework's: dtn7-rs itself enforces no quota, so a bundle
    larger than the limit is refused before anything starts, and a DTN report warns where a node's store held
    more than the limit."""

    backend: str = "mem"
    limit: Optional[int] = None  # bytes

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return _one_of("storage.backend", v, STORES)

    @field_validator("limit", mode="before")
    @classmethod
    def _limit(cls, v: Any) -> Optional[int]:
        return None if v is None else parse_size(v, "storage.limit")


class LtpPeer(Strict):
    """An LTP engine outside the swarm (e.g. ION) that a node's swarm-ltpcla talks to: its engine ID, the
    IPv4:port its segments are sent to, the pacing rate toward it (default `dtn.ltp.rate`) and the one-way light
    time. Its segments are recognised by engine ID, from whatever source port they come."""

    engine: int = Field(ge=1)
    address: str
    rate: Optional[int] = None  # bit/s
    owlt: float = 0.0  # s
    node: Optional[str] = None  # its node ID (dtn://<name>/ or ipn:<n>.0); with eid ipn default ipn:<engine>.0

    @field_validator("node")
    @classmethod
    def _node(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _NODE_ID_RE.match(v):
            raise ValueError(f"dtn.ltp.peers.node {v!r}: expected a node ID, dtn://<name>/ or ipn:<number>.0")
        return v

    def node_id(self, scheme: str) -> Optional[str]:
        """The outside node's node ID, which the agent is given as a static peer so that bundles go to it: `node`,
        else (eid ipn, where engine and node numbers agree as in ION) ipn:<engine>.0, else None (no dtn:// name
        can be guessed from an engine ID)."""
        if self.node is not None:
            return self.node
        return f"ipn:{self.engine}.0" if scheme == "ipn" else None

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        host, _, port = v.rpartition(":")
        try:
            ipaddress.IPv4Address(host)
            ok = port.isdigit() and 1 <= int(port) <= 65535
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"dtn.ltp.peers.address {v!r}: expected IPv4:port, e.g. 192.0.2.1:1113")
        return v

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Optional[int]:
        return None if v is None else _ltp_rate(v, "dtn.ltp.peers.rate")

    @field_validator("owlt", mode="before")
    @classmethod
    def _owlt(cls, v: Any) -> float:
        return parse_seconds(v, "dtn.ltp.peers.owlt", allow_zero=True)


def _ltp_rate(v: Any, field: str) -> int:
    try:
        rate = parse_link_rate(v)
    except (ValueError, TypeError):
        raise ValueError(f"{field} {v!r}: expected a rate like 1Gbit or 100Mbit") from None
    if not rate or rate <= 0:
        raise ValueError(f"{field} {v!r}: must be positive (LTP is paced)")
    return int(rate)


class LtpSpec(Strict):
    """`cla: ltp`: how swarm-ltpcla (flightsw/ltpcla) carries bundles over LTP. The one-way light time and the
    pacing rate of each peer come from the swarm's `links:` (delay, rate) toward it; `rate` is the fallback
    for links without one (LTP cannot pace an unlimited link)."""

    segment: int = 1360  # bytes per LTP segment (one UDP datagram; larger ones are IP-fragmented)
    red: float = Field(1.0, ge=0.0, le=1.0)  # reliable fraction of each block (1: all red, 0: all green)
    rate: Optional[int] = None  # bit/s: pacing rate toward peers whose link has no rate
    margin: float = 0.5  # s: queueing/processing margin added to each retransmission timer (both ends)
    rtx_limit: int = Field(20, ge=1, le=1000)  # checkpoint/report retransmissions before a session is cancelled
    attempts: int = Field(3, ge=1, le=100)  # sessions per bundle (a cancelled block is offered again)
    engine: Optional[int] = Field(None, ge=1)  # this node's LTP engine ID (default: the node's index)
    peers: list[LtpPeer] = Field(default_factory=list)  # LTP engines outside the swarm

    def engine_of(self, index: int) -> int:
        """The node's LTP engine ID: `engine`, else its index in the swarm."""
        return self.engine if self.engine is not None else index

    @field_validator("segment", mode="before")
    @classmethod
    def _segment(cls, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not 64 <= v <= 65_507:
            raise ValueError(f"dtn.ltp.segment {v!r}: must be a whole number of bytes in 64..65,507 (one UDP datagram)")
        return v

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Optional[int]:
        return None if v is None else _ltp_rate(v, "dtn.ltp.rate")

    @field_validator("margin", mode="before")
    @classmethod
    def _margin(cls, v: Any) -> float:
        return parse_seconds(v, "dtn.ltp.margin")


class TcpclSpec(Strict):
    """`cla: tcp` (TCPCLv4): how many transfers a session keeps in flight. Unset, the framework sizes the window
    from each node's links, rate x round trip over bundles of `bundle` bytes (swarm.dtn.agents.tcpcl; the `dtn`
    experiment sets `bundle` to its bundle size); 1 is one bundle per round trip, the agents' published
    behaviour."""

    window: Optional[int] = None
    bundle: int = 100_000  # bytes: the bundle size the automatic window is sized for

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, v: Any) -> Optional[int]:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TCP_WINDOW:
            raise ValueError(f"dtn.tcpcl.window {v!r}: must be a whole number of transfers in 1..{MAX_TCP_WINDOW}")
        return v

    @field_validator("bundle", mode="before")
    @classmethod
    def _bundle(cls, v: Any) -> int:
        return parse_size(v, "dtn.tcpcl.bundle")


class StaticRoute(Strict):
    """`routing: static`: bundles to `to` (a node name or `*`) go to the next hop `via` (a node name)."""

    to: str
    via: str


class DtnSpec(Strict):
    """A BPv7 agent on a node (see the module text)."""

    agent: str = "dtn7"  # checked against swarm.dtn.agents.REGISTRY with the swarm (swarm.spec.model)
    eid: str = "dtn"  # the endpoint ID scheme of the node: dtn (dtn://<name>/) | ipn (ipn:<number>.0)
    number: Optional[int] = Field(None, ge=1, le=2**32 - 1)  # eid ipn: the node number (default: ltp.engine, else index)
    cla: str = "tcp"
    routing: str = "epidemic"
    peers: str = "static"
    static_peers: Optional[list[str]] = None  # peers: static -> these nodes (default: every other DTN node)
    routes: list[StaticRoute] = Field(default_factory=list)  # routing: static (default: direct to each peer)
    copies: int = Field(4, ge=1, le=1024)  # routing: sprayandwait -> num_copies
    storage: DtnStorage = DtnStorage()
    ltp: LtpSpec = LtpSpec()  # cla: ltp only
    tcpcl: TcpclSpec = TcpclSpec()  # cla: tcp only
    janitor: float = 1.0  # s: how often the agent retries stored bundles (dtn7-rs default 10 s)
    discovery_interval: float = 1.0  # s: IPND beacon period (peers: auto)
    peer_timeout: float = 10.0  # s: a discovered peer silent this long is dropped (peers: auto)
    web_port: int = Field(WEB_PORT, ge=1, le=65535)
    # s, one-way: the delay dtnd's CLA timeouts allow for (swarm.dtn.agents.dtn7.plan.cla_timeouts); default: the longest
    # delay of the node's links in `links:`. Set it when delays grow after the start (orbits, `swarm links`).
    max_delay: Optional[float] = None
    quickack: bool = True  # `quickack 1` on the node's ISL route: no 40 ms delayed ACK per TCP-CLA transfer
    debug: bool = False  # dtnd -d: debug log (large)
    # agents the user builds (ion, ud3tn): the install prefix of their build, default $SWARM_ION_INSTALL / $SWARM_UD3TN_INSTALL,
    # and a file of their own configuration appended to what the framework generates (see user_paths)
    install: Optional[str] = None
    config: Optional[str] = None

    @field_validator("cla")
    @classmethod
    def _cla(cls, v: str) -> str:
        return _one_of("dtn.cla", v, CLAS)

    @field_validator("eid")
    @classmethod
    def _eid(cls, v: str) -> str:
        return _one_of("dtn.eid", v, EID_SCHEMES)

    @field_validator("routing")
    @classmethod
    def _routing(cls, v: str) -> str:
        return _one_of("dtn.routing", v, ROUTINGS)

    @field_validator("peers")
    @classmethod
    def _peers(cls, v: str) -> str:
        return _one_of("dtn.peers", v, PEER_MODES)

    @field_validator("janitor", "discovery_interval", "peer_timeout", mode="before")
    @classmethod
    def _durations(cls, v: Any, info: Any) -> float:
        return parse_seconds(v, f"dtn.{info.field_name}")

    @field_validator("max_delay", mode="before")
    @classmethod
    def _max_delay(cls, v: Any) -> Optional[float]:
        return None if v is None else parse_seconds(v, "dtn.max_delay", allow_zero=True)

    @field_validator("install", "config", mode="before")
    @classmethod
    def _user_paths(cls, v: Any, info: Any) -> Optional[str]:
        return user_path(v, f"dtn.{info.field_name}")

    @model_validator(mode="after")
    def _consistent(self) -> "DtnSpec":
        if self.routes and self.routing != "static":
            raise ValueError(f"dtn.routes: only for routing 'static' (routing is {self.routing!r})")
        if self.static_peers is not None and self.peers != "static":
            raise ValueError(f"dtn.static_peers: only for peers 'static' (peers is {self.peers!r})")
        if self.tcpcl != TcpclSpec() and self.cla != "tcp":
            raise ValueError(f"dtn.tcpcl: only for cla 'tcp' (cla is {self.cla!r})")
        for key in ("janitor", "discovery_interval", "peer_timeout", "max_delay"):
            if (getattr(self, key) or 0) > 3600:
                raise ValueError(f"dtn.{key} {getattr(self, key)} s: more than an hour")
        return self

    def number_of(self, index: int) -> int:
        """The node's ipn node number: `number`, else its LTP engine ID (`ltp.engine`), else its index."""
        return self.number if self.number is not None else self.ltp.engine_of(index)

    def node_id(self, node: str, index: int) -> str:
        """The node's endpoint ID (its node ID): dtn://<node>/ or ipn:<number>.0."""
        return node_eid(self.eid, node, self.number_of(index))

    def app_eid(self, node: str, index: int) -> str:
        """Where the node's applications receive: dtn://<node>/in or ipn:<number>.1."""
        return node_eid(self.eid, node, self.number_of(index), self.app_service())

    def app_service(self) -> str:
        """The applications' service as the agents name it: "in" (dtn) or "1" (ipn)."""
        return APP_SERVICE if self.eid == "dtn" else str(APP_SERVICE_NUMBER)

    def cla_port(self) -> int:
        """The port the CLA listens on (http: the web port)."""
        return self.web_port if self.cla == "http" else CLA_PORTS[self.cla]

    def max_bundle(self) -> Optional[int]:
        """The largest bundle (bytes) this agent can carry or keep, or None when unbounded."""
        limits = [x for x in (self.storage.limit, UDP_MAX_BUNDLE if self.cla == "udp" else None,
                              LTP_MAX_BUNDLE if self.cla == "ltp" else None) if x]
        return min(limits) if limits else None


def user_path(value: Any, field: str) -> Optional[str]:
    """A path the user gives (an install prefix, a configuration file), made absolute like cfs.install; that it
    holds what the agent needs is checked when the swarm comes up."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} {value!r}: expected a path")
    return os.path.abspath(os.path.expanduser(value.strip()))


def endpoint(node: str, service: str = "") -> str:
    """The endpoint ID of `node` (dtn://<node>/), or of one of its services (dtn://<node>/<service>)."""
    return f"dtn://{node}/{service}"


def node_eid(scheme: str, node: str, number: int, service: str = "") -> str:
    """An endpoint ID in `scheme`: dtn://<node>/<service>, or ipn:<number>.<service> (service "" -> 0, the node
    ID)."""
    if scheme == "ipn":
        return f"ipn:{number}.{service or 0}"
    return endpoint(node, service)


def node_key(node_id: str) -> str:
    """The node part of a node ID, as agents key their peers: dtn://<name>/ -> name, ipn:<number>.0 -> number."""
    if node_id.startswith("ipn:"):
        return node_id[4:].split(".", 1)[0]
    return node_id.split("://", 1)[-1].split("/", 1)[0]


def service_of(eid: str) -> str:
    """The service part of an endpoint ID, as agents name it: dtn://<node>/in -> "in", ipn:<n>.1 -> "1"."""
    return eid.rsplit(".", 1)[-1] if eid.startswith("ipn:") else eid.split("://", 1)[-1].split("/", 1)[-1]


def eid_glob(node_id: str) -> str:
    """A glob of every endpoint of a node (dtn7-rs's static routes, glob-match): dtn://<name>/* or ipn:<n>.*."""
    return f"ipn:{node_key(node_id)}.*" if node_id.startswith("ipn:") else f"{node_id.rstrip('/')}/*"


_NODE_ID_RE = re.compile(r"^(?:dtn://([^/\s]+)/?|ipn:(\d+)\.0)\Z")


def node_numbers(pieces: dict[str, Optional["DtnSpec"]]) -> dict[str, int]:
    """Each DTN node's ipn node number (pieces: node name -> its dtn piece or None, in index order; the index
    counts every node, so numbers agree with ION contact plans' node N = the swarm's N-th node)."""
    return {n: p.number_of(i) for i, (n, p) in enumerate(pieces.items(), start=1) if p is not None}


def resolve_node(token: str, scheme: str, numbers: dict[str, int], field: str) -> str:
    """A node named in a static peer or route: its name, or its node ID in the swarm's scheme (dtn://<name>/,
    ipn:<number>.0) -> its name; ValueError naming `field` and the token otherwise."""
    if token in numbers:
        return token
    m = _NODE_ID_RE.match(token)
    if not m and ":" not in token:
        raise ValueError(f"{field} {token!r}: no DTN node of that name")
    if not m:
        raise ValueError(f"{field} {token!r}: not a DTN node's name or node ID (dtn://<name>/ or ipn:<number>.0)")
    given = "dtn" if m.group(1) else "ipn"
    if given != scheme:
        raise ValueError(f"{field} {token!r}: a {given} endpoint, but dtn.eid is {scheme!r} (give the node's name "
                         f"or its {scheme} node ID)")
    by_number = {str(num): n for n, num in numbers.items()}
    name = m.group(1) if given == "dtn" else by_number.get(m.group(2), "")
    if name not in numbers:
        raise ValueError(f"{field} {token!r}: no DTN node of that {'name' if given == 'dtn' else 'number'}")
    return name


def check_dtn_nodes(pieces: dict[str, Optional[DtnSpec]]) -> None:
    """Swarm-wide checks (pieces: node name -> its dtn piece or None, in index order): peers and routes
    name DTN nodes of this swarm, and all agents speak one CLA. Raises ValueError with one line."""
    dtn_nodes = [n for n, p in pieces.items() if p is not None]
    clas = {p.cla for p in pieces.values() if p is not None}
    if len(clas) > 1:
        raise ValueError(f"dtn.cla: nodes use {', '.join(sorted(clas))}; all agents of a swarm must share one "
                         "convergence layer to reach each other")
    schemes = {p.eid for p in pieces.values() if p is not None}
    if len(schemes) > 1:
        raise ValueError(f"dtn.eid: nodes use {', '.join(sorted(schemes))}; all agents of a swarm share one endpoint "
                         "ID scheme")
    _check_ltp_engines(pieces)
    numbers = node_numbers(pieces)
    if "ipn" in schemes:
        owner: dict[int, str] = {}
        for node, number in numbers.items():
            if number in owner:
                raise ValueError(f"node {node!r}: dtn.number {number}: ipn node number used twice (also node "
                                 f"{owner[number]!r})")
            owner[number] = node
    for node, piece in pieces.items():
        if piece is not None:
            _check_node_refs(node, piece, numbers, dtn_nodes)


def _check_node_refs(node: str, piece: DtnSpec, numbers: dict[str, int], dtn_nodes: list[str]) -> None:
    """The nodes one node's piece names (static peers, outside LTP peers, routes) are what they must be."""
    for peer in piece.static_peers or []:
        name = _resolve(peer, piece.eid, numbers, node, "dtn.static_peers", dtn_nodes)
        if name == node:
            raise ValueError(f"node {node!r}: dtn.static_peers names the node itself")
    for i, ext in enumerate(piece.ltp.peers if piece.cla == "ltp" else []):
        _check_outside_node(node, i, ext, piece.eid, numbers)
    for i, route in enumerate(piece.routes):
        if route.to != "*":
            _resolve(route.to, piece.eid, numbers, node, f"dtn.routes[{i}].to", dtn_nodes)
        if _resolve(route.via, piece.eid, numbers, node, f"dtn.routes[{i}].via", dtn_nodes) == node:
            raise ValueError(f"node {node!r}: dtn.routes[{i}].via {route.via!r}: not another DTN node "
                             f"(DTN nodes: {_span(dtn_nodes)})")


def _resolve(token: str, scheme: str, numbers: dict[str, int], node: str, field: str, dtn_nodes: list[str]) -> str:
    try:
        return resolve_node(token, scheme, numbers, field)
    except ValueError as exc:
        raise ValueError(f"node {node!r}: {exc} (DTN nodes: {_span(dtn_nodes)})") from None


def _check_outside_node(node: str, i: int, ext: LtpPeer, scheme: str, numbers: dict[str, int]) -> None:
    """An outside LTP peer's node ID is of the swarm's scheme and is no node of the swarm."""
    node_id = ext.node_id(scheme)
    if node_id is None:
        return
    m = _NODE_ID_RE.match(node_id)
    assert m is not None  # LtpPeer checked it
    field = f"node {node!r}: dtn.ltp.peers[{i}].node {node_id!r}"
    given = "dtn" if m.group(1) else "ipn"
    if given != scheme:
        raise ValueError(f"{field}: a {given} node ID, but dtn.eid is {scheme!r}")
    clash = m.group(1) if given == "dtn" else {str(n): name for name, n in numbers.items()}.get(m.group(2))
    if clash in numbers:
        raise ValueError(f"{field}: that is node {clash!r} of this swarm, not a node outside it")


def _check_ltp_engines(pieces: dict[str, Optional[DtnSpec]]) -> None:
    """Every LTP engine ID names one engine: a node (its `dtn.ltp.engine` or index) or one outside address."""
    owner: dict[int, str] = {}
    for i, (node, piece) in enumerate(pieces.items(), start=1):
        if piece is not None and piece.cla == "ltp":
            engine = piece.ltp.engine_of(i)
            if engine in owner:
                raise ValueError(f"node {node!r}: dtn.ltp.engine {engine}: used twice (also {owner[engine]})")
            owner[engine] = f"node {node!r}"
    for node, piece in pieces.items():
        for peer in piece.ltp.peers if piece is not None and piece.cla == "ltp" else []:
            other = owner.setdefault(peer.engine, f"peer {peer.address}")
            if other != f"peer {peer.address}":
                raise ValueError(f"node {node!r}: dtn.ltp.peers engine {peer.engine}: used twice (also {other})")


def _span(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 5 else f"{nodes[0]}..{nodes[-1]}"
