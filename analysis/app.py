"""Report of an app run (`swarm run`, type app): delivery, latency and plan agreement per phase between
faults, a time series with the faults marked, and the mesh's convergence."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from analysis.faults import mesh_table
from analysis.pages import write_report_pages
from experiments.app.parse import tidy_tables
from swarm.errors import SpecError


def with_sent(peers) -> "Any":
    """peers with `sent` = expected - unsent: the samples the network was given (a sender that ran late and
    skipped cycles never sent theirs; older runs have no `unsent` column: 0)."""
    peers = peers.copy()
    if "unsent" not in peers:
        peers["unsent"] = 0
    peers["sent"] = peers["expected"] - peers["unsent"]
    return peers


def phase_table(run_dir: Path) -> "Any":
    """Delivery, latency and agreement per phase: before the first fault, between faults, after the last.
    Delivery is received / sent: samples a late sender never sent (`unsent`) are counted apart, not as loss."""
    run_dir = Path(run_dir)
    peers, agreement = pd.read_csv(run_dir / "peers.csv"), pd.read_csv(run_dir / "agreement.csv")
    meta = json.loads((run_dir / "run.json").read_text())
    faults = pd.read_csv(run_dir / "faults.csv") if (run_dir / "faults.csv").exists() else pd.DataFrame()
    applied = faults.dropna(subset=["offset_s"]).sort_values("offset_s") if len(faults) else faults
    # A phase runs from when one fault had taken effect (offset_s: its command done) to when the next one began
    # (at_s: its command started): a fault takes effect somewhere while its command runs (a 0.25 s heal let
    # samples cross before its offset_s), so windows overlapping that span belong to no phase.
    begun = [float(r.at_s) if "at_s" in applied and not pd.isna(r.at_s) else float(r.offset_s)
             for r in applied.itertuples()]
    spans = list(zip([0.0, *applied["offset_s"].astype(float)] if len(applied) else [0.0],
                     [*begun, meta["duration"]]))
    labels = ["before faults"] + [f"after {r.kind} {r.args}" for r in applied.itertuples()] if len(faults) else ["whole run"]
    peers = with_sent(peers)
    rows = []
    for (lo, hi), label in zip(spans, labels):
        p = peers[(peers["t"] >= lo) & (peers["t"] + peers["window_s"] <= hi)]
        a = agreement[(agreement["t"] >= lo) & (agreement["t"] < hi)]
        full = p["received"] >= p["sent"]
        rows.append({"phase": label, "from_s": round(lo, 2), "to_s": round(hi, 2), "windows": len(p),
                     "delivery_ratio": p["received"].sum() / p["sent"].sum() if len(p) else float("nan"),
                     "unsent": int(p["unsent"].sum()),
                     "pairs_full": int(full.groupby([p["node"], p["peer"]]).all().sum()) if len(p) else 0,
                     "pairs": p.groupby(["node", "peer"]).ngroups if len(p) else 0,
                     "latency_p50_ms": p["latency_p50_ms"].median(), "latency_p95_ms": p["latency_p95_ms"].median(),
                     "latency_max_ms": p["latency_max_ms"].max(), "age_mean_ms": p["age_mean_ms"].mean(),
                     "agreement_mean": a["agreement"].mean(), "agreement_min": a["agreement"].min()})
    return pd.DataFrame(rows)


def timeseries(run_dir: Path) -> "Any":
    """Per window (t: its middle, s since t0; windows ending after the run left out, when nodes were being
    stopped): delivery ratio over every directed pair, median p95 latency, mean swarm-wide agreement."""
    run_dir = Path(run_dir)
    peers, agreement = pd.read_csv(run_dir / "peers.csv"), pd.read_csv(run_dir / "agreement.csv")
    duration = json.loads((run_dir / "run.json").read_text())["duration"]
    peers = with_sent(peers[peers["t"] + peers["window_s"] <= duration + 1e-6])
    d = peers.groupby("t").agg(window_s=("window_s", "max"), received=("received", "sum"),
                               sent=("sent", "sum"), latency_p95_ms=("latency_p95_ms", "median")).reset_index()
    d["delivery_ratio"] = d["received"] / d["sent"]
    d["agreement"] = [agreement[(agreement["t"] >= r.t) & (agreement["t"] < r.t + r.window_s)]["agreement"].mean()
                      for r in d.itertuples()]
    d["t"] = (d["t"] + d["window_s"] / 2).round(3)
    return d


def write_app_report(run_dir: Path) -> dict[str, Path]:
    """report/: phases.csv, timeseries.csv, app_timeseries.png, report.md and report.html."""
    run_dir = Path(run_dir)
    if not (run_dir / "peers.csv").exists() and (run_dir / "run.json").exists():
        tidy_tables(run_dir)  # an interrupted run: its nodes' records are in nodes/
    if not (run_dir / "peers.csv").exists():
        raise SpecError(f"{run_dir}: no peers.csv (not an app run folder, or the run collected nothing)")
    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    phases, series = phase_table(run_dir), timeseries(run_dir)
    faults = pd.read_csv(run_dir / "faults.csv") if (run_dir / "faults.csv").exists() else pd.DataFrame()
    paths = {"phases_csv": out / "phases.csv", "timeseries_csv": out / "timeseries.csv", "plot": out / "app_timeseries.png"}
    phases.to_csv(paths["phases_csv"], index=False)
    series.to_csv(paths["timeseries_csv"], index=False)
    fig = Figure(figsize=(8, 4.5), dpi=110)
    ax = fig.add_subplot()
    ax.plot(series["t"], series["delivery_ratio"], marker=".", label="delivery ratio (all directed pairs)")
    ax.plot(series["t"], series["agreement"], marker=".", label="plan agreement (share on the modal plan)")
    for r in faults.itertuples() if len(faults) else []:
        if not pd.isna(r.offset_s):
            ax.axvline(r.offset_s, color="grey", linestyle="--", linewidth=1)
            ax.text(r.offset_s, 1.03, f"{r.kind}", rotation=90, fontsize="x-small", va="bottom")
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("seconds since t0")
    ax.set_title("Reference app: delivery and agreement (dashed: faults took effect)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    fig.tight_layout()
    fig.savefig(paths["plot"], format="png")
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    sections = [("Phases (between the faults; windows overlapping a fault's application, at_s to offset_s, "
                 "are in none)", [("table", phases)]),
                ("Delivery ratio and plan agreement over time", [("figure", (paths["plot"], "delivery and agreement"))])]
    if len(faults):
        sections.append(("Faults (planned at_s, took effect at offset_s)", [("table", faults)]))
    if (run_dir / "mesh.csv").exists():
        sections.append(("Mesh: time to converge after up and after each fault", [("table", mesh_table(run_dir))]))
    skipped = pd.read_csv(run_dir / "plans.csv")["skipped"].sum() if (run_dir / "plans.csv").stat().st_size > 1 else 0
    warnings = [f"nodes skipped {int(skipped)} cycles in all because they ran late (host overloaded): those "
                "samples were never sent, and are counted as unsent, not as lost"] if skipped else []
    title = f"Swarm app report: {run_dir.resolve().name}"
    intro = ("Delivery ratio: samples received / samples the peers sent (two topics per cycle, less the cycles a "
             "late peer skipped: `unsent`), per directed pair and window of send cycles. Agreement: per cycle, "
             "the share of nodes whose plan equals "
             "the most common plan. Latency: receive minus send time on the shared host clock.")
    return {**paths, **write_report_pages(out, title, intro, host, warnings, sections)}
