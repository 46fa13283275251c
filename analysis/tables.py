"""Tables over the tidy flow table of a sweep (one row per directed flow per test).

Columns used: run_id, test_id, size, protocol ('tcp'/'udp'), rate_bps (NaN for TCP), repeat, ok,
bits_per_second, lost_percent, window_bits_per_second, window_lost_percent (plus, per test, skew_s,
window_s, duration_s, used by the report).

Figures are taken over each test's concurrent window by default (`basis='window'`: the
window_* columns) or over each flow's whole test (`basis='whole'`). Failed flows (ok False) are
counted in `flows_in_error` and left out of every statistic. Per-connection statistics pool the flows
of all repeats; the system bandwidth is summed over each test's flows, then the median over repeats.
The thesis' tables (its Tables 2-5) are in analysis/reference/thesis/ and come back from
`load_reference`.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from swarm.errors import SpecError
from swarm.units import rate_label

REFERENCE_DIR = Path(__file__).resolve().parent / "reference" / "thesis"
REFERENCE_TABLES = ("tcp_bandwidth", "udp_loss_max", "udp_loss_median", "udp_largest_lossfree")

def _columns(basis: str) -> tuple[str, str]:
    if basis == "window":
        return "window_bits_per_second", "window_lost_percent"
    if basis == "whole":
        return "bits_per_second", "lost_percent"
    raise SpecError(f"basis {basis!r}: expected 'window' or 'whole'")


NO_WINDOW = "not measured: no concurrent window"


def gap_reason(group: pd.DataFrame, basis: str = "window") -> str:
    """Why a group of flows (one test, or one protocol/size/rate cell) has no figure on `basis`, or "" when it
    has one: never a blank cell without its reason."""
    bps_col, _ = _columns(basis)
    if group.empty:
        return "not tested"
    good = group[group["ok"].astype(bool)]
    if good.empty:
        return "not measured: every flow failed"
    if good[bps_col].notna().any():
        return ""
    if basis == "window" and "window_s" in group and (pd.to_numeric(group["window_s"], errors="coerce") <= 0).any():
        return NO_WINDOW
    return "not measured: no figures"


def fill_gaps(table: pd.DataFrame, df: pd.DataFrame, protocol: str, basis: str = "window") -> pd.DataFrame:
    """A display copy of a per-size table (a `nodes` column; value columns either per rate label, for UDP
    tables, or figures, for TCP) with every missing figure replaced by its reason (gap_reason)."""
    shown = table.astype(object).copy()
    flows = df[df["protocol"] == protocol]
    rates = {rate_label(r): r for r in flows["rate_bps"].dropna().unique()} if protocol == "udp" else {}
    for i, nodes in enumerate(table["nodes"]):
        for column in table.columns:
            if column == "nodes" or not pd.isna(table.at[i, column]):
                continue
            cell = flows[flows["size"] == nodes]
            if column in rates:
                cell = cell[cell["rate_bps"] == rates[column]]
            shown.at[i, column] = gap_reason(cell, basis) or "not measured: no figures"
    return shown


def lossfree_status(flows: pd.DataFrame, basis: str = "window") -> str:
    """One size at one UDP rate, for Table 2: loss-free, lossy (max %), not measured (why), or the sender
    could not offer the load (share it put on the wire)."""
    _, loss_col = _columns(basis)
    reason = gap_reason(flows, basis)
    if reason:
        return reason
    good = flows[flows["ok"].astype(bool)]
    offered = offered_fraction(flows).median()
    if offered < OFFERED_MIN_FRACTION:
        return f"sender could not offer the load ({offered:.0%} sent)"
    if good[loss_col].isna().any():
        return f"not measured: {int(good[loss_col].isna().sum())} of {len(flows)} links without a loss figure"
    failed = len(flows) - len(good)
    if failed:
        return f"{failed} of {len(flows)} flows failed"
    worst = good[loss_col].max()
    return "loss-free" if worst == 0 else f"lossy (max {worst:.3g}%)"


def table_lossfree_by_size(df: pd.DataFrame, basis: str = "window") -> pd.DataFrame:
    """Table 2 in full: rows UDP rates, columns sizes, each cell lossfree_status."""
    udp = df[df["protocol"] == "udp"]
    sizes = sorted(int(s) for s in udp["size"].unique())
    rows = []
    for rate_bps, group in udp.groupby("rate_bps", sort=True):
        row = {"rate": rate_label(rate_bps)}
        for size in sizes:
            row[f"n={size}"] = lossfree_status(group[group["size"] == size], basis)
        rows.append(row)
    return pd.DataFrame(rows, columns=["rate"] + [f"n={s}" for s in sizes])


def summarize(df: pd.DataFrame, basis: str = "window") -> pd.DataFrame:
    """One row per (protocol, size, rate_bps) with flow counts, bandwidth and UDP loss statistics.

    Columns: protocol, size, rate_bps, rate (label), tests, flows, flows_in_error, flows_measured
    (ok flows with a figure), median_bps, lowest_bps, highest_bps, system_bps, median_loss_pct,
    max_loss_pct (NaN for TCP).
    """
    bps_col, loss_col = _columns(basis)
    rows = []
    for (protocol, size, rate_bps), group in df.groupby(["protocol", "size", "rate_bps"], dropna=False, sort=True):
        good = group[group["ok"].astype(bool)]
        bps = good[bps_col].dropna()
        per_test = good.groupby(["run_id", "test_id"])[bps_col].sum(min_count=1)
        loss = good[loss_col].dropna() if protocol == "udp" else pd.Series(dtype=float)
        rows.append({
            "protocol": protocol,
            "size": size,
            "rate_bps": rate_bps,
            "rate": rate_label(rate_bps),
            "tests": group[["run_id", "test_id"]].drop_duplicates().shape[0],
            "flows": len(group),
            "flows_in_error": len(group) - len(good),
            "flows_measured": len(bps),
            "median_bps": bps.median() if len(bps) else math.nan,
            "lowest_bps": bps.min() if len(bps) else math.nan,
            "highest_bps": bps.max() if len(bps) else math.nan,
            "system_bps": per_test.median() if per_test.notna().any() else math.nan,
            "median_loss_pct": loss.median() if len(loss) else math.nan,
            "max_loss_pct": loss.max() if len(loss) else math.nan,
            "note": gap_reason(group, basis),
        })
    return pd.DataFrame(rows, columns=[
        "protocol", "size", "rate_bps", "rate", "tests", "flows", "flows_in_error", "flows_measured",
        "median_bps", "lowest_bps", "highest_bps", "system_bps", "median_loss_pct", "max_loss_pct", "note",
    ])


def table_tcp_bandwidth(df: pd.DataFrame, basis: str = "window") -> pd.DataFrame:
    """Thesis Table 3: nodes, connections, median_gbps, lowest_gbps, system_gbps (TCP tests)."""
    summary = summarize(df[df["protocol"] == "tcp"], basis)
    return pd.DataFrame({
        "nodes": summary["size"].astype(int),
        "connections": (summary["size"] * (summary["size"] - 1)).astype(int),
        "median_gbps": summary["median_bps"] / 1e9,
        "lowest_gbps": summary["lowest_bps"] / 1e9,
        "system_gbps": summary["system_bps"] / 1e9,
    }).reset_index(drop=True)


def table_udp_loss(df: pd.DataFrame, stat: str = "max", basis: str = "window") -> pd.DataFrame:
    """Thesis Tables 4 ('max') / 5 ('median'): per-connection UDP loss %, rows nodes, columns rates."""
    if stat not in ("max", "median"):
        raise SpecError(f"stat {stat!r}: expected 'max' or 'median'")
    summary = summarize(df[df["protocol"] == "udp"], basis)
    if summary.empty:
        return pd.DataFrame(columns=["nodes"])
    table = summary.pivot(index="size", columns="rate_bps", values=f"{stat}_loss_pct").sort_index(axis=1)
    table.columns = [rate_label(r) for r in table.columns]
    table.index = table.index.astype(int)
    return table.rename_axis("nodes").reset_index()


#: A UDP flow whose sender put less than this share of the offered rate on the wire was limited by the
#: host (CPU), not the network: its zero loss says nothing about the offered rate.
OFFERED_MIN_FRACTION = 0.95


def offered_fraction(flows: pd.DataFrame) -> pd.Series:
    """Per UDP flow: sent rate / offered rate (NaN where either is unknown, e.g. older results)."""
    if "sent_bits_per_second" not in flows:
        return pd.Series(math.nan, index=flows.index)
    rate = pd.to_numeric(flows["rate_bps"], errors="coerce")
    return pd.to_numeric(flows["sent_bits_per_second"], errors="coerce") / rate


def table_largest_lossfree(df: pd.DataFrame, basis: str = "window") -> pd.DataFrame:
    """Thesis Table 2: per UDP rate, the largest size at which every flow had zero loss.

    As in the thesis, a smaller size with loss does not disqualify a larger loss-free one. A size
    counts as loss-free only if all its flows (all repeats) are ok and have a loss figure of 0, and
    their senders offered the load (median sent/offered >= OFFERED_MIN_FRACTION where it is known).
    Columns: rate, largest_lossfree_nodes (<NA> if none), note ('>= N (largest tested)',
    'no lossless network', or 'no loss figures' when no flow of that rate has one).
    """
    _, loss_col = _columns(basis)
    udp = df[df["protocol"] == "udp"]
    rows = []
    for rate_bps, group in udp.groupby("rate_bps", sort=True):
        lossfree = [
            size for size, flows in group.groupby("size")
            if flows["ok"].astype(bool).all() and flows[loss_col].notna().all() and (flows[loss_col] == 0).all()
            and not offered_fraction(flows).median() < OFFERED_MIN_FRACTION
        ]
        largest = max(lossfree) if lossfree else None
        if largest is None:
            note = "no lossless network" if group[loss_col].notna().any() else "no loss figures"
        elif largest == group["size"].max():
            note = f">= {int(largest)} (largest tested)"
        else:
            note = ""
        unmeasured = [f"n={int(size)} {reason}" for size, flows in group.groupby("size")
                      if (largest is None or size > largest) and (reason := gap_reason(flows, basis))]
        if unmeasured and group[loss_col].notna().any():  # a larger size might have been loss-free: say so
            note = "; ".join(([note] if note else []) + unmeasured)
        rows.append({"rate": rate_label(rate_bps), "largest_lossfree_nodes": largest, "note": note})
    table = pd.DataFrame(rows, columns=["rate", "largest_lossfree_nodes", "note"])
    table["largest_lossfree_nodes"] = table["largest_lossfree_nodes"].astype("Int64")
    return table


def load_reference(name: str) -> pd.DataFrame:
    """A thesis table from analysis/reference/thesis/: one of REFERENCE_TABLES ('.csv' optional)."""
    stem = name.removesuffix(".csv")
    if stem not in REFERENCE_TABLES:
        raise SpecError(f"reference table {name!r}: expected one of {', '.join(REFERENCE_TABLES)}")
    path = REFERENCE_DIR / f"{stem}.csv"
    if not path.is_file():
        raise SpecError(f"reference table {name!r}: {path} not found (run from a source checkout)")
    table = pd.read_csv(path)
    if "largest_lossfree_nodes" in table:
        table["largest_lossfree_nodes"] = table["largest_lossfree_nodes"].astype("Int64")
        table["note"] = table["note"].fillna("")
    return table
