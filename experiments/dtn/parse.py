"""Readers of what a DTN test leaves behind (pure): the traffic program's JSON lines (flightsw/dtn_traffic.py),
dtnd's own log, and the per-bundle and per-test figures made from them.

- `read_events(text)`: the JSON-line events of one node's traffic program.
- the agent's log as events per bundle (its adapter's log_events, e.g. dtn7's parse_dtnd_log):
  created, received, forwarded, failed, delivered, removed.
- `bundle_rows(...)`: one row per bundle sent (delivered or not), joined on (source, destination, sequence);
  the delivery time is the moment the receiving program took the bundle from its agent; the agent's own
  "Delivering" log stamp (ms) is kept beside it when present.
- `store_rows(...)`: per node, bundles held in the store over time.
- `figures(...)`: delivery ratio, latency p50/p95/max, goodput (payload bit/s), total rate, bundle rate,
  duplicates, storage peak.
"""
from __future__ import annotations

import json
import math
import re
from typing import Iterable, Optional

from flightsw import protocol as proto

DTN_EPOCH = 946_684_800  # RFC 9171: DTN time counts milliseconds since 2000-01-01T00:00:00Z

BUNDLE_COLUMNS = ["run_id", "test_id", "src", "dst", "seq", "bid", "size", "created_ts", "accepted_ts",
                  "delivered_ts", "agent_delivered_ts", "latency_s", "hops", "delivered", "copies", "error"]
STORE_COLUMNS = ["run_id", "test_id", "node", "t_s", "ts", "bundles", "entries", "forward_pending", "deleted"]

_BID_RE = re.compile(r"^(.*/)-(\d+)-(\d+)(?:-\d+-\d+)?$")


def read_events(text: str) -> list[dict]:
    """The JSON objects of a traffic program's output, one per line; other lines are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and proto.EV in obj:
            out.append(obj)
    return out


def node_of(eid: str) -> str:
    """'dtn://sat01/in' or 'dtn://sat01/' -> 'sat01'."""
    rest = eid.split("://", 1)[-1]
    return rest.split("/", 1)[0]


def parse_bid(bid: str) -> tuple[str, int, int]:
    """A dtn7-rs bundle ID '<source EID>-<DTN ms>-<seq>' -> (source node, creation epoch ms, sequence)."""
    m = _BID_RE.match(bid)
    if not m:
        raise ValueError(f"bundle ID {bid!r}: expected <source EID>-<DTN time ms>-<sequence>")
    return node_of(m.group(1)), int(m.group(2)) + DTN_EPOCH * 1000, int(m.group(3))


def bundle_rows(sent: dict[str, list[dict]], received: dict[str, list[dict]],
                agent_logs: Optional[dict[str, list[dict]]] = None, run_id: str = "", test_id: str = "") -> list[dict]:
    """One row per bundle sent. `sent`/`received`: node -> its traffic events; `agent_logs`: node -> its
    log events (Agent.log_events; optional, for the agent's own delivery stamp). A bundle received more than once
    (epidemic copies, a retransmission) is one row with `copies` > 1 and the first delivery's time."""
    first, copies = _first_deliveries(received)
    agent_delivery: dict[tuple[str, str], float] = {}
    for node, events in (agent_logs or {}).items():
        for ev in events:
            if ev["kind"] == "delivered":
                agent_delivery.setdefault((node, ev["bid"]), ev["t"])
    rows = []
    for node, events in sent.items():
        for ev in events:
            if ev.get(proto.EV) != proto.EV_SENT:
                continue
            dst = ev.get("to") or node_of(ev["dst"])  # the node (an ipn EID names it by number)
            key = (node, dst, int(ev["seq"]))
            rows.append({"run_id": run_id, "test_id": test_id, "src": node, "dst": dst, "seq": int(ev["seq"]),
                         **_delivery(ev, first.get(key), agent_delivery, dst), "copies": copies.get(key, 0),
                         "error": ev.get("error", "") if not ev.get("ok", True) else ""})
    rows.sort(key=lambda r: (r["created_ts"], r["src"], r["seq"]))
    return rows


def _first_deliveries(received: dict[str, list[dict]]) -> tuple[dict[tuple[str, str, int], dict],
                                                                 dict[tuple[str, str, int], int]]:
    """Per (source, destination, sequence): the first `recv` event and how many copies arrived."""
    first: dict[tuple[str, str, int], dict] = {}
    copies: dict[tuple[str, str, int], int] = {}
    for node, events in received.items():
        for ev in events:
            if ev.get(proto.EV) != proto.EV_RECV or ev.get("seq") is None:
                continue
            key = (ev.get("from") or node_of(ev["src"]), node, int(ev["seq"]))
            copies[key] = copies.get(key, 0) + 1
            if key not in first or ev["t"] < first[key]["t"]:
                first[key] = ev
    return first, copies


def _delivery(ev: dict, got: dict | None, agent_delivery: dict[tuple[str, str], float], dst: str) -> dict:
    """The columns of a sent bundle's row from its `sent` event and its first delivery (None: not delivered),
    in bundles.csv's order from "bid" to "delivered"."""
    bid = got["bid"] if got else ""
    return {"bid": bid, "size": int(ev["size"]), "created_ts": round(ev["t"], 6),
            "accepted_ts": round(ev.get("t_ack", ev["t"]), 6), "delivered_ts": round(got["t"], 6) if got else "",
            "agent_delivered_ts": round(agent_delivery[(dst, bid)], 3) if got and (dst, bid) in agent_delivery else "",
            "latency_s": round(got["t"] - ev["t"], 6) if got else "",
            "hops": got.get("hops") if got and got.get("hops") is not None else "", "delivered": got is not None}


def store_rows(samples: dict[str, list[dict]], t0: float, run_id: str = "", test_id: str = "") -> list[dict]:
    """Per node and sample: bundles held (not deleted), all entries, and the ForwardPending / Deleted counts."""
    rows = []
    for node, events in samples.items():
        for ev in events:
            if ev.get(proto.EV) != proto.EV_STORE:
                continue
            c = ev.get("constraints", {})
            rows.append({"run_id": run_id, "test_id": test_id, "node": node, "t_s": round(ev["t"] - t0, 3),
                         "ts": round(ev["t"], 3), "bundles": ev.get("bundles", 0), "entries": ev.get("entries", 0),
                         "forward_pending": c.get("ForwardPending", 0), "deleted": c.get("Deleted", 0)})
    rows.sort(key=lambda r: (r["ts"], r["node"]))
    return rows


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def figures(rows: list[dict], store: Iterable[dict] = (), overhead_bytes: int = 0) -> dict:
    """Figures of one test from its bundle rows (and store samples).

    The time base of the rates is the test's active span: from the first bundle created to the last one
    delivered (seed 001's payload-only rate / bundle rate over the transfer). `overhead_bytes`: BPv7 header
    bytes per bundle (primary + extension blocks), for the total rate."""
    sent = len(rows)
    got = [r for r in rows if r["delivered"]]
    lat = [float(r["latency_s"]) for r in got]
    out = {"bundles_sent": sent, "bundles_delivered": len(got),
           "delivery_ratio": len(got) / sent if sent else math.nan,
           "latency_p50_s": percentile(lat, 50), "latency_p95_s": percentile(lat, 95),
           "latency_max_s": max(lat) if lat else math.nan, "latency_min_s": min(lat) if lat else math.nan,
           "duplicates": sum(max(0, r["copies"] - 1) for r in rows),
           "send_errors": sum(1 for r in rows if r["error"])}
    if got:
        start = min(r["created_ts"] for r in rows)
        end = max(float(r["delivered_ts"]) for r in got)
        span = max(end - start, 1e-9)
        payload = sum(r["size"] for r in got)
        out.update(span_s=span, goodput_bps=8.0 * payload / span,
                   total_rate_bps=8.0 * (payload + overhead_bytes * len(got)) / span,
                   bundle_rate=len(got) / span)
        accepted = max(r["accepted_ts"] for r in rows)
        out["offered_bundle_rate"] = sent / max(accepted - start, 1e-9)
    else:
        out.update(span_s=math.nan, goodput_bps=0.0, total_rate_bps=0.0, bundle_rate=0.0, offered_bundle_rate=math.nan)
    store = list(store)
    out["store_peak_bundles"] = max((s["bundles"] for s in store), default=0)
    hops = [int(r["hops"]) for r in got if r["hops"] != ""]
    out["hops_mean"] = sum(hops) / len(hops) if hops else math.nan
    return out


IP_COLUMNS = ["run_id", "test_id", "src", "dst", "second", "sent", "received", "lost"]


def ip_rows(sent: dict[str, list[dict]], received: dict[str, list[dict]], release: float, run_id: str,
            test_id: str) -> list[dict]:
    """Per directed pair and second since release: UDP probe datagrams sent, received, lost (pure)."""
    got = {(ev["src"], node, ev["seq"]) for node, evs in received.items() for ev in evs
           if ev.get(proto.EV) == proto.EV_IP_RECV}
    bins: dict[tuple[str, str, int], list[int]] = {}
    for node, evs in sent.items():
        for ev in evs:
            if ev.get(proto.EV) != proto.EV_IP_SENT:
                continue
            key = (node, ev["dst"], int(math.floor(ev["t"] - release)))
            b = bins.setdefault(key, [0, 0])
            b[0] += 1
            b[1] += (node, ev["dst"], ev["seq"]) in got
    return [{"run_id": run_id, "test_id": test_id, "src": s, "dst": d, "second": sec, "sent": n, "received": r,
             "lost": n - r} for (s, d, sec), (n, r) in sorted(bins.items())]


def first_failure(lines: dict[str, list[tuple[Optional[float], str]]], order: list[str], since: float,
                  limit: int = 300) -> str:
    """What failed, in a peer's own words (pure): the first of `lines` (node -> its agent's failure lines with
    their time, Agent.failure_lines) at or after `since` (lines without a time count), taking the nodes in
    `order` (the receivers first: the sender's peer); "<node>: <line>", or "" when no log says anything."""
    for node in order:
        for t, line in lines.get(node, []):
            if t is None or t >= since:
                return f"{node}: {line}"[:limit]
    return ""
