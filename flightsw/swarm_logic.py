"""Pure logic of the reference swarm app (standard library only; runs in the node image and on the host).

- `sense`: the simulated sensor, a deterministic function of (node, cycle): how well the node sees each
  observation target this cycle (orbit phase against target bearing, plus a hashed per-cycle jitter).
- `allocate`: a DSA-like allocation of targets to nodes from the observations a node received. Every node
  runs it on its own inputs; nodes that received the same observations compute the same plan, so plan
  agreement measures what the network delivered. Greedy on (score desc, node, target), each node taking at
  most ceil(targets / nodes) targets, targets nobody sees (score <= 0) left unassigned.
- `plan_digest`: a short hash of a whole allocation, published with the node's state.
- `modal_agreement`: the swarm-wide agreement of one cycle: the share of nodes holding the most common plan.
- `WindowStats`: per-peer delivery ratio, latency and data age over fixed windows of send cycles.
"""
from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def sense(node: str, cycle: int, targets: int, period_cycles: int = 600) -> list[float]:
    """Scores in [0, 1] of `targets` targets seen by `node` at `cycle`: visibility along a circular orbit
    (one revolution every `period_cycles` cycles, the node's phase from its name) plus up to 0.1 of jitter."""
    phase = 2 * math.pi * (_unit("phase", node) + cycle / period_cycles)
    scores = []
    for t in range(targets):
        bearing = 2 * math.pi * t / targets
        visibility = max(0.0, math.cos(phase - bearing))
        scores.append(round(min(1.0, 0.9 * visibility + 0.1 * _unit("noise", node, cycle, t)), 6))
    return scores


def allocate(observations: dict[str, list[float]]) -> dict[int, str]:
    """Target index -> node, from each node's scores (the nodes a planner heard from, itself included)."""
    if not observations:
        return {}
    targets = max(len(s) for s in observations.values())
    cap = math.ceil(targets / len(observations))
    bids = sorted(((-score, node, t) for node, scores in observations.items() for t, score in enumerate(scores)
                   if score > 0))
    plan: dict[int, str] = {}
    load: Counter = Counter()
    for _neg, node, t in bids:
        if t not in plan and load[node] < cap:
            plan[t] = node
            load[node] += 1
    return plan


def plan_digest(plan: dict[int, str]) -> str:
    """12 hex digits identifying an allocation (equal plans, equal digests)."""
    text = ";".join(f"{t}={n}" for t, n in sorted(plan.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def modal_agreement(digests: list[str]) -> float:
    """Share of the given plans equal to the most common one (1.0: everyone agrees; NaN: no plans)."""
    if not digests:
        return math.nan
    return Counter(digests).most_common(1)[0][1] / len(digests)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


PEER_COLUMNS = ["node", "peer", "window_start", "window_s", "expected", "received", "delivery_ratio",
                "latency_p50_ms", "latency_p95_ms", "latency_max_ms", "age_mean_ms", "age_max_ms"]


@dataclass
class WindowStats:
    """Per-peer counts over windows of `window_cycles` send cycles; `topics` samples expected per peer and cycle.

    `received` counts each (peer, topic, cycle) once; a window is closed (`close_before`) once no sample of it
    can still be on time, and yields one row per peer: expected, received, ratio, latency percentiles, age."""

    node: str
    peers: list[str]
    rate_hz: float
    window_cycles: int
    topics: int = 2
    seen: dict = field(default_factory=lambda: defaultdict(set))
    latency: dict = field(default_factory=lambda: defaultdict(list))
    age: dict = field(default_factory=lambda: defaultdict(list))
    closed_below: int | None = None  # windows below this one are closed

    def window_of(self, cycle: int) -> int:
        return cycle // self.window_cycles

    def received(self, peer: str, topic: int, cycle: int, latency_s: float) -> None:
        key = (self.window_of(cycle), peer)
        if self.closed_below is not None and key[0] < self.closed_below:
            return  # too late: its window was reported already
        self.seen[key].add((topic, cycle))
        self.latency[key].append(latency_s)

    def data_age(self, peer: str, cycle: int, age_s: float) -> None:
        """Age of the newest data held from `peer` when the plan of `cycle` was made."""
        self.age[(self.window_of(cycle), peer)].append(age_s)

    def close_before(self, window: int, first_cycle: int = 0) -> list[dict]:
        """Rows of every window below `window` not closed yet, from the one holding `first_cycle` (the app's
        start: earlier cycles are not expected) on; a peer heard nothing from gets its row too (received 0)."""
        start_window = self.window_of(first_cycle) if self.closed_below is None else self.closed_below
        rows = []
        for w in range(start_window, window):
            start = max(w * self.window_cycles, first_cycle)
            cycles = (w + 1) * self.window_cycles - start
            if cycles <= 0:
                continue
            for peer in self.peers:
                got = len(self.seen.pop((w, peer), ()))
                lat = [x * 1000 for x in self.latency.pop((w, peer), [])]
                age = [x * 1000 for x in self.age.pop((w, peer), [])]
                expected = cycles * self.topics
                rows.append({"node": self.node, "peer": peer, "window_start": round(start / self.rate_hz, 3),
                             "window_s": round(cycles / self.rate_hz, 3), "expected": expected, "received": got,
                             "delivery_ratio": round(got / expected, 4),
                             "latency_p50_ms": _r(percentile(lat, 50)), "latency_p95_ms": _r(percentile(lat, 95)),
                             "latency_max_ms": _r(max(lat, default=math.nan)),
                             "age_mean_ms": _r(sum(age) / len(age) if age else math.nan),
                             "age_max_ms": _r(max(age, default=math.nan))})
        self.closed_below = max(window, start_window)
        for store in (self.seen, self.latency, self.age):  # samples of closed windows (late, or from non-peers)
            for key in [k for k in store if k[0] < self.closed_below]:
                del store[key]
        return rows


def _r(x: float) -> float | str:
    return "" if isinstance(x, float) and math.isnan(x) else round(x, 3)
