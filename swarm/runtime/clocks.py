"""Clock offset of each host against the orchestrator, NTP-style, and what it allows to claim.

A sweep releases every flow at one instant of the orchestrator's clock and reads back the nodes' own
stamps. On one host all clocks are one; across hosts each host's clock may be off. The offset is
measured the way NTP does over one exchange, repeated: the orchestrator stamps t0, asks a probe inside a
node on that host (a persistent `docker exec -i` conversation, so no process start sits in the path)
for its time t1, and stamps t3 when the answer is back. Then

    offset = t1 - (t0 + t3) / 2          (host clock minus orchestrator clock)
    uncertainty = (t3 - t0) / 2          (the host's stamp was taken somewhere inside the round trip)

and of several exchanges the one with the shortest round trip is kept (its bound is tightest). A stamp
the host wrote converts to the orchestrator's clock by subtracting the offset; an instant the
orchestrator picks converts to the host's clock by adding it. Differences between stamps of two hosts
are then known to within the sum of their uncertainties: a skew smaller than that is not resolved.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

#: The probe run inside a node: answers each line on stdin with its wall clock, until stdin closes.
PROBE_ARGV = ["python3", "-u", "-c",
              "import sys,time\nfor _ in sys.stdin:\n    sys.stdout.write(repr(time.time())+'\\n')\n    sys.stdout.flush()"]


@dataclass(frozen=True)
class ClockOffset:
    """A host's clock against the orchestrator's: host = orchestrator + offset_s, +- uncertainty_s."""

    host: str
    offset_s: float
    uncertainty_s: float
    rtt_s: float
    samples: int
    via: str = ""  # the node the probe ran in

    def to_host(self, orchestrator_ts: float) -> float:
        return orchestrator_ts + self.offset_s

    def to_orchestrator(self, host_ts: float) -> float:
        return host_ts - self.offset_s

    def as_dict(self) -> dict:
        return asdict(self)


def estimate(host: str, samples: Iterable[tuple[float, float, float]], via: str = "") -> ClockOffset:
    """The offset from (t0, t1, t3) exchanges: the one with the shortest round trip wins."""
    rows = [(t0, t1, t3) for t0, t1, t3 in samples if t3 >= t0]
    if not rows:
        return ClockOffset(host, math.nan, math.nan, math.nan, 0, via)
    t0, t1, t3 = min(rows, key=lambda r: r[2] - r[0])
    rtt = t3 - t0
    return ClockOffset(host, t1 - (t0 + t3) / 2, rtt / 2, rtt, len(rows), via)


def same_clock(host: str, via: str = "") -> ClockOffset:
    """The orchestrator's own host: offset 0 by definition (its nodes share its kernel clock)."""
    return ClockOffset(host, 0.0, 0.0, 0.0, 0, via)


def resolution(offsets: Iterable[ClockOffset]) -> float:
    """The finest time difference between stamps of any two of these hosts that the offsets resolve:
    the two largest uncertainties added (0 for a single host)."""
    u = sorted((o.uncertainty_s for o in offsets if not math.isnan(o.uncertainty_s)), reverse=True)
    if len(u) < 2:
        return u[0] if u else 0.0
    return u[0] + u[1]


def correct(stamps: Mapping[str, float], node_host: Mapping[str, str], offsets: Mapping[str, ClockOffset]) -> dict[str, float]:
    """Stamps taken on nodes ({node: host-clock ts}) on the orchestrator's clock."""
    out = {}
    for node, ts in stamps.items():
        off = offsets.get(node_host.get(node, ""))
        out[node] = ts - off.offset_s if off is not None and not math.isnan(off.offset_s) else ts
    return out


@dataclass
class NodeClocks:
    """Per-node view of the host offsets, for code that sends instants to nodes and reads their stamps.

    `to_node` turns an orchestrator instant into the node's clock (what to send it); `from_node` and
    `fix` turn what the node stamped back into the orchestrator's clock. `resolution_s` is the finest
    difference between two nodes' stamps the offsets resolve (0 when every node shares one clock).
    """

    offsets: dict[str, float]
    resolution_s: float = 0.0
    hosts: dict[str, ClockOffset] | None = None

    def to_node(self, node: str, ts: float) -> float:
        return ts + self.offsets.get(node, 0.0)

    def from_node(self, node: str, ts):
        if isinstance(ts, (int, float)) and not isinstance(ts, bool):
            return ts - self.offsets.get(node, 0.0)
        return ts

    def fix(self, node: str, record: dict) -> dict:
        """`record` with every numeric `*_ts` field moved to the orchestrator's clock (a copy)."""
        return {k: (self.from_node(node, v) if k.endswith("_ts") else v) for k, v in record.items()}


def node_clocks(offsets: Mapping[str, ClockOffset], node_host: Mapping[str, str]) -> NodeClocks:
    """NodeClocks from host offsets and the node placement (nodes on unmeasured hosts: offset 0)."""
    per_node = {}
    for node, host in node_host.items():
        off = offsets.get(host)
        if off is not None and not math.isnan(off.offset_s):
            per_node[node] = off.offset_s
    return NodeClocks(per_node, resolution(offsets.values()) if len(offsets) > 1 else 0.0, dict(offsets))
