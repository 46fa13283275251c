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
import yaml
from matplotlib.figure import Figure

from analysis.pages import write_report_pages
from experiments.orbits.bundles import summary as bundle_summary
from experiments.orbits.model import experiment_from_dict
from netem.orbits.export import to_hdtn_json, to_ion
from netem.orbits.planner import plan as make_plan

_KIND_COLOUR = {"ground": "C1", "isl": "C0"}



def _save_png(fig: Figure, path: Path) -> Path:
    """Lay the figure out, write it as PNG to `path`, return `path`."""
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path

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
    return _save_png(fig, path)


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
    return _save_png(fig, path)


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
    return _save_png(fig, path)


# ----------------------------------------------------------------------------------- live: lag
def lag_summary(links: pd.DataFrame, step_s: Optional[float] = None) -> dict:
    """From links.csv rows (t_plan_s, lag_ms, ok; one row per link update): lag percentiles
    per update and per step (a step's lag is its last update's), and the fraction of steps whose updates
    were all applied before the next step was due."""
    if links.empty:
        return {"updates": 0}
    lag = links["lag_ms"].astype(float)
    per_step = links.groupby("t_plan_s")["lag_ms"].max()
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
        per_step = links.groupby("t_plan_s")["lag_ms"].max()
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
    return _save_png(fig, path)


# -------------------------------------------------------------------------------- whole report
def write_plan_report(plan, out_dir: Path, numbers: Optional[dict[str, int]] = None) -> dict[str, Path]:
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


# ------------------------------------------------------------------------------ run report (swarm run)
def probe_table(probes: pd.DataFrame, delay_applied: bool = True) -> pd.DataFrame:
    """Per probed pair: samples, how often the link did what the plan said (answered when up, silent when
    down; samples near a planned change left out), and RTT / 2 - planned delay where answered (left empty
    when the engine could not apply delay: the difference would only restate the planned delay)."""
    rows = []
    for (a, b), g in probes.groupby(["a", "b"]):
        clear = g[~g["near_change"].astype(bool)]
        agree = (clear["answered"].astype(bool) == clear["planned_up"].astype(bool))
        ans = g[g["answered"].astype(bool) & g["planned_up"].astype(bool)]
        err = (ans["rtt_ms"] / 2 - ans["planned_delay_ms"]) if delay_applied else pd.Series(dtype=float)
        rows.append({"a": a, "b": b, "samples": len(g), "judged": len(clear),
                     "agree_with_plan": float(agree.mean()) if len(clear) else float("nan"),
                     "answered_while_down": int((clear["answered"].astype(bool) & ~clear["planned_up"].astype(bool)).sum()),
                     "silent_while_up": int((~clear["answered"].astype(bool) & clear["planned_up"].astype(bool)).sum()),
                     "half_rtt_minus_planned_ms_p50": float(err.median()) if len(err) else float("nan"),
                     "half_rtt_minus_planned_ms_p95_abs": float(err.abs().quantile(0.95)) if len(err) else float("nan")})
    return pd.DataFrame(rows)


def plot_probes(probes: pd.DataFrame, path: Path) -> Path:
    pairs = list(probes.groupby(["a", "b"]))
    fig = Figure(figsize=(9, max(2.5, 2.0 * len(pairs))), dpi=110)
    axes = fig.subplots(max(1, len(pairs)), 1, squeeze=False)[:, 0]
    for ax, ((a, b), g) in zip(axes, pairs):
        ans = g[g["answered"].astype(bool)]
        ax.plot(ans["t_plan_s"] / 60, ans["rtt_ms"] / 2, ".", markersize=2, label="measured RTT / 2")
        ax.step(g["t_plan_s"] / 60, g["planned_delay_ms"], where="post", color="C1", label="planned one-way delay")
        lost = g[~g["answered"].astype(bool)]
        ax.plot(lost["t_plan_s"] / 60, np.zeros(len(lost)), "|", color="red", markersize=6, label="no answer")
        ax.set_title(f"{a} – {b}", fontsize=9)
        ax.set_ylabel("ms")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper right")
    axes[-1].set_xlabel("plan minutes")
    return _save_png(fig, path)


# ----------------------------------------------------------------------------------- DTN bundles
def flow_table(bundles: pd.DataFrame) -> pd.DataFrame:
    """Per source -> destination: created, deliverable per the plan, delivered, early, latency vs plan."""
    rows = []
    for (src, dst), g in bundles.groupby(["src", "dst"]):
        got = g[g["delivered"].astype(bool)]
        rows.append({"flow": f"{src} → {dst}", "created": len(g), "deliverable (plan)": int(g["plan_earliest_s"].notna().sum()),
                     "delivered": len(got), "early": int((g["outcome"] == "early").sum()),
                     "latency p50 (s)": got["latency_s"].median() if len(got) else float("nan"),
                     "plan p50 (s)": got["plan_latency_s"].median() if len(got) else float("nan"),
                     "slack p95 (s)": got["slack_s"].quantile(0.95) if len(got) else float("nan")})
    return pd.DataFrame(rows)


def plot_bundles(bundles: pd.DataFrame, plan, exact_contacts: list[tuple[str, str, float, float]], speedup: float,
                 path: Path) -> Path:
    """Per destination: each bundle's latency (dot) and the plan's earliest possible latency (line marker)
    over its creation time; contacts of the destination shaded; bundles never delivered as ticks below."""
    dsts = sorted(bundles["dst"].unique())
    fig = Figure(figsize=(9, 2.6 * max(1, len(dsts)) + 0.6), dpi=110)
    axes = fig.subplots(max(1, len(dsts)), 1, squeeze=False)[:, 0]
    for ax, dst in zip(axes, dsts):
        g = bundles[bundles["dst"] == dst]
        for a, b, s0, s1 in exact_contacts:
            if dst in (a, b):
                ax.axvspan(s0 * speedup / 60, s1 * speedup / 60, color="C1", alpha=0.12, linewidth=0)
        got = g[g["delivered"].astype(bool)]
        x = g["t_created_s"] * speedup / 60
        ax.plot(got["t_created_s"] * speedup / 60, got["latency_s"], ".", markersize=4, label="measured latency")
        ok = g["plan_latency_s"].notna()
        ax.plot(x[ok], g.loc[ok, "plan_latency_s"], "_", color="black", markersize=6, label="plan's earliest")
        early = g[g["outcome"] == "early"]
        if len(early):
            ax.plot(early["t_created_s"] * speedup / 60, early["latency_s"], "x", color="red", label="early")
        lost = g[~g["delivered"].astype(bool)]
        for outcome, colour in (("missed", "red"), ("undelivered (no plan path)", "grey")):
            sel = lost[lost["outcome"] == outcome]
            if len(sel):
                ax.plot(sel["t_created_s"] * speedup / 60, np.full(len(sel), 1e-3), "|", color=colour,
                        markersize=8, label=outcome)
        ax.set_yscale("log")
        ax.set_ylabel("latency (s)")
        ax.set_title(f"bundles to {dst} (shaded: {dst} in contact)", fontsize=9)
        ax.set_xlim(0, plan.duration / 60)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper right")
    axes[-1].set_xlabel("plan minutes at creation")
    return _save_png(fig, path)


def write_orbits_report(run_dir: Path) -> dict[str, Path]:
    """report/ of an orbits run: the plan's pieces (re-planned from the stored experiment: the planner is
    deterministic), the update lag from links.csv, probes vs plan from probes.csv; report.md / .html."""
    run_dir = Path(run_dir)
    exp = experiment_from_dict(yaml.safe_load((run_dir / "experiment.yaml").read_text()), str(run_dir))
    plan = make_plan(exp.orbits_spec())
    out = run_dir / "report"
    files = write_plan_report(plan, out, exp.contact_plan_numbers)
    meta = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    drv = meta.get("driver", {})
    step_wall = plan.step / exp.speedup
    sections: list = [("Plan", [("table", pd.DataFrame([plan.summary()]).T.reset_index().set_axis(["", "value"], axis=1)),
                                ("figure", (files["availability.png"], "link availability")),
                                ("figure", (files["delay.png"], "planned delay"))])]
    if "passes.png" in files:
        sections.append(("Ground passes", [("table", passes(plan).drop(columns=["t_start", "t_end"])),
                                           ("figure", (files["passes.png"], "passes"))]))
    warnings = list(plan.warnings)
    if (run_dir / "links.csv").exists():
        links = pd.read_csv(run_dir / "links.csv")
        summ = lag_summary(links, step_wall)
        files["lag.png"] = plot_lag(links, out / "lag.png", step_wall)
        sections.append(("Live link updates (lag: due -> applied on both nodes)",
                         [("table", pd.DataFrame([summ | {k: drv.get(k) for k in ("engine", "delay_applied",
                                                                                   "initial_s", "coalesced_steps")}]).T
                           .reset_index().set_axis(["", "value"], axis=1)),
                          ("figure", (files["lag.png"], "update lag"))]))
        if drv and not drv.get("delay_applied", True):
            warnings.append(f"engine {drv.get('engine')!r} could not apply delay on this host (no sch_netem): links "
                            "followed the plan's up/down and rate only; planned delays are in links.csv")
    if (run_dir / "probes.csv").exists():
        probes = pd.read_csv(run_dir / "probes.csv")
        files["probes.png"] = plot_probes(probes, out / "probes.png")
        table = probe_table(probes, bool(drv.get("delay_applied", True)))
        table.to_csv(out / "probes_summary.csv", index=False)
        sections.append(("Probes: does the link follow the plan?", [("table", table),
                                                                    ("figure", (files["probes.png"], "probes"))]))
    if (run_dir / "bundles.csv").exists():
        sections.append(_bundle_section(run_dir, plan, exp, meta, out, files, warnings))
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    intro = (f"Orbit-driven links: {len(plan.nodes)} nodes, {plan.duration:g} s of orbit from "
             f"{plan.epoch:%Y-%m-%d %H:%M:%S} UTC at {plan.step:g} s steps, played x{exp.speedup:g}. "
             "Contact plans (ION, HDTN) from the same timeline are in this folder.")
    return {**files, **write_report_pages(out, f"Orbits run: {run_dir.resolve().name}", intro, host, warnings,
                                          sections)}


def _bundle_section(run_dir: Path, plan, exp, meta: dict, out: Path, files: dict, warnings: list) -> tuple:
    bundles = pd.read_csv(run_dir / "bundles.csv")
    summ = bundle_summary(bundles.to_dict("records"))
    tol = meta.get("dtn", {}).get("tolerance_s")
    exact = run_dir / "contact-plan.exact.ion"
    windows = []
    if exact.exists():
        for line in exact.read_text().splitlines():
            w = line.split()
            if len(w) >= 7 and w[:2] == ["a", "contact"] and w[4] < w[5]:
                windows.append((w[4], w[5], float(w[2][1:]), float(w[3][1:])))
    files["bundles.png"] = plot_bundles(bundles, plan, windows, exp.speedup, out / "bundles.png")
    if summ["delivered_early"]:
        warnings.append(f"{summ['delivered_early']} bundle(s) arrived before the contact plan allowed (even with "
                        f"contacts held {tol} s longer): see outcome 'early' in bundles.csv")
    if summ["missed"]:
        warnings.append(f"{summ['missed']} bundle(s) had a path in the plan but were not delivered")
    text = (f"{summ['bundles_delivered']} of {summ['bundles_created']} bundles delivered; the contact plan "
            f"(contact-plan.exact.ion, the same timeline as the links) allowed {summ['deliverable_per_plan']}. "
            f"Delivered before the plan's earliest possible delivery: {summ['delivered_early']} (contacts held "
            f"{tol} s longer to allow for the links' update lag). The last hop of {summ['last_hop_in_contact']} of "
            f"{summ['last_hop_known']} delivered bundles (from the agents' logs) was in contact with the "
            "destination when it handed the bundle over. Slack = measured latency - the plan's earliest.")
    if "router_earliest_s" in bundles.columns:  # runs recorded before the routers' view was judged lack it
        refused = meta.get("dtn", {}).get("router_plan_refused")
        text += (f" A contact-graph router given contact-plan.ion (what ionadmin keeps of it; lines it would "
                 f"refuse: {refused}) would have found a path for {summ['deliverable_per_routers']} "
                 "(router_earliest_s in bundles.csv).")
    table = pd.DataFrame([summ | {"tolerance_s": tol}]).T.reset_index().set_axis(["", "value"], axis=1)
    return ("DTN bundles against the contact plan", [("text", text), ("table", table), ("table", flow_table(bundles)),
                                                      ("figure", (files["bundles.png"], "bundles vs plan"))])
