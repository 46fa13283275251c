"""Pure planning and result assembly for the multiplexing traffic engine (`engine: mux`).

The engine itself is flightsw/trafficd.py: one process per node carries all of the node's flows.
`engine_plans` gives each node's plan (what it receives on one port, what it sends where at which
rate); `flow_result` joins the sender's and the receiver's reports of one flow into the same
`FlowResult` the iperf3 engine produces, so skew, concurrent window, tables and plots are computed by
the same code for both engines.
"""
from __future__ import annotations

import math

from experiments.traffic.model import ExperimentSpec, Flow, TestCase, _ips, server_ip
from experiments.traffic.iperf3 import NAN, FlowResult, Interval

_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


def size_bytes(text: str | None) -> int | None:
    """'1400' -> 1400, '128K' -> 131072 (iperf3's -l convention), None -> None."""
    if text is None:
        return None
    unit = text[-1] if text[-1] in "KMG" else ""
    return int(text[:-1] if unit else text) * _SIZE_UNITS[unit]


def engine_plans(flows: list[Flow], exp: ExperimentSpec, test: TestCase) -> dict[str, dict]:
    """{node name: the plan its engine reads}; every node that sends or receives gets one.

    All flows into a node share one port (`base_port`); a flow is told apart by its index, the source
    node's index (unique per destination).
    """
    plans: dict[str, dict] = {}

    def plan_of(node) -> dict:
        if node.name not in plans:
            plans[node.name] = {"protocol": test.protocol, "bind": server_ip(node, exp.network),
                                "port": exp.base_port, "length": size_bytes(exp.iperf3.length),
                                "interval": exp.iperf3.interval, "out": [], "in": []}
        return plans[node.name]

    for f in flows:
        _src_ip, dst_ip = _ips(f, exp.network)
        plan_of(f.src)["out"].append({"id": f.flow_id, "index": f.src.index, "dst": dst_ip, "port": exp.base_port,
                                      "rate_bps": test.rate_bps if test.protocol == "udp" else None})
        plan_of(f.dst)["in"].append({"id": f.flow_id, "index": f.src.index})
    return plans


def flow_result(protocol: str, send: dict | None, recv: dict | None, release: float, duration: float,
                interval: float) -> FlowResult:
    """One flow's FlowResult from its sender's and receiver's engine records.

    The flow's data start (`spawn_ts`, which is the interval origin) is its first datagram or write,
    stamped by the sender. Interval k covers [release + k*interval, release + (k+1)*interval] clipped to
    [first send, release + duration]; bytes are the receiver's, binned by receive time (anything that
    arrived after the end counts in the last interval); for UDP, packets are those sent in the interval
    and lost packets those of them that never arrived.
    """
    base = {"protocol": protocol, "planned_duration": duration, "summary_side": "server"}
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
    intervals = []
    for k in range(count):
        a = max(release + k * interval, first)
        b = min(release + (k + 1) * interval, end)
        if b <= a:
            continue
        packets = lost = None
        if protocol == "udp":
            packets = _at(send.get("bins_packets", []), k)
            lost = max(0, packets - _at(recv.get("bins_sent_packets", []), k))
        intervals.append(Interval(start=a - first, end=b - first, bytes=recv_bytes[k],
                                  bits_per_second=8.0 * recv_bytes[k] / (b - a), packets=packets, lost_packets=lost))
    ok = not (protocol == "tcp" and send.get("error"))
    result = FlowResult(ok=ok, error="" if ok else send["error"], spawn_ts=first, duration=span,
                        bits_per_second=8.0 * recv.get("bytes", 0) / span, bytes=recv.get("bytes", 0),
                        sent_bits_per_second=8.0 * send.get("bytes", 0) / span,
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
