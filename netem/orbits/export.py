"""Contact plans from the same timeline the links follow (pure): ION `ionadmin` commands and HDTN JSON.

The unit is the PASS: one pair's maximal run of up timeline rows. Both formats carry whole seconds, so a
pass is shrunk to whole seconds inside its real window (start rounded up, end rounded down: a router is
never told of a contact that is not there); only the pass's outer edges round inward, so time compression
keeps a pass whole (rate segments inside it, where written, meet at the nearest whole second).

- ION: one `a contact` per pass and direction, at the pass's LOWEST rate (bytes/s = bit/s // 8): ION
  treats a contact as the closed interval [from, until] and refuses one that shares a second with another
  of the same directed pair, so rate segments that touch would be dropped (half of a pass, measured with a
  real ionadmin: tests/data/ion/). The lowest rate never lets a router send faster than the link carries
  at any moment of the pass, and rate x duration is a lower bound of the pass's volume.
- HDTN: the same shape (one contact per pass and direction, lowest rate in bit/s, owlt the pass's largest
  whole-second light time). With `segments=True` a contact per rate segment instead (they touch; HDTN
  takes each as link down then up with a re-route): its flap behaviour, when that is what is studied.

Light time is rounded UP to whole seconds (ION's `a range` and HDTN's `owlt` are integer seconds: a LEO
link of 2-12 ms is announced as 1 s, which only makes routing conservative); a range is split where its
whole-second light time changes (touching ranges are fine in ION). Links are symmetric, so each contact is
written in both directions and each range once, lower node number first (ION takes it as symmetric).

Time: relative (`+N` s). ION counts `+N` from its reference time: the moment ionadmin started unless an
`@ yyyy/mm/dd-hh:mm:ss` line sets it; given `origin` (the UTC instant of plan time 0) the ION export starts
with that line (the origin's whole second; the fraction shifts the contacts before rounding). HDTN counts
from when its router loads the plan, or, with `origin`, in Unix seconds (HDTN's --use-unix-timestamp). A
live run with time compression `speedup` plays plan second t at wall second t / speedup; pass the same
speedup so the routers' clock matches the links' (light times are not compressed: nor are the links').

Node numbers: ION and HDTN address nodes by integer (`ipn:N.x`); by default a node's number is its index
in the plan's node order, from 1. Pass `numbers` to use the DTN setup's own. The text and JSON themselves
are written by swarm.dtn.contacts (write_ion, write_hdtn), next to the parser that reads them back.
"""
from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Optional

import numpy as np
import pandas as pd

from netem.orbits.planner import Plan
from swarm.dtn.contacts import ION_RATE_MAX, Contact, Range, write_hdtn, write_ion
from swarm.errors import SpecError

DEFAULT_RATE_BPS = 1_000_000_000  # a link the plan leaves unmanaged (rate 0) is announced at 1 Gbit/s
_EPS = 1e-9


def node_numbers(plan: Plan, numbers: Optional[dict[str, int]] = None) -> dict[str, int]:
    out = {n: i for i, n in enumerate(plan.nodes, start=1)}
    if numbers:
        missing = [n for n in plan.nodes if n not in numbers]
        if missing:
            raise SpecError(f"contact plan: no node number for {missing[0]!r}")
        out = {n: int(numbers[n]) for n in plan.nodes}
    return out


def _rows(plan: Plan, speedup: float, shift: float, default_rate: int) -> pd.DataFrame:
    """Up rows with their pass (`pid`) and whole-second wall span [lo, hi): the pass's outer edges rounded
    inward, the edges between its rows to the nearest second (so a pass's rows tile it). Passes shorter
    than a whole second after rounding are left out."""
    up = plan.timeline[plan.timeline["up"]].sort_values(["a", "b", "t_start"])
    if up.empty:
        return up.assign(pid=[], lo=[], hi=[], owlt_s=[])
    up = up.copy()
    up["rate"] = np.where(up["rate"] > 0, up["rate"], default_rate).astype(np.int64)
    up["owlt_s"] = np.maximum(1, np.ceil(up["delay_ms"].values / 1000.0 - _EPS)).astype(np.int64)
    a, b = up["a"].values, up["b"].values
    ts, te = up["t_start"].values.astype(float), up["t_end"].values.astype(float)
    first = np.concatenate([[True], ~((a[1:] == a[:-1]) & (b[1:] == b[:-1]) & np.isclose(ts[1:], te[:-1]))])
    pid = np.cumsum(first) - 1
    ws, we = shift + ts / speedup, shift + te / speedup
    start = np.ceil(pd.Series(ws).groupby(pid).min().values - _EPS)[pid]
    end = np.floor(pd.Series(we).groupby(pid).max().values + _EPS)[pid]
    lo = np.clip(np.where(first, start, np.rint(ws)), start, np.maximum(start, end))
    last = np.concatenate([first[1:], [True]])
    hi = np.where(last, end, np.concatenate([lo[1:], [0.0]]))
    up["pid"], up["lo"], up["hi"] = pid, lo.astype(np.int64), hi.astype(np.int64)
    whole = pd.Series(end > start).groupby(pid).transform("all").values
    return up[whole]


def _spans(rows: pd.DataFrame, key: Optional[str]) -> pd.DataFrame:
    """Rows merged per pass (key None) or per run of equal `key` within a pass: a, b, start, end (whole
    wall s), rate (lowest, bit/s), owlt_s (largest), in time order."""
    cols = ["a", "b", "start", "end", "rate", "owlt_s"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    if key is None:
        gid = rows["pid"].values
    else:
        r = rows[rows["hi"] > rows["lo"]]  # a row rounded away inside its pass: its neighbours meet
        rows = r
        pid, k = r["pid"].values, r[key].values
        gid = np.cumsum(np.concatenate([[True], (pid[1:] != pid[:-1]) | (k[1:] != k[:-1])]))
    w = rows.groupby(gid).agg(a=("a", "first"), b=("b", "first"), start=("lo", "min"), end=("hi", "max"),
                              rate=("rate", "min"), owlt_s=("owlt_s", "max"))
    return w.sort_values(["start", "a", "b"], kind="stable")[cols].reset_index(drop=True)


def _shift(origin: Optional[datetime]) -> tuple[Optional[float], float]:
    """(origin as Unix s, its fraction of a second): whole-second files count from the origin's second."""
    if origin is None:
        return None, 0.0
    ts = origin.timestamp()
    return ts, ts - math.floor(ts)


def passes(plan: Plan, *, speedup: float = 1.0, default_rate_bps: int = DEFAULT_RATE_BPS,
           origin: Optional[datetime] = None) -> pd.DataFrame:
    """One row per pass as both formats write it: a, b, start, end (whole wall s from the origin's second,
    or from 0), rate (lowest, bit/s), owlt_s (largest whole-second light time)."""
    _, frac = _shift(origin)
    return _spans(_rows(plan, speedup, frac, default_rate_bps), None)


def _header(plan: Plan, speedup: float, num: dict[str, int]) -> list[str]:
    return [f"contact plan from swarm-emu orbits: epoch {plan.epoch:%Y-%m-%dT%H:%M:%SZ}, step {plan.step:g} s, "
            f"duration {plan.duration:g} s" + (f", time compressed x{speedup:g}" if speedup != 1 else ""),
            "nodes: " + " ".join(f"{n}={num[n]}" for n in plan.nodes),
            "one contact per pass and direction at the pass's lowest rate (bytes/s); ranges: light time in "
            "whole seconds, rounded up"]


def to_ion(plan: Plan, numbers: Optional[dict[str, int]] = None, *, speedup: float = 1.0,
           origin: Optional[datetime] = None, default_rate_bps: int = DEFAULT_RATE_BPS) -> str:
    """ionadmin commands: `a contact FROM UNTIL A B BYTES_PER_S` (one per pass, both directions) and
    `a range FROM UNTIL A B OWLT_S`, in time order; nothing that ionadmin would refuse."""
    num = node_numbers(plan, numbers)
    ts, frac = _shift(origin)
    rows = _rows(plan, speedup, frac, default_rate_bps)
    header = _header(plan, speedup, num)
    entries: list[tuple[int, int, Contact | Range]] = []
    for w in _spans(rows, None).itertuples():
        bytes_s = max(1, int(w.rate) // 8)
        if bytes_s > ION_RATE_MAX:
            header.append(f"note: {num[w.a]}-{num[w.b]} at {w.rate} bit/s is written as {ION_RATE_MAX} bytes/s "
                          "(ION's rate is an unsigned 32-bit integer)")
            bytes_s = ION_RATE_MAX
        for x, y in ((w.a, w.b), (w.b, w.a)):
            entries.append((w.start, 0, Contact(w.start, w.end, str(num[x]), str(num[y]), bytes_s, 0)))
    for w in _spans(rows, "owlt_s").itertuples():
        lo, hi = sorted((num[w.a], num[w.b]))
        entries.append((w.start, 1, Range(w.start, w.end, str(lo), str(hi), w.owlt_s, 0)))
    entries.sort(key=lambda e: (e[0], e[1]))
    return write_ion((e[2] for e in entries), header, ts)


def to_ion_exact(plan: Plan, *, speedup: float = 1.0, default_rate_bps: int = DEFAULT_RATE_BPS) -> str:
    """The same timeline in ION's `a contact` / `a range` syntax at its own resolution: node names, times in
    (scaled) seconds with millisecond decimals, not shrunk, one contact per timeline row (they touch), and
    each row's own light time in seconds (not rounded up). Not for ionadmin (use to_ion): this one is what
    the links do, which a DTN run is judged against (swarm.dtn.contacts.parse_contact_plan reads it)."""
    up = plan.timeline[plan.timeline["up"]].sort_values(["t_start", "a", "b"], kind="stable")
    header = [f"exact contact plan from swarm-emu orbits: epoch {plan.epoch:%Y-%m-%dT%H:%M:%SZ}, step {plan.step:g} s, "
              f"duration {plan.duration:g} s" + (f", time compressed x{speedup:g}" if speedup != 1 else "")
              + "; light times are not compressed"]
    items: list[Contact | Range] = []
    for r in up.itertuples(index=False):
        t0, t1 = round(r.t_start / speedup, 3), round(r.t_end / speedup, 3)
        bytes_s = max(1, int(r.rate if r.rate > 0 else default_rate_bps) // 8)
        items += [Contact(t0, t1, r.a, r.b, bytes_s, 0), Contact(t0, t1, r.b, r.a, bytes_s, 0)]
        if r.delay_ms == r.delay_ms:  # not NaN
            items.append(Range(t0, t1, r.a, r.b, r.delay_ms / 1000.0, 0))
    return write_ion(items, header, decimals=3, owlt_decimals=6)


def to_hdtn(plan: Plan, numbers: Optional[dict[str, int]] = None, *, speedup: float = 1.0,
            default_rate_bps: int = DEFAULT_RATE_BPS, origin: Optional[datetime] = None,
            segments: bool = False) -> dict:
    """HDTN's contact plan JSON: {"contacts": [{contact, source, dest, startTime, endTime, rateBitsPerSec,
    owlt}]}, one per pass and direction (per rate segment with `segments`); times from the router's start,
    or Unix seconds given `origin` (HDTN's --use-unix-timestamp)."""
    num = node_numbers(plan, numbers)
    ts, frac = _shift(origin)
    base = math.floor(ts) if ts is not None else 0
    rows = _rows(plan, speedup, frac, default_rate_bps)
    out = []
    for w in _spans(rows, "rate" if segments else None).itertuples():
        for src, dst in ((w.a, w.b), (w.b, w.a)):
            out.append((num[src], num[dst], base + int(w.start), base + int(w.end), int(w.rate), int(w.owlt_s)))
    return write_hdtn(out)


def to_hdtn_json(plan: Plan, numbers: Optional[dict[str, int]] = None, **kw) -> str:
    return json.dumps(to_hdtn(plan, numbers, **kw), indent=1) + "\n"


__all__ = ["to_ion", "to_ion_exact", "to_hdtn", "to_hdtn_json", "node_numbers", "passes"]
