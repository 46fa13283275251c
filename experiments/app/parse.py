"""The app run's records -> tidy tables (pure file work): every node's peers/plans records joined into
peers.csv and plans.csv with t = seconds since t0, and agreement.csv (per cycle, the share of nodes on the
most common plan)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    out["agreement"] = run_dir / "agreement.csv"
    agreement_per_cycle(plans).to_csv(out["agreement"], index=False)
    return out


def agreement_per_cycle(plans) -> "Any":
    """Per cycle: nodes that made a plan, and the share of them holding the most common plan."""
    if plans.empty:
        return pd.DataFrame(columns=["cycle", "t", "nodes", "agreement"])
    g = plans.groupby("cycle")
    return pd.DataFrame({"t": g["t"].first(), "nodes": g["digest"].size(),
                         "agreement": g["digest"].agg(lambda s: s.value_counts().iloc[0] / len(s))}).reset_index()
