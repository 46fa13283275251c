#!/usr/bin/env python3
"""Benchmark the DDS work (issue 5): the reference app's delivery ratio and latency at 10 Hz on 8, 32 and 100
nodes (netns), and ddsperf throughput between 2 nodes, containers ÷ netns backend.

Everything runs into results/bench-dds-<timestamp>/ and Markdown tables are printed for BENCHMARKS.md.
Usage: bench_dds.py [--app-sizes 8,32,100] [--app-seconds 20] [--ddsperf-backends netns,compose] [--skip-app]
                    [--skip-ddsperf]
Subnets 10.150-10.151 (app) and 10.156-10.157 (ddsperf); swarm names start with dd.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from experiments.app.model import experiment_from_dict as app_experiment
from experiments.app.run import run_app_experiment
from swarm.errors import NodeFailed
from experiments.ddsperf.model import experiment_from_dict as ddsperf_experiment
from experiments.ddsperf.run import run_ddsperf_sweep
from analysis.ddsperf import summary_table
from analysis.pages import markdown_table
from experiments.store import HostSampler, ResultsStore, host_facts

ROOT = Path(__file__).resolve().parents[1]
NETS = {"isl": {"subnet": "10.150.0.0/24"}, "ground": {"subnet": "10.151.0.0/24"}}


def bench_app(size: int, seconds: float, out: Path) -> dict:
    """One app run without faults; steady-state figures over the windows after t0."""
    exp = app_experiment({"type": "app", "name": f"dd-bench-app-n{size}", "nodes": size, "duration": seconds,
                          "warmup": 5 + 0.1 * size, "backend": "netns", "app": {"rate_hz": 10},
                          "swarm": {"networks": NETS}})
    t = time.monotonic()
    try:
        with HostSampler() as sampler:
            run_dir = run_app_experiment(exp, out, message=lambda m: print(f"  {m}", flush=True))
    except NodeFailed as exc:  # the size this host cannot carry: say why, go on with the others
        print(f"  {exc}\n  --- its log:\n{exc.logs}", flush=True)
        return {"nodes": size, "error": str(exc), "wall_s": round(time.monotonic() - t, 1), "run_dir": ""}
    peers = pd.read_csv(run_dir / "peers.csv")
    steady = peers[(peers["t"] >= 0) & (peers["t"] + peers["window_s"] <= seconds)]
    plans = pd.read_csv(run_dir / "plans.csv")
    plans = plans[(plans["t"] >= 0) & (plans["t"] < seconds)]
    agreement = pd.read_csv(run_dir / "agreement.csv")
    agreement = agreement[(agreement["t"] >= 0) & (agreement["t"] < seconds)]
    pairs = steady.groupby(["node", "peer"])["delivery_ratio"].mean()
    row = {"nodes": size, "pairs": len(pairs), "delivery_ratio": round(steady["received"].sum() / steady["expected"].sum(), 4),
           "pairs_full": f"{int((pairs >= 1).sum())}/{len(pairs)}", "worst_pair": round(pairs.min(), 4),
           "latency_p50_ms": round(steady["latency_p50_ms"].median(), 2),
           "latency_p95_ms": round(steady["latency_p95_ms"].median(), 2),
           "latency_p95_worst_ms": round(steady["latency_p95_ms"].max(), 1),
           "latency_max_ms": round(steady["latency_max_ms"].max(), 1),
           "age_mean_ms": round(steady["age_mean_ms"].mean(), 1),
           "agreement_mean": round(agreement["agreement"].mean(), 3),
           "cycles_skipped_pct": round(100 * plans["skipped"].sum() / max(1, len(plans) + plans["skipped"].sum()), 2),
           **sampler.summary(), "wall_s": round(time.monotonic() - t, 1), "run_dir": str(run_dir)}
    print(json.dumps(row), flush=True)
    return row


def bench_ddsperf(backend: str, out: Path, seconds: float) -> pd.DataFrame:
    exp = ddsperf_experiment({"type": "ddsperf", "name": f"dd-bench-perf-{backend}", "sizes": [2],
                              "sample_sizes": ["64", "1k", "8k", "64k"], "rates": ["inf"], "measures": ["throughput", "latency"],
                              "duration": seconds, "backend": backend, "settle": 1,
                              "swarm": {"networks": {"isl": {"subnet": "10.156.0.0/24"}, "ground": {"subnet": "10.157.0.0/24"}}}})
    store = ResultsStore.create(out, exp, host_facts())
    run_ddsperf_sweep(exp, store, progress=lambda d, n, w: print(f"  [{d}/{n}] {w}", flush=True),
                      message=lambda m: print(f"  {m}", flush=True))
    table = summary_table(pd.read_csv(store.dir / "ddsperf.csv"))
    table["backend"] = backend
    return table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--app-sizes", default="8,32,100")
    ap.add_argument("--app-seconds", type=float, default=20)
    ap.add_argument("--ddsperf-backends", default="netns,compose")
    ap.add_argument("--ddsperf-seconds", type=float, default=5)
    ap.add_argument("--skip-app", action="store_true")
    ap.add_argument("--skip-ddsperf", action="store_true")
    args = ap.parse_args()
    out = ROOT / "results" / f"bench-dds-{time.strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True)
    if not args.skip_app:
        rows = [bench_app(int(n), args.app_seconds, out / "app") for n in args.app_sizes.split(",")]
        table = pd.DataFrame(rows).drop(columns=["run_dir"])
        table.to_csv(out / "app.csv", index=False)
        print("\n## Reference app at 10 Hz (netns)\n")
        print(markdown_table(table))
    if not args.skip_ddsperf:
        tables = [bench_ddsperf(b, out / "ddsperf", args.ddsperf_seconds) for b in args.ddsperf_backends.split(",")]
        both = pd.concat(tables)
        both.to_csv(out / "ddsperf.csv", index=False)
        thr = both[both["measure"] == "throughput"].pivot(index="sample_size", columns="backend", values="mbps_median")
        lat = both[both["measure"] == "latency"].pivot(index="sample_size", columns="backend", values="rtt_p50_us")
        for name, t in (("throughput Mb/s", thr), ("round trip p50 us", lat)):
            if {"netns", "compose"} <= set(t.columns):
                t["compose/netns"] = (t["compose"] / t["netns"]).round(3)
            print(f"\n## ddsperf, 2 nodes, {name}\n")
            print(markdown_table(t.reset_index()))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
