"""The traffic sweep's report: tables (CSV + Markdown), figures (PNG) and report.md / report.html.

The figures follow the thesis' Figures 5-7; with `overlay_reference` the thesis curves (from
analysis/reference/thesis/, limited to the swarm sizes measured here) are drawn dashed. The HTML
report is self-contained: images embedded as base64, inline CSS, no external resources.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis.tables import OFFERED_MIN_FRACTION, offered_fraction, load_reference, summarize, table_largest_lossfree, table_tcp_bandwidth, table_udp_loss
from swarm.units import rate_label
from analysis.faults import fault_table, mesh_table, write_fault_timeseries  # noqa: F401  (faults around a test)
from analysis.pages import markdown_table, write_report_pages
from swarm.errors import SpecError

THESIS_LABEL = "thesis (16 vCPU host)"
WINDOW_WARN_FRACTION = 0.8
CPU_WARN_PCT = 95.0



def write_report(run_dir: Path, df: pd.DataFrame, host_facts: dict, tests: pd.DataFrame | None = None,
                 overlay_reference: bool = True, basis: str = "window") -> dict[str, Path]:
    """Write tables, figures, report.md and report.html into run_dir/report/; return name -> path.

    `df` is the tidy flow table (see swarm.analysis). `tests`, if given, has one row per test with
    a `test_id` column (and `run_id` if the table spans runs); its `cpu_busy_pct` column, when
    present, is shown per test and a value >= 95 raises a warning. TCP or UDP sections are left out
    when the sweep has no test of that protocol.
    """
    out = Path(run_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    has_tcp = bool((df["protocol"] == "tcp").any())
    has_udp = bool((df["protocol"] == "udp").any())
    per_test = per_test_table(df, tests)

    tables = {"summary": summarize(df, basis), "tests": per_test}
    if has_tcp:
        tables["tcp_bandwidth"] = table_tcp_bandwidth(df, basis)
    if has_udp:
        tables["udp_largest_lossfree"] = table_largest_lossfree(df, basis)
        tables["udp_loss_max"] = table_udp_loss(df, "max", basis)
        tables["udp_loss_median"] = table_udp_loss(df, "median", basis)

    paths: dict[str, Path] = {}
    for name, table in tables.items():
        paths[f"{name}_csv"] = out / f"{name}.csv"
        table.to_csv(paths[f"{name}_csv"], index=False)
        paths[f"{name}_md"] = out / f"{name}.md"
        paths[f"{name}_md"].write_text(markdown_table(table) + "\n")

    figures: dict[str, tuple[Path, str]] = {}
    if has_tcp:
        figures.update(_tcp_figures(out, tables["tcp_bandwidth"], overlay_reference, basis))
    if has_udp:
        figures.update(_udp_figures(out, tables, overlay_reference, basis))
    paths.update({name: path for name, (path, _) in figures.items()})

    sections = _sections(tables, figures, has_tcp, has_udp)
    fault_figures = write_fault_timeseries(run_dir, out)  # only for runs with a fault timeline (faults.csv)
    if fault_figures:
        paths.update({f"faults_{test_id}": path for test_id, (path, _) in fault_figures.items()})
        sections.insert(-2, ("Faults: throughput and loss around each fault (dashed: when it took effect)",
                             [("table", fault_table(run_dir))] + [("figure", f) for f in fault_figures.values()]))
    if (Path(run_dir) / "mesh.csv").exists():  # a swarm with a mesh (swarm.mesh): convergence after up and faults
        paths["mesh_csv"] = out / "mesh.csv"
        mesh = mesh_table(run_dir)
        mesh.to_csv(paths["mesh_csv"], index=False)
        sections.insert(max(0, len(sections) - 2), ("Mesh convergence: seconds until every node had a route to "
                                                    "every node it could reach (after up and after each fault)",
                                                    [("table", mesh)]))
    warnings = per_test_warnings(per_test)
    title = f"Swarm sweep report: {Path(run_dir).resolve().name}"
    scope = "each test's concurrent window (all flows running)" if basis == "window" else "each flow's whole test"
    intro = (f"Figures are computed over {scope}, basis '{basis}'. Reference curves: W. Vaughan, "
             "\"Distributed Space Systems\" (thesis), Tables 2-5, measured on a 16 vCPU host: "
             "compare shapes, not absolute values.")
    paths.update(write_report_pages(out, title, intro, host_facts, warnings, sections))
    return paths


def per_test_table(df: pd.DataFrame, tests: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per test: protocol, size, rate, repeat, flow counts, skew_s, window_s, duration_s
    (and cpu_busy_pct when `tests` has it)."""
    per_test = df.groupby(["run_id", "test_id"], sort=False).agg(
        protocol=("protocol", "first"), size=("size", "first"), rate_bps=("rate_bps", "first"),
        repeat=("repeat", "first"), flows=("ok", "size"),
        flows_in_error=("ok", lambda ok: int((~ok.astype(bool)).sum())),
        skew_s=("skew_s", "first"), window_s=("window_s", "first"), duration_s=("duration_s", "first"),
    ).reset_index()
    offered = df.assign(_offered=offered_fraction(df)).groupby(["run_id", "test_id"], sort=False)["_offered"].median()
    per_test["offered_fraction"] = offered.round(3).values
    per_test.insert(4, "rate", per_test.pop("rate_bps").map(rate_label))
    if tests is not None:
        extra = [c for c in ("cpu_busy_pct", "clock_uncertainty_s") if c in tests]
        if extra:
            keys = [k for k in ("run_id", "test_id") if k in tests]
            per_test = per_test.merge(tests[keys + extra], on=keys, how="left")
    return per_test


def per_test_warnings(per_test: pd.DataFrame) -> list[str]:
    """Warnings for tests whose window is short, whose host CPU was saturated, or with failed flows."""
    warnings = []
    for row in per_test.itertuples(index=False):
        reasons = []
        if row.window_s < WINDOW_WARN_FRACTION * row.duration_s:
            reasons.append(f"concurrent window {row.window_s:.2f} s is under {WINDOW_WARN_FRACTION:.0%} "
                           f"of the {row.duration_s:g} s test (start skew {row.skew_s:.2f} s)")
        cpu = getattr(row, "cpu_busy_pct", math.nan)
        if cpu >= CPU_WARN_PCT:
            reasons.append(f"host CPU {cpu:.0f}% busy: the host, not the network, may limit these figures")
        offered = getattr(row, "offered_fraction", math.nan)
        if offered < OFFERED_MIN_FRACTION:
            reasons.append(f"senders put only {offered:.0%} of the offered rate on the wire (median): the host could "
                           "not offer the load, so these loss figures do not describe the offered rate")
        if row.flows_in_error:
            reasons.append(f"{row.flows_in_error} of {row.flows} flows failed")
        clock = getattr(row, "clock_uncertainty_s", math.nan)
        if clock > 0 and row.skew_s < clock:  # a multi-host swarm: hosts' clocks agree only to within this
            reasons.append(f"start skew {row.skew_s * 1e3:.3f} ms is below the hosts' clock uncertainty "
                           f"{clock * 1e3:.3f} ms: concurrency finer than that is not claimed")
        if reasons:
            rate = f" {row.rate}" if row.rate else ""
            warnings.append(f"test {row.test_id} ({row.protocol} n={row.size}{rate}, repeat {row.repeat}): "
                            + "; ".join(reasons))
    return warnings


def _tcp_figures(out: Path, table: pd.DataFrame, overlay: bool, basis: str) -> dict[str, tuple[Path, str]]:
    ref = _reference_in_range(load_reference("tcp_bandwidth"), table["nodes"]) if overlay else None
    fig5 = [("median", table["nodes"], table["median_gbps"], "C0", "o"),
            ("lowest", table["nodes"], table["lowest_gbps"], "C1", "s")]
    fig6 = [("system", table["nodes"], table["system_gbps"], "C0", "o")]
    ref5 = ref6 = []
    if ref is not None:
        ref5 = [(f"{THESIS_LABEL}, median", ref["nodes"], ref["median_gbps"], "C0"),
                (f"{THESIS_LABEL}, lowest", ref["nodes"], ref["lowest_gbps"], "C1")]
        ref6 = [(THESIS_LABEL, ref["nodes"], ref["system_gbps"], "C0")]
    return {
        "fig5": _plot(out / "fig5_tcp_per_connection.png", f"Per-connection TCP bandwidth ({basis})",
                      "bandwidth per connection (Gbit/s)", fig5, ref5),
        "fig6": _plot(out / "fig6_tcp_system.png", f"System TCP bandwidth ({basis})",
                      "sum over all connections (Gbit/s)", fig6, ref6),
    }


def _udp_figures(out: Path, tables: dict, overlay: bool, basis: str) -> dict[str, tuple[Path, str]]:
    figures = {}
    for name, stat, key in (("fig7a", "max", "udp_loss_max"), ("fig7b", "median", "udp_loss_median")):
        table = tables[key]
        rates = [c for c in table.columns if c != "nodes"]
        ours = [(rate, table["nodes"], table[rate], f"C{i % 10}", "o") for i, rate in enumerate(rates)]
        refs = []
        if overlay:
            ref = _reference_in_range(load_reference(key), table["nodes"])
            refs = [(f"{THESIS_LABEL}, {rate}", ref["nodes"], ref[rate], f"C{i % 10}")
                    for i, rate in enumerate(rates) if rate in ref]
        title = f"{stat.capitalize()} per-connection UDP loss ({basis})"
        figures[name] = _plot(out / f"{name}_udp_loss_{stat}.png", title, f"{stat} loss per connection (%)",
                              ours, refs, ylim=(-2, 102))
    return figures


def _reference_in_range(ref: pd.DataFrame, nodes: pd.Series) -> pd.DataFrame:
    return ref[(ref["nodes"] >= nodes.min()) & (ref["nodes"] <= nodes.max())]


def _plot(path: Path, title: str, ylabel: str, ours: list, refs: list,
          ylim: tuple[float | None, float | None] = (0, None)) -> tuple[Path, str]:
    """Measured series (solid, markers) and thesis series (dashed) against swarm size."""
    fig = Figure(figsize=(7, 4.2), dpi=110)
    ax = fig.add_subplot()
    for label, x, y, color, marker in ours:
        ax.plot(x, y, color=color, marker=marker, label=label)
    for label, x, y, color in refs:
        ax.plot(x, y, color=color, linestyle="--", marker="x", markersize=4, alpha=0.7, label=label)
    ax.set_title(title)
    ax.set_xlabel("swarm size n (containers)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(*ylim)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path, title


def _sections(tables: dict, figures: dict, has_tcp: bool, has_udp: bool) -> list[tuple[str, list]]:
    """(heading, [('table', DataFrame) | ('figure', (path, title))]) in report order."""
    sections = []
    if has_tcp:
        sections.append(("TCP bandwidth (thesis Table 3, Figures 5-6)", [
            ("table", tables["tcp_bandwidth"]), ("figure", figures["fig5"]), ("figure", figures["fig6"])]))
    if has_udp:
        sections.append(("UDP: largest loss-free swarm (thesis Table 2)", [("table", tables["udp_largest_lossfree"])]))
        sections.append(("UDP: highest per-connection loss, % (thesis Table 4, Figure 7)", [
            ("table", tables["udp_loss_max"]), ("figure", figures["fig7a"])]))
        sections.append(("UDP: median per-connection loss, % (thesis Table 5, Figure 7)", [
            ("table", tables["udp_loss_median"]), ("figure", figures["fig7b"])]))
    sections.append(("Tests: start skew and concurrent window", [("table", tables["tests"])]))
    sections.append(("All groups (bandwidth in bit/s)", [("table", tables["summary"])]))
    return sections


def write_sweep_report(run_dir: Path) -> dict[str, Path]:
    """The report of a traffic sweep's run folder (flows.csv, tests.csv, host.json) in run_dir/report/."""
    run_dir = Path(run_dir)
    flows, tests = run_dir / "flows.csv", run_dir / "tests.csv"
    if not flows.exists():
        raise SpecError(f"{run_dir}: no flows.csv (not a results folder, or no test finished yet)")
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    return write_report(run_dir, pd.read_csv(flows), host, pd.read_csv(tests) if tests.exists() else None)
