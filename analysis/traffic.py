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
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from analysis.links import write_link_heatmaps, write_worst_link_series
from analysis.tables import (NO_WINDOW, OFFERED_MIN_FRACTION, fill_gaps, gap_reason, load_reference, offered_fraction,
                             summarize, table_largest_lossfree, table_lossfree_by_size, table_tcp_bandwidth, table_udp_loss)
from swarm.units import rate_label
from analysis.faults import fault_table, mesh_table, write_fault_timeseries  # noqa: F401  (faults around a test)
from analysis.pages import markdown_table, write_report_pages
from swarm.errors import SpecError

THESIS_LABEL = "thesis (16 vCPU host)"
WINDOW_WARN_FRACTION = 0.8
CPU_WARN_PCT = 95.0
RECEIVER_LATE_WARN_FRACTION = 0.05  # of the test's duration



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

    if has_udp:
        tables["udp_lossfree_by_size"] = table_lossfree_by_size(df, basis)
    shown = display_tables(tables, df, basis)  # what md/html show: reasons in place of blanks, Mbit/s

    paths: dict[str, Path] = {}
    for name, table in tables.items():
        paths[f"{name}_csv"] = out / f"{name}.csv"
        table.to_csv(paths[f"{name}_csv"], index=False)
        paths[f"{name}_md"] = out / f"{name}.md"
        paths[f"{name}_md"].write_text(markdown_table(shown[name]) + "\n")

    figures: dict[str, tuple[Path, str]] = {}
    if has_tcp:
        figures.update(_tcp_figures(out, tables["tcp_bandwidth"], overlay_reference, basis))
    if has_udp:
        figures.update(_udp_figures(out, tables, overlay_reference, basis))
    paths.update({name: path for name, (path, _) in figures.items()})
    link_figures = write_link_heatmaps(out, df)
    worst_figures = write_worst_link_series(run_dir, out, df, tests)
    paths.update({f"links_{t}": p for t, (p, _) in link_figures.items()})
    paths.update({f"worst_{t}": p for t, (p, _) in worst_figures.items()})

    sections = _sections(shown, figures, has_tcp, has_udp)
    if link_figures:
        sections.insert(-2, ("Per link: bandwidth and loss matrix per test (sender row, receiver column; grey: no figure)",
                             [("figure", f) for f in link_figures.values()]))
    if worst_figures:
        sections.insert(-2, ("Worst links: per-interval throughput (and UDP loss) of each test's worst links",
                             [("figure", f) for f in worst_figures.values()]))
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


BPS_COLUMNS = ("median_bps", "lowest_bps", "highest_bps", "system_bps")


def display_tables(tables: dict[str, pd.DataFrame], df: pd.DataFrame, basis: str) -> dict[str, pd.DataFrame]:
    """The tables as the report shows them: a missing figure says why (fill_gaps: 'not measured: no concurrent
    window', never a blank), bandwidth in Mbit/s (never raw bit/s)."""
    shown = dict(tables)
    summary = tables["summary"].copy()
    for column in BPS_COLUMNS:
        summary[column.replace("_bps", "_mbps")] = summary.pop(column) / 1e6
    summary = summary[[c for c in summary.columns if c != "note"] + ["note"]].drop(columns=["rate_bps"])
    shown["summary"] = _no_blanks(summary)
    shown["tests"] = _no_blanks(tables["tests"])
    if "tcp_bandwidth" in tables:
        shown["tcp_bandwidth"] = fill_gaps(tables["tcp_bandwidth"], df, "tcp", basis)
    if "udp_largest_lossfree" in tables:
        shown["udp_largest_lossfree"] = _lossfree_shown(tables["udp_largest_lossfree"], tables["udp_lossfree_by_size"])
    for name in ("udp_loss_max", "udp_loss_median"):
        if name in tables:
            shown[name] = fill_gaps(tables[name], df, "udp", basis)
    return shown


def _lossfree_shown(table: pd.DataFrame, by_size: pd.DataFrame) -> pd.DataFrame:
    """Table 2 as shown: 'none' where no size was loss-free, and an empty note replaced by what the larger
    sizes were (from the by-size table), so no cell is blank."""
    shown = table.astype(object).copy()
    outcomes = {row["rate"]: row for _, row in by_size.iterrows()}
    for i, row in table.iterrows():
        if pd.isna(row["largest_lossfree_nodes"]):
            shown.at[i, "largest_lossfree_nodes"] = "none"
        if not row["note"]:
            larger = [f"{col} {status}" for col, status in outcomes.get(row["rate"], {}).items()
                      if col.startswith("n=") and not pd.isna(row["largest_lossfree_nodes"])
                      and int(col[2:]) > int(row["largest_lossfree_nodes"])]
            shown.at[i, "note"] = "; ".join(larger) or "ok"
    return shown


def _no_blanks(table: pd.DataFrame) -> pd.DataFrame:
    """A display copy where an empty note reads 'ok' and any other empty cell (a loss or rate of a TCP
    test, a figure a test did not record) reads 'n/a': a blank never stands for anything."""
    shown = table.astype(object).copy()
    for column in shown.columns:
        empty = shown[column].map(lambda v: v is None or v is pd.NA or v == "" or (isinstance(v, float) and math.isnan(v)))
        shown.loc[empty, column] = "ok" if column == "note" else "n/a"
    return shown


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
    if {"receiver_s", "sender_s"} <= set(df.columns):  # older runs have neither
        late = (pd.to_numeric(df["receiver_s"], errors="coerce") - pd.to_numeric(df["sender_s"], errors="coerce"))
        per_test["receiver_late_max_s"] = late.groupby([df["run_id"], df["test_id"]], sort=False).max().round(3).values
    per_test.insert(4, "rate", per_test.pop("rate_bps").map(rate_label))
    reasons = df.groupby(["run_id", "test_id"], sort=False).apply(gap_reason, include_groups=False)
    per_test["note"] = reasons.values
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
        if not row.window_s > 0:
            reasons.append(f"{NO_WINDOW} (start skew {row.skew_s:.2f} s >= the {row.duration_s:g} s test): "
                           "its figures are left out of every concurrent-window table, which says so")
        elif row.window_s < WINDOW_WARN_FRACTION * row.duration_s:
            reasons.append(f"concurrent window {row.window_s:.2f} s is under {WINDOW_WARN_FRACTION:.0%} "
                           f"of the {row.duration_s:g} s test (start skew {row.skew_s:.2f} s)")
        cpu = getattr(row, "cpu_busy_pct", math.nan)
        if cpu >= CPU_WARN_PCT:
            reasons.append(f"host CPU {cpu:.0f}% busy: the host, not the network, may limit these figures")
        offered = getattr(row, "offered_fraction", math.nan)
        if offered < OFFERED_MIN_FRACTION:
            reasons.append(f"senders put only {offered:.0%} of the offered rate on the wire (median): the host could "
                           "not offer the load, so these loss figures do not describe the offered rate")
        late = getattr(row, "receiver_late_max_s", math.nan)
        if late > RECEIVER_LATE_WARN_FRACTION * row.duration_s:
            reasons.append(f"a receiver's measured time ran {late:.2f} s past its sender's: bits/s is bytes over the "
                           "receiver's time, so a busy host reading late (or link delay and queueing) lowers it; "
                           "packets and lost_packets say what arrived")
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
        ref6 = [(THESIS_LABEL, ref["nodes"], ref["system_gbps"], "C3")]
    # The thesis host gave tens of Gbit/s, ours a few: each on its own axis, or the measured curves are flat
    # lines at the bottom.
    return {
        "fig5": _plot(out / "fig5_tcp_per_connection.png", f"Per-connection TCP bandwidth ({basis})",
                      "bandwidth per connection (Gbit/s)", fig5, ref5, secondary="thesis, per connection (Gbit/s)"),
        "fig6": _plot(out / "fig6_tcp_system.png", f"System TCP bandwidth ({basis})",
                      "sum over all connections (Gbit/s)", fig6, ref6, secondary="thesis system (Gbit/s)"),
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
                              ours, refs, loss_axis=True)
    return figures


def _reference_in_range(ref: pd.DataFrame, nodes: pd.Series) -> pd.DataFrame:
    return ref[(ref["nodes"] >= nodes.min()) & (ref["nodes"] <= nodes.max())]


def _plot(path: Path, title: str, ylabel: str, ours: list, refs: list, loss_axis: bool = False,
          secondary: str | None = None) -> tuple[Path, str]:
    """The figure of `sweep_figure`, saved as a PNG: (path, title)."""
    sweep_figure(title, ylabel, ours, refs, loss_axis, secondary).savefig(path, format="png")
    return path, title


def sweep_figure(title: str, ylabel: str, ours: list, refs: list, loss_axis: bool = False,
                 secondary: str | None = None) -> Figure:
    """Measured series (solid, markers) and thesis series (dashed) against swarm size.

    The x ticks are the sizes this sweep ran, only those (a thesis point between them is drawn, not labelled),
    and the legend sits below the axes, outside the data, so it hides no curve. A size tested but without a
    figure (NaN: not measured) is a hollow marker on the axis, explained in the legend. Loss axes are scaled to
    the data (0 .. 1.15 x the largest value, at least 0..1 %), not 0..100 %. With `secondary`, the thesis series
    go on a right-hand axis of their own scale (labelled so).
    """
    fig = Figure(figsize=(7, 4.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    missing = 0
    top = 0.0
    sizes: set[float] = set()
    for label, x, y, color, marker in ours:
        x, y = pd.Series(list(x), dtype=float), pd.Series(list(y), dtype=float)
        sizes.update(x.dropna())
        ax.plot(x, y, color=color, marker=marker, label=label)
        gaps = x[y.isna()]
        if len(gaps):
            missing += len(gaps)
            ax.plot(gaps, [0.0] * len(gaps), linestyle="none", marker=marker, markersize=9, markerfacecolor="none",
                    markeredgecolor=color, clip_on=False)
        if y.notna().any():
            top = max(top, float(y.max()))
    ref_ax = ax.twinx() if secondary and refs else ax
    for label, x, y, color in refs:
        ref_ax.plot(x, y, color=color, linestyle="--", marker="x", markersize=4, alpha=0.7, label=label)
        if ref_ax is ax and loss_axis and len(y):
            top = max(top, float(pd.Series(list(y), dtype=float).max()))
    ax.set_title(title)
    ax.set_xlabel("swarm size n (nodes)")
    ax.set_ylabel(ylabel)
    ax.set_xticks(sorted(sizes), [f"{s:g}" for s in sorted(sizes)])
    ax.xaxis.set_minor_locator(NullLocator())
    if loss_axis:
        upper = max(1.0, top * 1.15)
        ax.set_ylim(-0.03 * upper, upper)  # zero-loss curves stay visible above the axis
    else:
        ax.set_ylim(bottom=0)
    if ref_ax is not ax:
        ref_ax.set_ylim(bottom=0)
        ref_ax.set_ylabel(secondary or "", color="0.35")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if ref_ax is not ax:
        more = ref_ax.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + [f"{lb} (right axis)" for lb in more[1]]
    if missing:
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=9, markerfacecolor="none",
                              markeredgecolor="0.3"))
        labels.append(f"on the axis: size tested, not measured ({missing} point(s); see the tables)")
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize="small", frameon=False)
    return fig


def _sections(tables: dict, figures: dict, has_tcp: bool, has_udp: bool) -> list[tuple[str, list]]:
    """(heading, [('table', DataFrame) | ('figure', (path, title))]) in report order."""
    sections = []
    if has_tcp:
        sections.append(("TCP bandwidth (thesis Table 3, Figures 5-6)", [
            ("table", tables["tcp_bandwidth"]), ("figure", figures["fig5"]), ("figure", figures["fig6"])]))
    if has_udp:
        sections.append(("UDP: largest loss-free swarm (thesis Table 2), and each size's result", [
            ("table", tables["udp_largest_lossfree"]), ("table", tables["udp_lossfree_by_size"])]))
        sections.append(("UDP: highest per-connection loss, % (thesis Table 4, Figure 7)", [
            ("table", tables["udp_loss_max"]), ("figure", figures["fig7a"])]))
        sections.append(("UDP: median per-connection loss, % (thesis Table 5, Figure 7)", [
            ("table", tables["udp_loss_median"]), ("figure", figures["fig7b"])]))
    sections.append(("Tests: start skew and concurrent window", [("table", tables["tests"])]))
    sections.append(("All groups (bandwidth in Mbit/s)", [("table", tables["summary"])]))
    return sections


def write_sweep_report(run_dir: Path) -> dict[str, Path]:
    """The report of a traffic sweep's run folder (flows.csv, tests.csv, host.json) in run_dir/report/."""
    run_dir = Path(run_dir)
    flows, tests = run_dir / "flows.csv", run_dir / "tests.csv"
    if not flows.exists():
        raise SpecError(f"{run_dir}: no flows.csv (not a results folder, or no test finished yet)")
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    return write_report(run_dir, pd.read_csv(flows), host, pd.read_csv(tests) if tests.exists() else None)
