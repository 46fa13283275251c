"""Report of a ddsperf sweep: throughput and round-trip latency by sample size, rate and swarm size."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from analysis.pages import write_report_pages
from swarm.errors import SpecError


def summary_table(rows) -> "Any":
    """Per swarm size, measure, sample size and rate (repeats and receivers pooled): medians and extremes."""
    df = rows[rows["ok"].astype(str) == "True"] if len(rows) else rows
    keys = ["size", "measure", "sample_size", "sample_bytes", "rate"]
    out = []
    for key, g in df.groupby(keys, sort=True):
        rec = dict(zip(keys, key))
        rec["receivers"] = len(g)
        if key[1] == "throughput":
            rec.update({"mbps_median": g["mbps"].median(), "mbps_min": g["mbps"].min(),
                        "samples_per_s_median": g["samples_per_s"].median(),
                        "aggregate_mbps": g.groupby("test_id")["mbps"].sum().median(),
                        "lost_percent_max": g["lost_percent"].max()})
        else:
            rec.update({"rtt_p50_us": g["p50_us"].median(), "rtt_p90_us": g["p90_us"].median(),
                        "rtt_p99_us": g["p99_us"].median(), "rtt_max_us": g["max_us"].max()})
        out.append(rec)
    return pd.DataFrame(out)


def write_ddsperf_report(run_dir: Path) -> dict[str, Path]:
    """Tables (CSV) and figures (PNG) of a ddsperf run, and report.md / report.html, in run_dir/report/."""
    run_dir = Path(run_dir)
    path = run_dir / "ddsperf.csv"
    if not path.exists():
        raise SpecError(f"{run_dir}: no ddsperf.csv (no test finished yet)")
    rows = pd.read_csv(path)
    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    table = summary_table(rows)
    paths = {"summary_csv": out / "ddsperf_summary.csv"}
    table.to_csv(paths["summary_csv"], index=False)
    sections, figures = [], {}
    for measure, ycol, ylabel in (("throughput", "mbps_median", "Mb/s per subscriber (median)"),
                                  ("latency", "rtt_p50_us", "round trip p50, us (median over nodes)")):
        sub = table[table["measure"] == measure] if len(table) else table
        if sub.empty:
            continue
        fig = Figure(figsize=(7, 4.2), dpi=110)
        ax = fig.add_subplot()
        for (size, rate), g in sub.groupby(["size", "rate"]):
            g = g.sort_values("sample_bytes")
            ax.plot(g["sample_bytes"], g[ycol], marker="o", label=f"n={size}, {rate}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sample size, bytes")
        ax.set_ylabel(ylabel)
        ax.set_title(f"ddsperf {measure} by sample size")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        figures[measure] = (out / f"ddsperf_{measure}.png", f"ddsperf {measure} by sample size")
        fig.savefig(figures[measure][0], format="png")
        paths[f"{measure}_png"] = figures[measure][0]
        cols = [c for c in sub.columns if sub[c].notna().any()]
        sections.append((f"DDS {measure} (ddsperf)", [("table", sub[cols]), ("figure", figures[measure])]))
    tests = run_dir / "tests.csv"
    if tests.exists():
        sections.append(("Tests", [("table", pd.read_csv(tests))]))
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    title = f"ddsperf sweep report: {run_dir.resolve().name}"
    intro = ("Throughput: the first node publishes, every other node subscribes; latency: the first node pings, "
             "every other node answers. Figures over whole seconds of each run; raw ddsperf output under raw/.")
    warnings = [f"{int(r.receivers - r.nodes_ok)} of {int(r.receivers)} receivers measured nothing in {r.test_id}"
                for r in pd.read_csv(tests).itertuples() if r.nodes_ok < r.receivers] if tests.exists() else []
    return {**paths, **write_report_pages(out, title, intro, host, warnings, sections)}
