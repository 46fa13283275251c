#!/usr/bin/env python3
"""Benchmark the sweep machinery (issue 3): start skew, concurrent window, host CPU and memory, and the
container overhead as compose ÷ netns ratios, on this host.

Runs the experiments named on the command line (default: bench-udp32 and bench-tcp) on each backend
into results/bench-<timestamp>/ and prints Markdown tables for BENCHMARKS.md.
Usage: bench_sweep.py [--experiments bench-udp32,bench-tcp] [--backends netns,compose]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from analysis.tables import summarize
from swarm.units import rate_label
from experiments.traffic.model import load_experiment
from analysis.pages import markdown_table
from experiments.store import ResultsStore, host_facts
from experiments.traffic.run import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def run(name: str, backend: str, out: Path) -> Path:
    path = ROOT / "bench" / f"{name}.yaml"  # the bench-only experiments; any other name: experiments/
    exp = load_experiment(path if path.exists() else ROOT / "experiments" / f"{name}.yaml")
    store = ResultsStore.create(out / backend, exp, host_facts())
    t = time.monotonic()
    run_sweep(exp, store, backend=backend, message=lambda m: print(f"  {m}", flush=True),
              progress=lambda d, n, w: print(f"  [{d}/{n}] {w}", flush=True))
    print(f"{name} on {backend}: {time.monotonic() - t:.0f} s -> {store.dir}", flush=True)
    return store.dir


def per_test(run_dir: Path, backend: str) -> pd.DataFrame:
    tests = pd.read_csv(run_dir / "tests.csv")
    tests["backend"] = backend
    tests["rate"] = tests["rate_bps"].map(lambda r: rate_label(r) if pd.notna(r) and r != "" else "")
    tests["skew_pct"] = 100 * tests["skew_s"] / tests["duration_s"]
    return tests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiments", default="bench-udp32,bench-tcp")
    ap.add_argument("--backends", default="netns,compose")
    args = ap.parse_args()
    out = ROOT / "results" / f"bench-{time.strftime('%Y%m%dT%H%M%S')}"
    tables, summaries = [], []
    for name in args.experiments.split(","):
        for backend in args.backends.split(","):
            d = run(name, backend, out / name)
            tables.append(per_test(d, backend))
            s = summarize(pd.read_csv(d / "flows.csv"))
            s["backend"], s["experiment"] = backend, name
            summaries.append(s)
    tests = pd.concat(tables)
    cols = ["backend", "test_id", "flows", "flows_ok", "skew_s", "skew_pct", "window_s", "window_fraction",
            "cpu_busy_pct", "mem_used_peak_mib", "setup_s", "wall_s"]
    print("\n## Per test\n")
    print(markdown_table(tests[cols]))
    summary = pd.concat(summaries)
    print("\n## Summary (window basis)\n")
    print(markdown_table(summary))
    if {"netns", "compose"} <= set(args.backends.split(",")):
        key = ["experiment", "protocol", "size", "rate_bps"]
        summary["rate_bps"] = summary["rate_bps"].fillna(0)  # TCP has no offered rate; keep its rows
        wide = summary.pivot_table(index=key, columns="backend",
                                   values=["system_bps", "max_loss_pct", "median_loss_pct"], aggfunc="first")
        print("\n## compose ÷ netns\n")
        ratio = pd.DataFrame({
            "system bandwidth ratio": wide[("system_bps", "compose")] / wide[("system_bps", "netns")],
            "max loss compose %": wide[("max_loss_pct", "compose")], "max loss netns %": wide[("max_loss_pct", "netns")],
        })
        print(markdown_table(ratio.reset_index()))
    print(f"\nhost: {host_facts()}")


if __name__ == "__main__":
    main()
