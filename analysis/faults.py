"""Fault time series for the report: per-interval throughput and UDP loss across a test's flows, against
time since the traffic's release, with a vertical line where each fault of the timeline took effect.

Inputs are the run folder's raw flow records (raw/<test>/<src>__<dst>.json, receiver intervals), flows.csv
(each flow's release instant, or its data start, which places its intervals in time),
tests.csv (release instant), faults.csv
(experiments.timeline.FaultTimeline: planned `at_s` and actual `offset_s` of each fault) and, for a swarm with a mesh,
mesh.csv (swarm.mesh.MeshWatcher: when the routes had converged after each fault, a dotted line).

UDP loss is shown two ways: against the offered rate (1 - received / offered, per interval), which shows a
cut where it happens, and as iperf3 counts it (sequence gaps), which books the packets lost during a cut
in the interval where the next packet arrives, i.e. after the heal.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd
from matplotlib.figure import Figure

from analysis.links import run_lengths
from experiments.traffic.tools import read_flow


def interval_table(run_dir: Path, test_id: str, flows: pd.DataFrame, release: float) -> pd.DataFrame:
    """One row per receiver interval of every flow of `test_id`: flow, t_start/t_end (s since release),
    bits_per_second, offered_bps (UDP: the flow's rate; NaN for TCP), packets, lost_packets (UDP)."""
    rows = []
    # Where a flow's intervals start: the instant its servers were released (flows' release_ts), which is
    # when its data starts; else the inferred data start (start_ts: exit less the test length, late by the
    # end-of-test exchange, which a lossy link stretches by up to seconds); else spawn_ts (older runs).
    start_col = next((c for c in ("release_ts", "start_ts", "spawn_ts") if c in flows), "spawn_ts")
    duration, interval = run_lengths(run_dir)
    for flow in flows[flows["test_id"] == test_id].itertuples(index=False):
        path = Path(run_dir) / "raw" / test_id / f"{flow.src}__{flow.dst}.json"
        if not path.exists():
            continue
        start = getattr(flow, start_col)
        start = None if pd.isna(start) or start == "" else float(start)
        result = read_flow(path.read_text(), flow.protocol, start, duration, interval)
        if math.isnan(result.origin):
            continue
        offered = float(flow.rate_bps) if flow.protocol == "udp" and not pd.isna(flow.rate_bps) and flow.rate_bps != "" else math.nan
        for iv in result.intervals:
            rows.append({"flow": f"{flow.src}->{flow.dst}", "t_start": result.origin + iv.start - release,
                         "t_end": result.origin + iv.end - release, "bits_per_second": iv.bits_per_second,
                         "offered_bps": offered, "packets": iv.packets, "lost_packets": iv.lost_packets})
    return pd.DataFrame(rows, columns=["flow", "t_start", "t_end", "bits_per_second", "offered_bps", "packets",
                                       "lost_packets"])


def binned(intervals: pd.DataFrame, width: float = 1.0) -> pd.DataFrame:
    """Sum over flows per time bin (by interval midpoint): total throughput, UDP loss % as iperf3 counts it
    (`lost_percent`) and against the offered rate (`offered_loss_percent`)."""
    if intervals.empty:
        return pd.DataFrame(columns=["t", "bits_per_second", "lost_percent", "offered_loss_percent", "flows"])
    df = intervals.copy()
    df["bin"] = (((df["t_start"] + df["t_end"]) / 2) // width).astype(int)
    grouped = df.groupby("bin")
    out = pd.DataFrame({
        "t": (grouped["bin"].first() + 0.5) * width,
        "bits_per_second": grouped["bits_per_second"].sum(),
        "flows": grouped["flow"].nunique(),
    })
    if df["packets"].notna().any():
        packets = grouped["packets"].sum(min_count=1)
        lost = grouped["lost_packets"].sum(min_count=1)
        out["lost_percent"] = (100.0 * lost / packets).where(packets > 0)
    else:
        out["lost_percent"] = math.nan
    udp = df[df["offered_bps"].notna()]
    if not udp.empty:
        by = udp.groupby("bin")
        received, offered = by["bits_per_second"].sum(), by["offered_bps"].sum()
        out["offered_loss_percent"] = (100.0 * (1 - received / offered)).clip(0, 100)
    else:
        out["offered_loss_percent"] = math.nan
    return out.reset_index(drop=True)


def write_fault_timeseries(run_dir: Path, out_dir: Path | None = None) -> dict[str, tuple[Path, str]]:
    """One PNG per test that had faults: throughput (per flow and total) and UDP loss per interval around
    the faults. Returns {test_id: (path, title)}; empty when the run has no faults.csv."""
    run_dir = Path(run_dir)
    faults_csv = run_dir / "faults.csv"
    if not faults_csv.exists() or not (run_dir / "flows.csv").exists():
        return {}
    out_dir = Path(out_dir) if out_dir else run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    faults = pd.read_csv(faults_csv)
    flows = pd.read_csv(run_dir / "flows.csv")
    mesh = pd.read_csv(run_dir / "mesh.csv") if (run_dir / "mesh.csv").exists() else pd.DataFrame()
    tests = pd.read_csv(run_dir / "tests.csv") if (run_dir / "tests.csv").exists() else pd.DataFrame()
    figures: dict[str, tuple[Path, str]] = {}
    for test_id, test_faults in faults.groupby("test_id", sort=False):
        row = tests[tests["test_id"] == test_id] if "test_id" in tests else tests
        if row.empty:
            continue
        release = float(row["release_ts"].iloc[-1])
        intervals = interval_table(run_dir, test_id, flows, release)
        title = f"{test_id}: throughput and loss around the faults"
        path = out_dir / f"faults_{test_id}.png"
        marks = _mesh_marks(mesh, test_id, release)
        _plot(path, title, intervals, binned(intervals), test_faults, marks)
        figures[test_id] = (path, title)
    return figures


def _mesh_marks(mesh: pd.DataFrame, test_id: str, release: float) -> list[tuple[float, str]]:
    """(seconds since release, label) of each mesh convergence after a fault of `test_id`."""
    if mesh.empty:
        return []
    rows = mesh[(mesh["test_id"] == test_id) & (mesh["event"] != "restore") & mesh["converged"].astype(bool)]
    marks: list[tuple[float, list[str]]] = []  # events that converged in the same snapshot share one line
    for r in sorted(rows.itertuples(index=False), key=lambda r: float(r.converged_ts)):
        x, what = float(r.converged_ts) - release, f"{r.event} +{float(r.converge_s):.1f} s"
        if marks and x - marks[-1][0] < 0.25:
            marks[-1][1].append(what)
        else:
            marks.append((x, [what]))
    return [(x, f"mesh: {whats[0]}" + (f" (+{len(whats) - 1})" if len(whats) > 1 else "")) for x, whats in marks]


def mesh_table(run_dir: Path) -> pd.DataFrame:
    """mesh.csv as shown in the report: how long the mesh took to converge after `up` and after each fault."""
    mesh = pd.read_csv(Path(run_dir) / "mesh.csv")
    mesh["args"] = mesh["args"].fillna("").astype(str).str.replace(" | ", " / ", regex=False)  # | splits a Markdown cell
    cols = ["test_id", "size", "implementation", "event", "args", "converge_s", "resolution_s", "converged", "polls"]
    return mesh[[c for c in cols if c in mesh]].fillna("")


def fault_table(run_dir: Path) -> pd.DataFrame:
    """faults.csv as shown in the report: when each fault was planned and when it took effect (and, with the
    userspace link engine, when the first packet met it: first_packet_s after the command)."""
    faults = pd.read_csv(Path(run_dir) / "faults.csv")
    faults["late_ms"] = (faults["offset_s"] - faults["at_s"]) * 1000
    cols = ["test_id", "at_s", "offset_s", "late_ms", "took_s", "kind", "args", "ok", "error"]
    if "first_packet_s" in faults and faults["first_packet_s"].notna().any():  # the userspace engine's measurement
        cols.insert(5, "first_packet_s")
    return faults[cols]


def _plot(path: Path, title: str, intervals: pd.DataFrame, bins: pd.DataFrame, faults: pd.DataFrame,
          mesh_marks: Sequence[tuple[float, str]] = ()) -> None:
    fig = Figure(figsize=(8, 5.2), dpi=110)
    ax_bw, ax_loss = fig.subplots(2, 1, sharex=True)
    for flow, group in intervals.groupby("flow"):
        mid = (group["t_start"] + group["t_end"]) / 2
        ax_bw.plot(mid, group["bits_per_second"] / 1e6, linewidth=0.8, alpha=0.5, label=flow)
    if not bins.empty:
        ax_bw.plot(bins["t"], bins["bits_per_second"] / 1e6, color="black", linewidth=2, marker="o", label="all flows")
        if bins["offered_loss_percent"].notna().any():
            ax_loss.plot(bins["t"], bins["offered_loss_percent"], color="C3", marker="o",
                         label="1 - received / offered")
        if bins["lost_percent"].notna().any():
            ax_loss.plot(bins["t"], bins["lost_percent"], color="C4", marker="x", linestyle=":",
                         label="iperf3 count (gaps booked on arrival)")
            ax_loss.legend(fontsize="x-small", loc="upper left")
    for fault in faults.itertuples(index=False):
        x = fault.offset_s if not pd.isna(fault.offset_s) and fault.offset_s != "" else fault.at_s
        color = "C2" if fault.ok else "red"
        for ax in (ax_bw, ax_loss):
            ax.axvline(float(x), color=color, linestyle="--", linewidth=1)
        label = f"{fault.kind} {fault.args}"
        label = (label if len(label) <= 28 else label[:27] + "…") + ("" if fault.ok else " (failed)")
        ax_bw.annotate(label, (float(x), 0.98), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                       va="top", ha="right")
    for x, label in mesh_marks:
        for ax in (ax_bw, ax_loss):
            ax.axvline(x, color="C0", linestyle=":", linewidth=1.2)
        ax_loss.annotate(label, (x, 0.98), xycoords=("data", "axes fraction"), rotation=90, fontsize=7, va="top",
                         ha="left", color="C0")
    ax_bw.set_title(title)
    ax_bw.set_ylabel("throughput (Mbit/s)")
    ax_loss.set_ylabel("UDP loss (%)")
    ax_loss.set_ylim(-2, 102)
    ax_loss.set_xlabel("seconds since the traffic's release (dashed: fault applied"
                       + ("; dotted: mesh converged, +s after the fault)" if len(mesh_marks) else ")"))
    for ax in (ax_bw, ax_loss):
        ax.grid(True, alpha=0.3)
    handles, labels = ax_bw.get_legend_handles_labels()
    if len(labels) <= 13:
        ax_bw.legend(fontsize="x-small", loc="lower left")
    fig.tight_layout()
    fig.savefig(path, format="png")
