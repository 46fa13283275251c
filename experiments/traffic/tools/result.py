"""What every traffic tool's flow comes to: one directed flow seen from its receiver (`FlowResult`, its
reporting `Interval`s), and the figures computed from flows whatever tool measured them: start skew, the
concurrent window (the span in which every flow ran) and each flow's figures inside it. Pure: the report
(analysis/) reads flows with these, and no tool's name appears here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

NAN = float("nan")


@dataclass(frozen=True)
class Interval:
    """One reporting interval, in seconds relative to the reporting side's test start."""

    start: float
    end: float
    bytes: int
    bits_per_second: float
    packets: int | None = None
    lost_packets: int | None = None


@dataclass
class FlowResult:
    """One directed flow, seen from its receiver, whichever tool measured it.

    Sides are named as a client/server tool names them: the client sends unless `reverse` (data flows
    server->client, as with iperf3's `-R` and the `bidir_reverse` of a --bidir test); `summary_side` and
    `interval_side` say whose report the figures came from. `spawn_ts` is the flow's data start as the tool
    knows it (stamped or inferred); `timesecs`, when a tool gives it, whole seconds of the client clock at
    connect time. `planned_duration` is the requested length; `duration` the receiver's measured seconds.
    """

    protocol: str = ""
    ok: bool = False
    error: str = ""
    reverse: bool = False
    bidir: bool = False
    spawn_ts: float | None = None
    timesecs: int | None = None
    planned_duration: float = NAN
    duration: float = NAN
    bits_per_second: float = NAN
    sent_bits_per_second: float = NAN  # what the sender put on the wire (host-limited if under the offer)
    sent_seconds: float = NAN  # the sender's measured seconds (`duration` is the receiver's)
    bytes: int | None = None
    packets: int | None = None
    lost_packets: int | None = None
    lost_percent: float = NAN
    jitter_ms: float = NAN
    summary_side: str = ""
    intervals: list[Interval] = field(default_factory=list)
    interval_side: str = ""
    bidir_reverse: FlowResult | None = None

    @property
    def intervals_from_receiver(self) -> bool:
        """True when `intervals` were reported by the receiving side."""
        receiver = "client" if self.reverse else "server"
        return bool(self.intervals) and self.interval_side == receiver

    @property
    def origin(self) -> float:
        """Estimated epoch time of interval time 0, or NaN without `spawn_ts`.

        The data starts after the process spawned (`spawn_ts`) and after the control connection
        (whose time, truncated to whole seconds, is `timesecs`), so the later of the two is used:
        a lower bound that ignores the (normally millisecond) connect and parameter exchange and
        the offset between the client's and the server's interval clocks.
        """
        if self.spawn_ts is None:
            return NAN
        if self.timesecs is None:
            return float(self.spawn_ts)
        return max(float(self.spawn_ts), float(self.timesecs))

    def as_row(self) -> dict:
        """The scalar fields (no intervals, no bidir_reverse) as a dict for a tidy table row."""
        skip = {"intervals", "bidir_reverse"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


def start_skew(starts: list[float]) -> float:
    """Spread (latest - earliest) of start times in seconds; NaN/None ignored, 0.0 if fewer than 2."""
    valid = [float(s) for s in starts if s is not None and not math.isnan(s)]
    return max(valid) - min(valid) if len(valid) >= 2 else 0.0


def concurrent_window(flows: list[FlowResult]) -> tuple[float, float]:
    """(latest data start, earliest data end) in epoch seconds over the ok flows with intervals.

    A flow's data runs from `origin + intervals[0].start` to `origin + intervals[-1].end` (see
    `FlowResult.origin` for the approximation). Failed flows and flows without `spawn_ts` or
    intervals are left out. An empty or negative window is returned as (t0, t0); no usable flow
    gives (NaN, NaN).
    """
    spans = [
        (f.origin + f.intervals[0].start, f.origin + f.intervals[-1].end)
        for f in flows
        if f.ok and f.intervals and not math.isnan(f.origin)
    ]
    if not spans:
        return NAN, NAN
    t0 = max(s for s, _ in spans)
    t1 = min(e for _, e in spans)
    return (t0, t1) if t1 > t0 else (t0, t0)


def window_figures(flow: FlowResult, t0: float, t1: float) -> dict:
    """Figures of the flow over exactly [t0, t1] (epoch seconds), from its receiver intervals.

    An interval partly inside the window counts in proportion to its overlap (bytes, packets and lost
    packets are taken as spread evenly over the interval), so the figure covers the whole window even
    when intervals of differently started flows are not aligned. Returns bits_per_second, lost_percent
    (UDP with receiver intervals only), lost_packets, packets, seconds covered and the number of
    intervals touched. Figures are NaN when nothing overlaps (or, for loss, without loss counts).
    """
    origin = flow.origin
    parts = []  # (interval, fraction of it inside the window)
    for iv in flow.intervals:
        start, end = origin + iv.start, origin + iv.end
        overlap = min(end, t1) - max(start, t0)
        if end > start and overlap > 1e-9:
            parts.append((iv, overlap / (end - start)))
    seconds = sum((iv.end - iv.start) * frac for iv, frac in parts)
    figures: dict[str, float] = {"intervals": len(parts), "seconds": seconds, "bits_per_second": NAN,
                                 "lost_percent": NAN, "lost_packets": NAN, "packets": NAN}
    if not parts or seconds <= 0:
        return figures
    figures["bits_per_second"] = 8 * sum(iv.bytes * frac for iv, frac in parts) / seconds
    counts = [(iv.lost_packets, iv.packets, frac) for iv, frac in parts]
    if flow.protocol == "udp" and all(lost is not None and sent is not None for lost, sent, _ in counts):
        lost = sum((n or 0) * frac for n, _, frac in counts)
        packets = sum((n or 0) * frac for _, n, frac in counts)
        figures["lost_packets"], figures["packets"] = lost, packets
        if packets > 0:
            figures["lost_percent"] = 100.0 * lost / packets
    return figures
