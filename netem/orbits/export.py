"""Contact plans from the same timeline the links follow (pure): ION `ionadmin` commands and HDTN JSON.

Both formats carry whole seconds, so every contact is shrunk to whole seconds inside its real window
(start rounded up, end rounded down: a router is never told of a contact that is not there) and light time
is rounded UP to whole seconds (ION's `a range` and HDTN's `owlt` are integer seconds: a LEO link of 2-12 ms
is announced as 1 s, which only makes routing conservative). A contact is split where its rate changes; a
range where its whole-second light time changes. Links are symmetric, so each contact is written in both
directions and each range once, lower node number first (ION then takes the range as symmetric).

Times are relative (`+N` seconds, ION's relative form; HDTN counts from its start). ION reads `+N` from its
reference time, which is the moment ionadmin started unless an `@ yyyy/mm/dd-hh:mm:ss` line sets it: given
`origin` (the UTC wall-clock instant of plan time 0), the ION export starts with that line. A live run
with time compression `speedup` > 1 plays plan second t at wall second t / speedup; pass the same speedup
here so the routers' clock matches the links' (light times are not compressed: the links do not compress
them either).

Node numbers: ION and HDTN address nodes by integer (`ipn:N.x`); by default a node's number is its index
in the plan's node order, from 1. Pass `numbers` to use the DTN setup's own.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Optional

import numpy as np
import pandas as pd

from swarm.errors import SpecError

from .planner import Plan

DEFAULT_RATE_BPS = 1_000_000_000  # a link the plan leaves unmanaged (rate 0) is announced at 1 Gbit/s


def node_numbers(plan: Plan, numbers: Optional[dict[str, int]] = None) -> dict[str, int]:
    out = {n: i for i, n in enumerate(plan.nodes, start=1)}
    if numbers:
        missing = [n for n in plan.nodes if n not in numbers]
        if missing:
            raise SpecError(f"contact plan: no node number for {missing[0]!r}")
        out = {n: int(numbers[n]) for n in plan.nodes}
    return out


def _windows(plan: Plan, key: str, speedup: float, default_rate: int) -> pd.DataFrame:
    """Up rows merged per pair while `key` (rate or owlt_s) holds, shrunk to whole (scaled) seconds."""
    up = plan.timeline[plan.timeline["up"]].copy()
    cols = ["a", "b", "start", "end", "rate", "owlt_s"]
    if up.empty:
        return pd.DataFrame(columns=cols)
    up["rate"] = np.where(up["rate"] > 0, up["rate"], default_rate).astype(np.int64)
    up["owlt_s"] = np.maximum(1, np.ceil(up["delay_ms"].values / 1000.0 - 1e-9)).astype(np.int64)
    up = up.sort_values(["a", "b", "t_start"])
    same = ((up["a"].values[1:] == up["a"].values[:-1]) & (up["b"].values[1:] == up["b"].values[:-1])
            & np.isclose(up["t_start"].values[1:], up["t_end"].values[:-1])
            & (up[key].values[1:] == up[key].values[:-1]))
    gid = np.cumsum(np.concatenate([[True], ~same]))
    agg = {"a": ("a", "first"), "b": ("b", "first"), "t_start": ("t_start", "min"), "t_end": ("t_end", "max"),
           "rate": ("rate", "min"), "owlt_s": ("owlt_s", "max")}
    w = up.groupby(gid).agg(**agg)
    w["start"] = np.ceil(w["t_start"].values / speedup - 1e-9).astype(np.int64)
    w["end"] = np.floor(w["t_end"].values / speedup + 1e-9).astype(np.int64)
    w = w[w["end"] > w["start"]]
    return w.sort_values(["start", "a", "b"], kind="stable")[cols].reset_index(drop=True)


def to_ion(plan: Plan, numbers: Optional[dict[str, int]] = None, *, speedup: float = 1.0,
           origin: Optional[datetime] = None, default_rate_bps: int = DEFAULT_RATE_BPS) -> str:
    """ionadmin commands: `a contact FROM UNTIL A B BYTES_PER_S` (both directions) and
    `a range FROM UNTIL A B OWLT_S`, in time order."""
    num = node_numbers(plan, numbers)
    lines = [f"# contact plan from swarm-emu orbits: epoch {plan.epoch:%Y-%m-%dT%H:%M:%SZ}, step {plan.step:g} s, "
             f"duration {plan.duration:g} s" + (f", time compressed x{speedup:g}" if speedup != 1 else ""),
             "# nodes: " + " ".join(f"{n}={num[n]}" for n in plan.nodes)]
    if origin is not None:
        lines.append(f"@ {origin.astimezone(timezone.utc):%Y/%m/%d-%H:%M:%S}")
    entries: list[tuple[int, int, str]] = []
    for w in _windows(plan, "rate", speedup, default_rate_bps).itertuples():
        t0, t1 = f"+{w.start}", f"+{w.end}"
        bytes_s = max(1, int(w.rate) // 8)
        entries.append((w.start, 0, f"a contact {t0} {t1} {num[w.a]} {num[w.b]} {bytes_s}"))
        entries.append((w.start, 0, f"a contact {t0} {t1} {num[w.b]} {num[w.a]} {bytes_s}"))
    for w in _windows(plan, "owlt_s", speedup, default_rate_bps).itertuples():
        lo, hi = sorted((num[w.a], num[w.b]))
        entries.append((w.start, 1, f"a range +{w.start} +{w.end} {lo} {hi} {w.owlt_s}"))
    entries.sort(key=lambda e: (e[0], e[1]))
    return "\n".join(lines + [e[2] for e in entries]) + "\n"


def to_ion_exact(plan: Plan, *, speedup: float = 1.0, default_rate_bps: int = DEFAULT_RATE_BPS) -> str:
    """The same timeline in ION's `a contact` / `a range` syntax at its own resolution: node names, times in
    (scaled) seconds with millisecond decimals, not shrunk, and each timeline row's own light time in seconds
    (not rounded up). ionadmin wants whole seconds (use to_ion for ION); this one is what a DTN run is judged
    against (swarm.dtn.contacts.parse_contact_plan reads it: earliest_arrival per bundle)."""
    up = plan.timeline[plan.timeline["up"]].sort_values(["t_start", "a", "b"], kind="stable")
    lines = [f"# exact contact plan from swarm-emu orbits: epoch {plan.epoch:%Y-%m-%dT%H:%M:%SZ}, step {plan.step:g} s, "
             f"duration {plan.duration:g} s" + (f", time compressed x{speedup:g}" if speedup != 1 else "")
             + "; light times are not compressed"]
    for r in up.itertuples(index=False):
        t0, t1 = f"+{r.t_start / speedup:.3f}", f"+{r.t_end / speedup:.3f}"
        bytes_s = max(1, int(r.rate if r.rate > 0 else default_rate_bps) // 8)
        lines.append(f"a contact {t0} {t1} {r.a} {r.b} {bytes_s}")
        lines.append(f"a contact {t0} {t1} {r.b} {r.a} {bytes_s}")
        if r.delay_ms == r.delay_ms:  # not NaN
            lines.append(f"a range {t0} {t1} {r.a} {r.b} {r.delay_ms / 1000.0:.6f}")
    return "\n".join(lines) + "\n"


def to_hdtn(plan: Plan, numbers: Optional[dict[str, int]] = None, *, speedup: float = 1.0,
            default_rate_bps: int = DEFAULT_RATE_BPS) -> dict:
    """HDTN's contact plan JSON: {"contacts": [{contact, source, dest, startTime, endTime, rateBitsPerSec,
    owlt}]}, one per direction; the owlt of a window is its largest whole-second light time."""
    num = node_numbers(plan, numbers)
    contacts = []
    w = _windows(plan, "rate", speedup, default_rate_bps)
    for row in w.itertuples():
        for src, dst in ((row.a, row.b), (row.b, row.a)):
            contacts.append({"contact": len(contacts), "source": num[src], "dest": num[dst],
                             "startTime": int(row.start), "endTime": int(row.end),
                             "rateBitsPerSec": int(row.rate), "owlt": int(row.owlt_s)})
    return {"contacts": contacts}


def to_hdtn_json(plan: Plan, numbers: Optional[dict[str, int]] = None, **kw) -> str:
    return json.dumps(to_hdtn(plan, numbers, **kw), indent=1) + "\n"


def parse_ion(text: str) -> list[tuple]:
    """Read back `a contact` / `a range` lines (relative form; `@` and `#` lines skipped) as tokens:
    ('contact', start, end, from, to, bytes_per_s) / ('range', start, end, a, b, owlt). For tests and for
    the DTN side that wants the plan as data."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("@"):
            continue
        tok = line.split()
        if tok[0] != "a" or tok[1] not in ("contact", "range") or len(tok) not in (7, 8):
            raise ValueError(f"not an ION contact/range command: {raw!r}")
        if not (tok[2].startswith("+") and tok[3].startswith("+")):
            raise ValueError(f"not a relative time: {raw!r}")
        start, end = int(tok[2][1:]), int(tok[3][1:])
        out.append((tok[1], start, end, int(tok[4]), int(tok[5]), int(tok[6])))
    return out


def check_ion_times(text: str) -> None:
    """Every contact/range has end > start (what ionadmin refuses otherwise)."""
    for kind, s, e, *_ in parse_ion(text):
        if not e > s:
            raise ValueError(f"{kind} ends ({e}) before it starts ({s})")


__all__ = ["to_ion", "to_ion_exact", "to_hdtn", "to_hdtn_json", "parse_ion", "node_numbers"]
