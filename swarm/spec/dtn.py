"""The `dtn:` piece of a swarm spec: a Bundle Protocol agent (dtn7-rs `dtnd`) on a node.

```yaml
defaults:                 # every node; or per group / per node (the most specific piece wins whole)
  dtn:
    agent: dtn7           # the one BPv7 agent installable here from a package registry (Cargo's `dtn7`)
    cla: tcp              # tcp (TCPCLv4, RFC 9174) | mtcp | udp | http | ltp (LTP, RFC 5326: swarm-ltpcla)
    ltp: {segment: 1360, red: 1.0}   # cla: ltp only: segment size (bytes), red (reliable) fraction, ...
    routing: epidemic     # epidemic | sprayandwait | flooding | static
    peers: static         # static: every other DTN node (or `static_peers`) | auto: IPND beacons on the ISL
    storage: {backend: mem, limit: 256m}
```

Node `<name>` is the endpoint `dtn://<name>/`; applications receive on `dtn://<name>/in`. A ground station is
an ordinary node of the swarm (name it, e.g. `ground`, or give it `role: ground`): it is a DTN endpoint like
any other. Pure: validation only, nothing is started here.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import Field, field_validator, model_validator

from swarm.spec.validation import Strict
from swarm.units import parse_link_rate

AGENTS = ("dtn7",)
CLAS = ("tcp", "mtcp", "udp", "http", "ltp")
ROUTINGS = ("epidemic", "sprayandwait", "flooding", "static")
STORES = ("mem", "sled", "sneakers")
PEER_MODES = ("auto", "static")
#: The port each CLA listens on (dtn7-rs's defaults; `http` rides on the agent's web port).
CLA_PORTS = {"tcp": 4556, "mtcp": 16162, "udp": 4556, "ltp": 1113}  # ltp: IANA's LTP port
WEB_PORT = 3000
DISCOVERY_PORT = 3003
#: UDP CLA: one bundle per datagram, so a bundle must fit into one IPv4 UDP datagram with its headers.
UDP_MAX_BUNDLE = 65_507
#: LTP CLA: a received block goes to dtnd as base64 in one WebSocket frame (dtnd's limit 16 MiB).
LTP_MAX_BUNDLE = 12_000_000
#: The endpoint (service) every agent registers for applications: dtn://<node>/in.
APP_SERVICE = "in"

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\Z", re.IGNORECASE)
_DUR_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\Z")


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
    match = _DUR_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"{field} {value!r}: expected a duration like 2s, 500ms or 1m")
    seconds = float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
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

    @field_validator("segment", mode="before")
    @classmethod
    def _segment(cls, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not 64 <= v <= 65_507:
            raise ValueError(f"dtn.ltp.segment {v!r}: must be a whole number of bytes in 64..65,507 (one UDP datagram)")
        return v

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Optional[int]:
        if v is None:
            return None
        try:
            rate = parse_link_rate(v)
        except (ValueError, TypeError):
            raise ValueError(f"dtn.ltp.rate {v!r}: expected a rate like 1Gbit or 100Mbit") from None
        if not rate or rate <= 0:
            raise ValueError(f"dtn.ltp.rate {v!r}: must be positive (LTP is paced)")
        return int(rate)

    @field_validator("margin", mode="before")
    @classmethod
    def _margin(cls, v: Any) -> float:
        return parse_seconds(v, "dtn.ltp.margin")


class StaticRoute(Strict):
    """`routing: static`: bundles to `to` (a node name or `*`) go to the next hop `via` (a node name)."""

    to: str
    via: str


class DtnSpec(Strict):
    """A BPv7 agent on a node (see the module text)."""

    agent: str = "dtn7"
    cla: str = "tcp"
    routing: str = "epidemic"
    peers: str = "static"
    static_peers: Optional[list[str]] = None  # peers: static -> these nodes (default: every other DTN node)
    routes: list[StaticRoute] = Field(default_factory=list)  # routing: static (default: direct to each peer)
    copies: int = Field(4, ge=1, le=1024)  # routing: sprayandwait -> num_copies
    storage: DtnStorage = DtnStorage()
    ltp: LtpSpec = LtpSpec()  # cla: ltp only
    janitor: float = 1.0  # s: how often the agent retries stored bundles (dtn7-rs default 10 s)
    discovery_interval: float = 1.0  # s: IPND beacon period (peers: auto)
    peer_timeout: float = 10.0  # s: a discovered peer silent this long is dropped (peers: auto)
    web_port: int = Field(WEB_PORT, ge=1, le=65535)
    # s, one-way: the delay dtnd's CLA timeouts allow for (swarm.dtn.plan.cla_timeouts); default: the longest
    # delay of the node's links in `links:`. Set it when delays grow after the start (orbits, `swarm links`).
    max_delay: Optional[float] = None
    quickack: bool = True  # `quickack 1` on the node's ISL route: no 40 ms delayed ACK per TCP-CLA transfer
    debug: bool = False  # dtnd -d: debug log (large)

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        return _one_of("dtn.agent", v, AGENTS)

    @field_validator("cla")
    @classmethod
    def _cla(cls, v: str) -> str:
        return _one_of("dtn.cla", v, CLAS)

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

    @model_validator(mode="after")
    def _consistent(self) -> "DtnSpec":
        if self.routes and self.routing != "static":
            raise ValueError(f"dtn.routes: only for routing 'static' (routing is {self.routing!r})")
        if self.static_peers is not None and self.peers != "static":
            raise ValueError(f"dtn.static_peers: only for peers 'static' (peers is {self.peers!r})")
        for key in ("janitor", "discovery_interval", "peer_timeout", "max_delay"):
            if (getattr(self, key) or 0) > 3600:
                raise ValueError(f"dtn.{key} {getattr(self, key)} s: more than an hour")
        return self

    def cla_port(self) -> int:
        """The port the CLA listens on (http: the web port)."""
        return self.web_port if self.cla == "http" else CLA_PORTS[self.cla]

    def max_bundle(self) -> Optional[int]:
        """The largest bundle (bytes) this agent can carry or keep, or None when unbounded."""
        limits = [x for x in (self.storage.limit, UDP_MAX_BUNDLE if self.cla == "udp" else None,
                              LTP_MAX_BUNDLE if self.cla == "ltp" else None) if x]
        return min(limits) if limits else None


def endpoint(node: str, service: str = "") -> str:
    """The endpoint ID of `node` (dtn://<node>/), or of one of its services (dtn://<node>/<service>)."""
    return f"dtn://{node}/{service}"


def check_dtn_nodes(pieces: dict[str, Optional[DtnSpec]]) -> None:
    """Swarm-wide checks (pieces: node name -> its dtn piece or None, in index order): peers and routes
    name DTN nodes of this swarm, and all agents speak one CLA. Raises ValueError with one line."""
    dtn_nodes = [n for n, p in pieces.items() if p is not None]
    known = set(dtn_nodes)
    clas = {p.cla for p in pieces.values() if p is not None}
    if len(clas) > 1:
        raise ValueError(f"dtn.cla: nodes use {', '.join(sorted(clas))}; all agents of a swarm must share one "
                         "convergence layer to reach each other")
    for node, piece in pieces.items():
        if piece is None:
            continue
        for peer in piece.static_peers or []:
            if peer == node:
                raise ValueError(f"node {node!r}: dtn.static_peers names the node itself")
            if peer not in known:
                raise ValueError(f"node {node!r}: dtn.static_peers {peer!r}: no DTN node of that name "
                                 f"(DTN nodes: {_span(dtn_nodes)})")
        for i, route in enumerate(piece.routes):
            if route.to != "*" and route.to not in known:
                raise ValueError(f"node {node!r}: dtn.routes[{i}].to {route.to!r}: no DTN node of that name")
            if route.via not in known or route.via == node:
                raise ValueError(f"node {node!r}: dtn.routes[{i}].via {route.via!r}: not another DTN node "
                                 f"(DTN nodes: {_span(dtn_nodes)})")


def _span(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 5 else f"{nodes[0]}..{nodes[-1]}"
