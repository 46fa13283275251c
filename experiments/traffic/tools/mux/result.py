"""Reading the multiplexing tool's records (pure, no planning imports): `flow_result` joins the sender's and the
receiver's records of one flow into the tool-neutral FlowResult, so the report (analysis/) can rebuild a flow's
intervals from its raw record without the runtime."""
from __future__ import annotations

import math
from typing import Any

from experiments.traffic.tools.result import NAN, FlowResult, Interval


def flow_result(protocol: str, send: dict | None, recv: dict | None, release: float, duration: float,
                interval: float) -> FlowResult:
    """One flow's FlowResult from its sender's and receiver's engine records.

    The flow's data start (`spawn_ts`, which is the interval origin) is its first datagram or write,
    stamped by the sender. Interval k covers [release + k*interval, release + (k+1)*interval] clipped to
    [first send, release + duration]; bytes are the receiver's, binned by receive time (anything that
    arrived after the end counts in the last interval); for UDP, packets are those sent in the interval
    (one due before the end but sent after it in the last) and lost packets those of them that never arrived.
    """
    base: dict[str, Any] = {"protocol": protocol, "planned_duration": duration, "summary_side": "server"}
    if send is None:
        return FlowResult(error="no report from the sending node's engine", **base)
    first = send.get("first_send_ts")
    if first is None:
        return FlowResult(error=send.get("error") or "the flow sent nothing", **base)
    if recv is None:
        return FlowResult(error="no report from the receiving node's engine", spawn_ts=first, **base)
    end = release + duration  # every sender stops here (a slow flow's last datagram may be a gap earlier)
    span = max(end - first, 1e-9)
    count = max(1, math.ceil(duration / interval - 1e-9))
    recv_bytes = _folded(recv.get("bins_bytes", []), count)
    # a datagram due before the end but sent after it (a late wake-up on a busy host) counts in the last interval
    sent_packets = _folded(send.get("bins_packets", []), count)
    arrived_by_send = _folded(recv.get("bins_sent_packets", []), count)
    intervals = []
    for k in range(count):
        a = max(release + k * interval, first)
        b = min(release + (k + 1) * interval, end)
        if b <= a:
            continue
        packets = lost = None
        if protocol == "udp":
            packets = sent_packets[k]
            lost = max(0, packets - arrived_by_send[k])
        intervals.append(Interval(start=a - first, end=b - first, bytes=recv_bytes[k],
                                  bits_per_second=8.0 * recv_bytes[k] / (b - a), packets=packets, lost_packets=lost))
    ok = not (protocol == "tcp" and send.get("error"))
    result = FlowResult(ok=ok, error="" if ok else send["error"], spawn_ts=first, duration=span,
                        bits_per_second=8.0 * recv.get("bytes", 0) / span, bytes=recv.get("bytes", 0),
                        sent_bits_per_second=8.0 * send.get("bytes", 0) / span, sent_seconds=span,
                        intervals=intervals, interval_side="server", **base)
    if protocol == "udp":
        sent, got = send.get("packets", 0), recv.get("packets", 0)
        result.packets, result.lost_packets = sent, max(0, sent - got)
        result.lost_percent = 100.0 * result.lost_packets / sent if sent else NAN
        result.jitter_ms = recv.get("jitter_ms", NAN)
    return result


def _at(bins: list, k: int) -> int:
    return bins[k] if k < len(bins) else 0


def _folded(bins: list, count: int) -> list[int]:
    """`bins` cut to `count` entries, everything beyond added to the last one."""
    out = [_at(bins, k) for k in range(count)]
    out[-1] += sum(bins[count:])
    return out
