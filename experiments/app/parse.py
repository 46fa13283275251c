"""The app run's records -> tidy tables (pure file work): every node's peers/plans records joined into
peers.csv and plans.csv with t = seconds since t0, and agreement.csv (per cycle, the share of nodes on the
most common plan)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def tidy_tables(run_dir: Path) -> dict[str, Path]:
    """peers.csv, plans.csv (all nodes, with t = seconds since t0) and agreement.csv in the run folder."""
    run_dir = Path(run_dir)
    t0 = json.loads((run_dir / "run.json").read_text())["t0"] if (run_dir / "run.json").exists() else 0.0
    out = {}
    for kind, tcol in (("peers", "window_start"), ("plans", "cycle_ts")):
        frames = [pd.read_csv(p) for p in sorted((run_dir / "nodes").glob(f"*.{kind}.csv")) if p.stat().st_size]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if not df.empty:
            df.insert(0, "t", (df[tcol] - t0).round(3))
        out[kind] = run_dir / f"{kind}.csv"
        df.to_csv(out[kind], index=False)
    plans = pd.read_csv(out["plans"]) if out["plans"].stat().st_size > 1 else pd.DataFrame()
    if out["peers"].stat().st_size > 1:
        peers = pd.read_csv(out["peers"])
        peers["unsent"] = unsent_samples(peers, plans)
        peers.to_csv(out["peers"], index=False)
    out["agreement"] = run_dir / "agreement.csv"
    agreement_per_cycle(plans).to_csv(out["agreement"], index=False)
    return out


def unsent_samples(peers, plans) -> "Any":
    """Per peers row (a receiver's window of one sender): samples its sender never sent because it ran late
    and skipped those cycles (plans.csv: a row's `skipped` counts the cycles right after it). Expected minus
    this is what the network was given to deliver."""
    unsent = np.zeros(len(peers), dtype=int)
    if plans.empty or "skipped" not in plans or not (plans["skipped"] > 0).any():
        return unsent
    period = float((plans["cycle_ts"] / plans["cycle"]).median())
    late = plans[plans["skipped"] > 0]
    skipped = {node: np.sort(np.concatenate([np.arange(r.cycle + 1, r.cycle + 1 + r.skipped) for r in g.itertuples()]))
               for node, g in late.groupby("node")}
    first = np.rint(peers["window_start"].to_numpy() / period).astype(np.int64)
    cycles = np.rint(peers["window_s"].to_numpy() / period).astype(np.int64)
    topics = peers["expected"].to_numpy() // np.maximum(cycles, 1)
    for sender, rows in peers.groupby("peer").indices.items():
        cyc = skipped.get(sender)
        if cyc is not None:
            n = np.searchsorted(cyc, first[rows] + cycles[rows]) - np.searchsorted(cyc, first[rows])
            unsent[rows] = n * topics[rows]
    return unsent


def agreement_per_cycle(plans) -> "Any":
    """Per cycle: nodes that made a plan, and the share of them holding the most common plan."""
    if plans.empty:
        return pd.DataFrame(columns=["cycle", "t", "nodes", "agreement"])
    g = plans.groupby("cycle")
    return pd.DataFrame({"t": g["t"].first(), "nodes": g["digest"].size(),
                         "agreement": g["digest"].agg(lambda s: s.value_counts().iloc[0] / len(s))}).reset_index()
