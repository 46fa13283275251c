"""What a live orbit run records (pure): column names of links.csv and probes.csv, the probe's ping argv,
its parser, and the comparison of probe samples with the plan.

links.csv (netem.runtime.orbits): one row per link update; `applied_by` says who applied it and measured
its lag: "engine" (the userspace engine executed the schedule from its own clock) or "driver" (one step at a time).
probes.csv: one row per ping of a probed pair: when it was sent (wall and plan time), whether it was
answered, its RTT, and what the plan said at that time (up?, one-way delay).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

LINK_COLUMNS = ["run_id", "step", "t_plan_s", "scheduled_ts", "applied_ts", "lag_ms", "a", "b", "kind", "up",
                "delay_ms", "rate", "delay_applied", "coalesced", "ok", "error", "applied_by"]
PROBE_COLUMNS = ["run_id", "a", "b", "seq", "sent_ts", "t_plan_s", "answered", "rtt_ms", "planned_up",
                 "planned_delay_ms", "near_change"]

_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from [^:]+: icmp_seq=(\d+) .*time=([\d.]+) ms")
_NO_ANSWER = re.compile(r"^\[(\d+\.\d+)\] no answer yet for icmp_seq=(\d+)")


def ping_argv(dst_ip: str, interval_s: float, seconds: float, src_ip: str | None = None) -> list[str]:
    """iputils ping: wall-clock stamps (-D), a line for every unanswered probe (-O), numeric, a deadline, and
    user-to-user latency (-U): without it ping takes the kernel's receive stamp of the reply, which an engine
    holding packets after the device (the userspace engine, in PREROUTING) does not delay, so the reply's
    half of the delay would not be counted."""
    argv = ["ping", "-D", "-O", "-n", "-U", "-i", f"{interval_s:g}", "-W", "1", "-w",
            str(max(1, int(np.ceil(seconds))))]
    if src_ip:
        argv += ["-I", src_ip]
    return argv + [dst_ip]


def parse_ping(text: str, interval_s: float) -> pd.DataFrame:
    """seq, sent_ts, answered, rtt_ms from `ping -D -O` output. A reply's send time is its stamp less its
    RTT; an unanswered probe is reported when the next one is sent, so it was sent one interval earlier."""
    rows: dict[int, dict] = {}
    for line in text.splitlines():
        m = _REPLY.match(line)
        if m:
            ts, seq, rtt = float(m.group(1)), int(m.group(2)), float(m.group(3))
            rows[seq] = {"seq": seq, "sent_ts": ts - rtt / 1000, "answered": True, "rtt_ms": rtt}
            continue
        m = _NO_ANSWER.match(line)
        if m:
            seq = int(m.group(2))
            rows.setdefault(seq, {"seq": seq, "sent_ts": float(m.group(1)) - interval_s, "answered": False,
                                  "rtt_ms": float("nan")})
    return pd.DataFrame(sorted(rows.values(), key=lambda r: r["seq"]), columns=["seq", "sent_ts", "answered", "rtt_ms"])


def against_plan(samples: pd.DataFrame, timeline: pd.DataFrame, a: str, b: str, release_ts: float, speedup: float,
                 margin_s: float) -> pd.DataFrame:
    """Add plan time, the plan's state of pair (a, b) at that time and whether a change of state lies within
    `margin_s` (plan seconds) of the sample (the driver's lag and the probe's own timeout blur those)."""
    out = samples.copy()
    out["a"], out["b"] = a, b
    out["t_plan_s"] = (out["sent_ts"] - release_ts) * speedup
    rows = timeline[((timeline["a"] == a) & (timeline["b"] == b)) | ((timeline["a"] == b) & (timeline["b"] == a))]
    rows = rows.sort_values("t_start")
    if rows.empty:  # never up in the plan
        out["planned_up"], out["planned_delay_ms"], out["near_change"] = False, float("nan"), False
        return out
    idx = np.searchsorted(rows["t_start"].values, out["t_plan_s"].values, side="right") - 1
    idx = np.clip(idx, 0, len(rows) - 1)
    out["planned_up"] = rows["up"].values[idx].astype(bool)
    out["planned_delay_ms"] = rows["delay_ms"].values[idx]
    ups = rows["up"].values.astype(bool)
    changes = rows["t_start"].values[1:][ups[1:] != ups[:-1]]
    if len(changes):
        dist = np.abs(out["t_plan_s"].values[:, None] - changes[None, :]).min(axis=1)
        out["near_change"] = dist <= margin_s
    else:
        out["near_change"] = False
    return out
