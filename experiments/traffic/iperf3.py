"""Parse iperf3 (3.12) `-J --get-server-output` client output, and line flows up in time.

Which side is the receiver (checked against the recorded fixtures in tests/fixtures/iperf3/):

- normal test (client sends): the server receives. Its report is embedded as `server_output_json`
  only when the SERVER runs with `-J`; a plain server gives `server_output_text`, which is not parsed.
- `-R`: the server sends, the client receives: the client's own report is the receiver's.
- `--bidir`: the main result is the client->server direction (like a normal test); the
  server->client direction is parsed as `FlowResult.bidir_reverse`, read like a `-R` test from the
  `*_bidir_reverse` sums of the client's report.

Whole-test figures come from `end.sum_received` of the receiver's report when it is present, else
from the client's `end.sum_received`, which in 3.12 carries the receiver's bytes, packets, loss and
jitter. Not used: `end.sum` (UDP): on the server its bytes and bits_per_second are 0, on the client
they are the SENDER's while loss and jitter are the receiver's.

Intervals come from the receiver's report when present (`interval_side` names whose report it was:
'server' or 'client'); otherwise from the client's, which for a normal test are the SENDER's
intervals (no UDP loss in them). Omitted (`-O`) intervals are dropped, and so are repeated
intervals (an interrupted 3.12 client can print the same interval twice).
"""
from __future__ import annotations

import json
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
    """One directed iperf3 flow, seen from its receiver.

    `reverse` is True when data flows server->client (`-R`, and `bidir_reverse` of a --bidir test).
    `timesecs` is start.timestamp.timesecs: whole seconds of the client clock at connect time.
    `planned_duration` is the requested `-t`; `duration` the receiver's measured seconds.
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


def parse_client_json(text: str, spawn_ts: float | None = None) -> FlowResult:
    """Parse one client's `iperf3 -c ... -J --get-server-output` stdout; never raises on bad input.

    Invalid or truncated JSON (e.g. a killed client, which prints nothing) gives ok=False and
    error 'invalid JSON: ...'; JSON missing expected fields gives 'unexpected iperf3 JSON: ...'. iperf3's own
    top-level "error" (or the embedded server report's)
    gives ok=False with that message; figures present in the partial report are still filled in.
    """
    if not text.strip():
        return FlowResult(error="invalid JSON: empty output", spawn_ts=spawn_ts)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return FlowResult(error=f"invalid JSON: {exc}", spawn_ts=spawn_ts)
    if not isinstance(doc, dict):
        return FlowResult(error="invalid JSON: top level is not an object", spawn_ts=spawn_ts)
    try:
        return _parse(doc, spawn_ts)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return FlowResult(error=f"unexpected iperf3 JSON: {type(exc).__name__}: {exc}", spawn_ts=spawn_ts)


def _parse(doc: dict, spawn_ts: float | None) -> FlowResult:
    server = doc.get("server_output_json")
    server = server if isinstance(server, dict) else None
    start = doc.get("start") or {}
    test_start = start.get("test_start") or {}
    end = doc.get("end") or {}
    bidir = "sum_sent_bidir_reverse" in end or any(
        "sum_bidir_reverse" in iv for iv in doc.get("intervals") or []
    )
    error = str(doc.get("error") or "")
    if not error and server and server.get("error"):
        error = f"server: {server['error']}"
    common = {
        "protocol": str(test_start.get("protocol", "")).lower(),
        "error": error,
        "bidir": bidir,
        "spawn_ts": spawn_ts,
        "timesecs": (start.get("timestamp") or {}).get("timesecs"),
        "planned_duration": float(test_start.get("duration", NAN)),
    }
    result = _direction(doc, server, reverse=bool(test_start.get("reverse")), suffix="", **common)
    if bidir:
        result.bidir_reverse = _direction(doc, server, reverse=True, suffix="_bidir_reverse", **common)
    return result


def _direction(client: dict, server: dict | None, *, reverse: bool, suffix: str, **common) -> FlowResult:
    """Receiver-side figures of one direction; `suffix` selects the --bidir reverse sums."""
    candidates = [(client, "client")] if reverse else [(server, "server"), (client, "client")]
    result = FlowResult(reverse=reverse, **common)

    for doc, side in candidates:
        summary = ((doc or {}).get("end") or {}).get("sum_received" + suffix)
        if summary:
            result.summary_side = side
            result.duration = float(summary.get("seconds", NAN))
            result.bits_per_second = float(summary.get("bits_per_second", NAN))
            result.bytes = summary.get("bytes")
            if result.protocol == "udp":
                result.packets = summary.get("packets")
                result.lost_packets = summary.get("lost_packets")
                result.lost_percent = float(summary.get("lost_percent", NAN))
                result.jitter_ms = float(summary.get("jitter_ms", NAN))
            break

    sender = server if reverse else client
    sent = ((sender or {}).get("end") or {}).get("sum_sent" + suffix) or {}
    result.sent_bits_per_second = float(sent.get("bits_per_second", NAN))
    result.sent_seconds = float(sent.get("seconds", NAN))

    key = "sum_bidir_reverse" if suffix else "sum"
    for doc, side in candidates:
        intervals = _intervals(doc, key)
        if intervals:
            result.intervals, result.interval_side = intervals, side
            break

    result.ok = not result.error and bool(result.summary_side)
    if not result.error and not result.summary_side:
        result.error = "no end summary in iperf3 output"
    return result


def _intervals(doc: dict | None, key: str) -> list[Interval]:
    """The `key` sums of a report's intervals, without omitted or repeated ones."""
    out: list[Interval] = []
    seen: set[tuple[float, float]] = set()
    for iv in (doc or {}).get("intervals") or []:
        s = iv.get(key)
        if not s or s.get("omitted"):
            continue
        span = (float(s["start"]), float(s["end"]))
        if span in seen:
            continue
        seen.add(span)
        out.append(Interval(span[0], span[1], int(s["bytes"]), float(s["bits_per_second"]),
                            s.get("packets"), s.get("lost_packets")))
    return out


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
    figures = {"intervals": len(parts), "seconds": seconds, "bits_per_second": NAN,
               "lost_percent": NAN, "lost_packets": NAN, "packets": NAN}
    if not parts or seconds <= 0:
        return figures
    figures["bits_per_second"] = 8 * sum(iv.bytes * frac for iv, frac in parts) / seconds
    if flow.protocol == "udp" and all(iv.lost_packets is not None and iv.packets is not None for iv, _ in parts):
        lost = sum(iv.lost_packets * frac for iv, frac in parts)
        packets = sum(iv.packets * frac for iv, frac in parts)
        figures["lost_packets"], figures["packets"] = lost, packets
        if packets > 0:
            figures["lost_percent"] = 100.0 * lost / packets
    return figures
