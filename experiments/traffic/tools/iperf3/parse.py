"""Parse iperf3 (3.12) `-J --get-server-output` client output, and line flows up in time.

Which side is the receiver (checked against the recorded fixtures in tests/fixtures/iperf3/):

- normal test (client sends): the server receives. Its report is embedded as `server_output_json`
  only when the SERVER runs with `-J`; a plain server gives `server_output_text`, which is not parsed.
- `-R`: the server sends, the client receives: the client's own report is the receiver's.
- `--bidir`: the main result is the client->server direction (like a normal test); the
  server->client direction is parsed as `FlowResult.bidir_reverse` (experiments/traffic/tools/result.py), read like a `-R` test from the
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

from experiments.traffic.tools.result import NAN, FlowResult, Interval


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
