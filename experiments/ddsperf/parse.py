"""Parsers of ddsperf's output (recorded real ddsperf 0.10.2 lines in tests/data/ddsperf): pure."""
from __future__ import annotations

import math
import re




_LINE = r"^\[(?P<pid>\d+)\]\s+(?P<t>[\d.]+)\s+"
SUB_RE = re.compile(_LINE + r"size (?P<size>\d+) total (?P<total>\d+) lost (?P<lost_total>\d+) delta (?P<delta>\d+) "
                    r"lost (?P<lost>\d+) rate (?P<ksps>[\d.]+) kS/s (?P<mbps>[\d.]+) Mb/s")
PING_RE = re.compile(_LINE + r"(?P<peer>\S+) size (?P<size>\d+) mean (?P<mean>[\d.]+)us min (?P<min>[\d.]+)us "
                     r"50% (?P<p50>[\d.]+)us 90% (?P<p90>[\d.]+)us 99% (?P<p99>[\d.]+)us max (?P<max>[\d.]+)us "
                     r"cnt (?P<cnt>\d+)")


def parse_sub(text: str) -> dict[str, float]:
    """A subscriber's per-second lines -> samples_per_s, mbps (mean over whole seconds), received, lost,
    lost_percent, seconds (whole seconds used). The first and last lines with data are partial seconds and
    are left out when there are at least three. NaN figures when there was no data."""
    lines = [m.groupdict() for m in map(SUB_RE.match, text.splitlines()) if m]
    lines = [ln for ln in lines if int(ln["delta"]) or int(ln["lost"])]
    received = sum(int(ln["delta"]) for ln in lines)
    lost = sum(int(ln["lost"]) for ln in lines)
    whole = lines[1:-1] if len(lines) >= 3 else lines
    n = len(whole)
    return {"samples_per_s": sum(float(ln["ksps"]) * 1000 for ln in whole) / n if n else math.nan,
            "mbps": sum(float(ln["mbps"]) for ln in whole) / n if n else math.nan,
            "received": received, "lost": lost,
            "lost_percent": 100 * lost / (received + lost) if received + lost else math.nan, "seconds": n}


def parse_ping(text: str) -> dict[str, dict[str, float]]:
    """A pinger's per-second lines -> per answering peer: count, mean/min/max round trip (us) and p50/p90/p99
    (the per-second percentiles averaged, weighted by count; the first second, with discovery, left out
    when there are more)."""
    by_peer: dict[str, list[dict]] = {}
    for m in map(PING_RE.match, text.splitlines()):
        if m:
            by_peer.setdefault(m["peer"], []).append(m.groupdict())
    out = {}
    for peer, lines in by_peer.items():
        use = lines[1:] if len(lines) > 1 else lines
        cnt = sum(int(ln["cnt"]) for ln in use)
        if not cnt:
            continue
        avg = {k: sum(float(ln[k]) * int(ln["cnt"]) for ln in use) / cnt for k in ("mean", "p50", "p90", "p99")}
        out[peer] = {"count": cnt, "mean_us": avg["mean"], "min_us": min(float(ln["min"]) for ln in use),
                     "p50_us": avg["p50"], "p90_us": avg["p90"], "p99_us": avg["p99"],
                     "max_us": max(float(ln["max"]) for ln in use)}
    return out


PARTICIPANT_RE = re.compile(r"^\[(\d+)\] participant (\S+): new \(self\)", re.M)


def participant_name(text: str) -> str | None:
    """The name ddsperf gave its own participant (host:pid), which pingers use to name the pong."""
    m = PARTICIPANT_RE.search(text)
    return m.group(2) if m else None


# -------------------------------------------------------------------------------------------- executing
