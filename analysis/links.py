"""Per-link views of a traffic sweep, as a flight-software engineer reads a swarm: which links lose, which
are slow.

- `link_matrix`: one test's flows as a src x dst matrix (window bandwidth in Mbit/s, window UDP loss %), drawn
  as two heatmaps per test (`write_link_heatmaps`); a link without a figure is hatched and says why.
- `worst_links`: the links of a test with the highest loss (UDP) or the lowest bandwidth (TCP), whose
  per-interval throughput is drawn against time since the release (`write_worst_link_series`), from the
  raw records under raw/<test>/ (each tool's, read by experiments.traffic.tools.read_flow).
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure

from experiments.traffic.tools import FlowResult, read_flow
from swarm.units import rate_label

MAX_TESTS = 24  # heatmaps and series for at most this many tests (the largest sizes first)
WORST = 4  # links drawn per test in the worst-links series


def _node_order(names) -> list[str]:
    return sorted(set(names))


def link_matrix(flows: pd.DataFrame, value: str) -> pd.DataFrame:
    """src x dst matrix of `value` (a flows.csv column) for one test's flows; NaN where no figure."""
    nodes = _node_order(list(flows["src"]) + list(flows["dst"]))
    matrix = pd.DataFrame(np.nan, index=nodes, columns=nodes)
    for row in flows.itertuples(index=False):
        v = getattr(row, value)
        if bool(row.ok) and not pd.isna(v):
            matrix.loc[row.src, row.dst] = float(v)
    return matrix


def chosen_tests(flows: pd.DataFrame) -> list[str]:
    """The tests that get per-link views: every test, or the MAX_TESTS of the largest swarm sizes."""
    tests = flows.groupby("test_id", sort=False)["size"].first()
    return list(tests.sort_values(ascending=False, kind="stable").index[:MAX_TESTS])


def write_link_heatmaps(out: Path, flows: pd.DataFrame) -> dict[str, tuple[Path, str]]:
    """One PNG per chosen test: window bandwidth (Mbit/s) and, for UDP, window loss (%) per directed link."""
    figures = {}
    for test_id in chosen_tests(flows):
        group = flows[flows["test_id"] == test_id]
        udp = group["protocol"].iloc[0] == "udp"
        panels = [("window_bits_per_second", "bandwidth (Mbit/s)", 1e-6, "viridis")]
        if udp:
            panels.append(("window_lost_percent", "loss (%)", 1.0, "Reds"))
        nodes = _node_order(list(group["src"]) + list(group["dst"]))
        side = min(9.0, 2.2 + 0.28 * len(nodes))
        width = side * len(panels) + 1.2
        fig = Figure(figsize=(width, side + 0.6), dpi=100)
        for i, (column, label, scale, cmap) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            matrix = link_matrix(group, column) * scale
            shown = np.ma.masked_invalid(matrix.to_numpy(dtype=float))
            vmax = None
            if column == "window_lost_percent":
                vmax = max(1.0, float(np.nanmax(matrix.to_numpy())) if matrix.notna().any().any() else 1.0)
            image = ax.imshow(shown, cmap=cmap, vmin=0, vmax=vmax)
            ax.set_facecolor("#dddddd")  # no figure: grey (the diagonal: no link to itself)
            ax.set_xticks(range(len(nodes)), nodes, rotation=90, fontsize="x-small")
            ax.set_yticks(range(len(nodes)), nodes, fontsize="x-small")
            ax.set_xlabel("receiver (dst)")
            ax.set_ylabel("sender (src)")
            ax.set_title(label, fontsize="medium")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
            if len(nodes) <= 8:  # small swarms: the figure in each cell, as the tables would give it
                for r in range(len(nodes)):
                    for c in range(len(nodes)):
                        v = matrix.iat[r, c]
                        if not pd.isna(v):
                            ax.text(c, r, f"{v:.3g}", ha="center", va="center", fontsize="x-small", color="0.15",
                                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "alpha": 0.6, "lw": 0})
        rate = group["rate_bps"].iloc[0]
        what = f"{group['protocol'].iloc[0]} n={int(group['size'].iloc[0])}" + (f" {rate_label(rate)}" if udp else "")
        missing = int(group["window_bits_per_second"].isna().sum())
        note = f"; {missing} link(s) without a figure (grey)" if missing else ""
        title = f"Per-link matrix, test {test_id} ({what}), concurrent window{note}"
        fig.suptitle(textwrap.fill(title, int(width * 11)), fontsize="small")
        fig.tight_layout()
        path = out / f"links_{test_id}.png"
        fig.savefig(path, format="png")
        figures[test_id] = (path, title)
    return figures


def worst_links(flows: pd.DataFrame, count: int = WORST) -> pd.DataFrame:
    """The `count` worst links of one test: highest window loss (UDP; ties by lower bandwidth), else lowest
    window bandwidth; failed flows first (they are the worst)."""
    df = flows.copy()
    df["_failed"] = ~df["ok"].astype(bool)
    if (df["protocol"] == "udp").all():
        df = df.sort_values(["_failed", "window_lost_percent", "window_bits_per_second"],
                            ascending=[False, False, True], na_position="last")
    else:
        df = df.sort_values(["_failed", "window_bits_per_second"], ascending=[False, True], na_position="last")
    return df.head(count).drop(columns="_failed")


def flow_intervals(path: Path, flow, duration: float, interval: float) -> tuple[FlowResult, float]:
    """(result with intervals, origin epoch) of one flow's raw record, whichever tool wrote it; `flow` is its
    flows.csv row (its release or inferred start places the intervals where the record does not)."""
    start = next((getattr(flow, c) for c in ("release_ts", "start_ts", "spawn_ts") if hasattr(flow, c)), None)
    start = None if start is None or pd.isna(start) or start == "" else float(start)
    result = read_flow(path.read_text(errors="replace"), flow.protocol, start, duration, interval)
    return result, result.origin


def run_lengths(run_dir: Path) -> tuple[float, float]:
    """(test duration, reporting interval) in seconds from the run's experiment.yaml (10 and 1 without it)."""
    exp_path = Path(run_dir) / "experiment.yaml"
    exp = yaml.safe_load(exp_path.read_text()) if exp_path.exists() else {}
    return float(exp.get("duration", 10) or 10), float((exp.get("iperf3") or {}).get("interval", 1.0) or 1.0)


def write_worst_link_series(run_dir: Path, out: Path, flows: pd.DataFrame, tests: pd.DataFrame | None
                            ) -> dict[str, tuple[Path, str]]:
    """Per chosen test, the per-interval throughput of its WORST links against time since the release."""
    duration, interval = run_lengths(run_dir)
    releases = {}
    if tests is not None and "release_ts" in tests:
        releases = dict(zip(tests["test_id"], pd.to_numeric(tests["release_ts"], errors="coerce")))
    figures = {}
    for test_id in chosen_tests(flows):
        group = flows[flows["test_id"] == test_id]
        series = _worst_series(Path(run_dir), test_id, worst_links(group), duration, interval,
                               releases.get(test_id, math.nan))
        if series:
            title = f"Worst {len(series)} links of test {test_id}: per-interval figures"
            path = out / f"worst_{test_id}.png"
            _plot_series(series, udp=group["protocol"].iloc[0] == "udp", title=title, path=path)
            figures[test_id] = (path, title)
    return figures


def _worst_series(run_dir: Path, test_id: str, worst: pd.DataFrame, duration: float, interval: float,
                  release: float) -> list[tuple[str, list[float], list[float], list[float]]]:
    """(link label, interval mid-times since the release, Mbit/s, loss %) of each worst link with intervals."""
    series = []
    for flow in worst.itertuples(index=False):
        path = run_dir / "raw" / test_id / f"{flow.src}__{flow.dst}.json"
        if not path.exists():
            continue
        result, origin = flow_intervals(path, flow, duration, interval)
        if not result.intervals or math.isnan(origin):
            continue
        zero = release if not pd.isna(release) else origin
        t = [origin + iv.start - zero + (iv.end - iv.start) / 2 for iv in result.intervals]
        mbps = [iv.bits_per_second / 1e6 for iv in result.intervals]
        # a sender's intervals count packets but no losses (iperf3 without the receiver's report): no loss figure
        loss = [100.0 * iv.lost_packets / iv.packets if iv.packets and iv.lost_packets is not None else math.nan
                for iv in result.intervals]
        series.append((f"{flow.src}->{flow.dst}", t, mbps, loss))
    return series


def _plot_series(series: list[tuple[str, list[float], list[float], list[float]]], udp: bool, title: str,
                 path: Path) -> None:
    """Throughput against time (and, for UDP, loss below it), one line a link, saved as a PNG."""
    fig = Figure(figsize=(7, 5.2 if udp else 3.6), dpi=100)
    axes = [fig.add_subplot(2 if udp else 1, 1, 1)]
    if udp:
        axes.append(fig.add_subplot(2, 1, 2, sharex=axes[0]))
    for label, t, mbps, loss in series:
        axes[0].plot(t, mbps, marker="o", markersize=3, label=label)
        if udp:
            axes[1].plot(t, loss, marker="o", markersize=3, label=label)
    axes[0].set_ylabel("throughput (Mbit/s)")
    axes[0].set_ylim(0, max([v for _, _, mbps, _ in series for v in mbps] + [0]) * 1.15 or 1)
    if udp:
        axes[1].set_ylabel("loss (%)")
        top = max([v for _, _, _, loss in series for v in loss if not math.isnan(v)] or [0])
        upper = max(1.0, top * 1.15)
        axes[1].set_ylim(-0.03 * upper, upper)  # a zero-loss line stays visible above the axis
    axes[-1].set_xlabel("time since release (s)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="x-small", ncol=2)
    axes[0].set_title(title, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")
