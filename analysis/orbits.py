"""Report pieces for orbit-driven links: availability Gantt per pair, delay over time, ground passes, and the
live driver's update lag. Reads a Plan (netem.orbits) and, for lag, the links.csv a live run writes.

    write_plan_report(plan, out_dir)   timeline.csv, contacts.csv, passes.csv, contact-plan.ion,
                                       contact-plan.hdtn.json, summary.json, availability.png, delay.png,
                                       passes.png; returns {name: path}
    lag_summary(links) / plot_lag(links, path)   from links.csv (one row per applied link update)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

_KIND_COLOUR = {"ground": "C1", "isl": "C0"}


def _pair(a: str, b: str) -> str:
    return f"{a}–{b}"


def _chosen_pairs(contacts: pd.DataFrame, limit: int) -> list[tuple[str, str]]:
    """Ground pairs first, then the ISL pairs with the most time up; at most `limit`."""
    if contacts.empty:
        return []
    up = contacts.groupby(["kind", "a", "b"])["duration_s"].sum().reset_index()
    up["rank"] = up["kind"].map({"ground": 0, "isl": 1})
    up = up.sort_values(["rank", "duration_s", "a", "b"], ascending=[True, False, True, True])
    return list(zip(up["a"], up["b"]))[:limit]


def plot_availability(plan, path: Path, limit: int = 60) -> Path:
    """Gantt: one bar row per pair, a bar per contact window (orange: ground, blue: ISL)."""
    contacts = plan.contacts()
    pairs = _chosen_pairs(contacts, limit)
    total_pairs = len(plan.links())
    fig = Figure(figsize=(9, max(2.5, 0.16 * len(pairs) + 1.4)), dpi=110)
    ax = fig.subplots()
    for row, (a, b) in enumerate(pairs):
        w = contacts[(contacts["a"] == a) & (contacts["b"] == b)]
        ax.broken_barh(list(zip(w["t_start"] / 60, w["duration_s"] / 60)), (row - 0.4, 0.8),
                       facecolors=_KIND_COLOUR.get(w["kind"].iloc[0], "C0"))
    ax.set_yticks(range(len(pairs)), [_pair(a, b) for a, b in pairs], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlim(0, plan.duration / 60)
    ax.set_xlabel(f"minutes from {plan.epoch:%Y-%m-%d %H:%M:%S} UTC")
    shown = f"{len(pairs)} of {total_pairs} pairs ever up" if total_pairs > len(pairs) else f"{total_pairs} pairs"
    ax.set_title(f"Link availability ({shown}; orange: ground, blue: ISL)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def delay_series(plan, pairs: Iterable[tuple[str, str]]) -> pd.DataFrame:
    """The planned one-way delay of each pair as a step function: columns t, pair, delay_ms (NaN: down)."""
    tl = plan.timeline
    frames = []
    for a, b in pairs:
        rows = tl[(tl["a"] == a) & (tl["b"] == b)].sort_values("t_start")
        t = np.concatenate([rows["t_start"].values, rows["t_end"].values[-1:]])
        d = np.concatenate([rows["delay_ms"].values, rows["delay_ms"].values[-1:]])
        frames.append(pd.DataFrame({"t": t, "pair": _pair(a, b), "delay_ms": d}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["t", "pair", "delay_ms"])


def plot_delay(plan, path: Path, pairs: Optional[list[tuple[str, str]]] = None, limit: int = 8) -> Path:
    if pairs is None:  # half ground links, the rest ISLs (most time up first)
        ranked = _chosen_pairs(plan.contacts(), 10**6)
        ground = [p for p in ranked if plan.kinds.get(p[1]) == "ground"][: limit // 2]
        pairs = ground + [p for p in ranked if p not in ground and plan.kinds.get(p[1]) != "ground"][
            : limit - len(ground)]
    series = delay_series(plan, pairs)
    fig = Figure(figsize=(9, 4), dpi=110)
    ax = fig.subplots()
    for name, g in series.groupby("pair", sort=False):
        ax.step(g["t"] / 60, g["delay_ms"], where="post", linewidth=1.2, label=name)
    ax.set_xlim(0, plan.duration / 60)
    ax.set_xlabel(f"minutes from {plan.epoch:%Y-%m-%d %H:%M:%S} UTC")
    ax.set_ylabel("one-way delay (ms)")
    ax.set_title(f"Planned delay (propagation at {plan.speed_km_s:,.0f} km/s; gaps: link down)")
    ax.grid(True, alpha=0.3)
    if pairs:
        ax.legend(fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def passes(plan) -> pd.DataFrame:
    """Ground station passes: station, satellite, AOS/LOS (UTC), duration, closest delay."""
    c = plan.contacts()
    g = c[c["kind"] == "ground"].copy()
    if g.empty:
        return pd.DataFrame(columns=["station", "satellite", "aos_utc", "los_utc", "duration_s", "delay_min_ms",
                                     "delay_max_ms", "t_start", "t_end"])
    g["station"], g["satellite"] = g["b"], g["a"]
    g["aos_utc"] = [f"{plan.at(t):%Y-%m-%dT%H:%M:%SZ}" for t in g["t_start"]]
    g["los_utc"] = [f"{plan.at(t):%Y-%m-%dT%H:%M:%SZ}" for t in g["t_end"]]
    return g[["station", "satellite", "aos_utc", "los_utc", "duration_s", "delay_min_ms", "delay_max_ms",
              "t_start", "t_end"]].reset_index(drop=True)


def plot_passes(plan, path: Path) -> Path:
    p = passes(plan)
    stations = [n for n, k in plan.kinds.items() if k == "ground"]
    fig = Figure(figsize=(9, max(2.0, 0.5 * len(stations) + 1.2)), dpi=110)
    ax = fig.subplots()
    for row, st in enumerate(stations):
        w = p[p["station"] == st]
        ax.broken_barh(list(zip(w["t_start"] / 60, w["duration_s"] / 60)), (row - 0.35, 0.7), facecolors="C1")
        for r in w.itertuples():
            ax.annotate(r.satellite, ((r.t_start + r.t_end) / 120, row), fontsize=6, ha="center", va="center")
    ax.set_yticks(range(len(stations)), stations, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, plan.duration / 60)
    ax.set_xlabel(f"minutes from {plan.epoch:%Y-%m-%d %H:%M:%S} UTC")
    ax.set_title(f"Ground station passes ({len(p)})")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


# ----------------------------------------------------------------------------------- live: lag
def lag_summary(links: pd.DataFrame, step_s: Optional[float] = None) -> dict:
    """From links.csv rows (scheduled_s, applied_s, lag_ms, step; one row per link update): lag percentiles
    per update and per step (a step's lag is its last update's), and the fraction of steps whose updates
    were all applied before the next step was due."""
    if links.empty:
        return {"updates": 0}
    lag = links["lag_ms"].astype(float)
    per_step = links.groupby("scheduled_s")["lag_ms"].max()
    out = {"updates": int(len(links)), "steps": int(len(per_step)),
           "update_lag_ms_p50": float(lag.quantile(0.5)), "update_lag_ms_p99": float(lag.quantile(0.99)),
           "update_lag_ms_max": float(lag.max()),
           "step_lag_ms_p50": float(per_step.quantile(0.5)), "step_lag_ms_p99": float(per_step.quantile(0.99)),
           "failed": int((~links["ok"].astype(bool)).sum()) if "ok" in links else 0}
    if step_s:
        out["steps_done_before_next"] = float((per_step < step_s * 1000).mean())
    return out


def plot_lag(links: pd.DataFrame, path: Path, step_s: Optional[float] = None) -> Path:
    fig = Figure(figsize=(9, 3.6), dpi=110)
    ax_h, ax_t = fig.subplots(1, 2)
    lag = links["lag_ms"].astype(float)
    if len(lag):
        ax_h.hist(lag, bins=min(60, max(10, len(lag) // 5)), color="C0")
        for q, style in ((0.5, "--"), (0.99, ":")):
            ax_h.axvline(lag.quantile(q), color="black", linestyle=style, linewidth=1,
                         label=f"p{int(q * 100)} {lag.quantile(q):.1f} ms")
        ax_h.legend(fontsize="x-small")
        per_step = links.groupby("scheduled_s")["lag_ms"].max()
        ax_t.plot(per_step.index, per_step.values, marker=".", linestyle="none", markersize=3)
        if step_s:
            ax_t.axhline(step_s * 1000, color="red", linewidth=1, label="next step due")
            ax_t.legend(fontsize="x-small")
    ax_h.set_xlabel("update lag: scheduled -> applied (ms)")
    ax_h.set_ylabel("link updates")
    ax_t.set_xlabel("plan time (s)")
    ax_t.set_ylabel("step lag (last update, ms)")
    for ax in (ax_h, ax_t):
        ax.grid(True, alpha=0.3)
    fig.suptitle("Link update lag")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


# -------------------------------------------------------------------------------- whole report
def write_plan_report(plan, out_dir: Path, numbers: Optional[dict[str, int]] = None) -> dict[str, Path]:
    from netem.orbits import to_hdtn_json, to_ion

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(name: str, text: str) -> None:
        (out / name).write_text(text)
        files[name] = out / name

    plan.timeline.to_csv(out / "timeline.csv", index=False)
    files["timeline.csv"] = out / "timeline.csv"
    plan.contacts().to_csv(out / "contacts.csv", index=False)
    files["contacts.csv"] = out / "contacts.csv"
    passes(plan).to_csv(out / "passes.csv", index=False)
    files["passes.csv"] = out / "passes.csv"
    put("contact-plan.ion", to_ion(plan, numbers))
    put("contact-plan.hdtn.json", to_hdtn_json(plan, numbers))
    put("summary.json", json.dumps(plan.summary() | {"warnings": plan.warnings}, indent=1) + "\n")
    files["availability.png"] = plot_availability(plan, out / "availability.png")
    files["delay.png"] = plot_delay(plan, out / "delay.png")
    if any(k == "ground" for k in plan.kinds.values()):
        files["passes.png"] = plot_passes(plan, out / "passes.png")
    return files
