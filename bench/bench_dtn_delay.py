#!/usr/bin/env python3
"""Benchmark TCPCL over long one-way delays (issue 26): goodput at 2 s and 4 s one-way ÷ goodput at 0 s,
100 kB bundles, one hop sat01 -> ground, `cla: tcp`, bundles offered as fast as the sending agent accepts.

dtn7's TCPCL as published sends the next bundle only after the previous one's final XFER_ACK, over one
session per peer: at most one bundle per round trip. images/dtn/dtn7-0.21.0.patch keeps up to `window`
transfers in flight (the framework sizes it from the links, `--windows` sets it: one run per window). The table
gives the one-in-flight ceiling (bundle bits / RTT) beside each measured figure, so the ratio to 0 s is read
against what the protocol allows, not against the link.

Goodput = payload delivered / (first bundle created .. last delivered), from the run's tests.csv (the
session's set-up, ~3 round trips, is inside that span); "session up" = the bundles after the first over the
time from the first delivery to the last (bundles.csv), the figure to hold against the ceiling.
Usage: bench_dtn_delay.py [--delays 0,2,4] [--duration 3] [--drain 60] [--bundle 100kB] [--backend netns]
                          [--rate max|N] [--windows 1,8,32]   (window: dtn.tcpcl.window; none: the framework's)
Runs into results/bench-dtn-delay-<timestamp>/ and prints a Markdown table for BENCHMARKS.md.
Subnets 10.184-185.x (helper dtn's range); the swarm is named dtn-bdelay.
"""
from __future__ import annotations

import argparse
import platform
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from analysis.dtn import write_dtn_report
from experiments.dtn.model import experiment_from_dict
from experiments.dtn.run import run_dtn_experiment
from experiments.store import ResultsStore, host_facts
from swarm.spec.dtn import parse_size

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays", default="0,2,4", help="one-way delays, s (0 = no delay profile)")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--drain", type=float, default=60.0)
    ap.add_argument("--bundle", default="100kB")
    ap.add_argument("--backend", default="netns")
    ap.add_argument("--rate", default="max", help="bundles/s offered per flow, or max")
    ap.add_argument("--windows", default="", help="TCPCL windows, one run each (empty: the framework's)")
    args = ap.parse_args()
    windows = [int(w) for w in args.windows.split(",")] if args.windows else [None]
    rows = []
    for window in windows:
        rows += run_one(args, window)
    print("| window | one-way delay | bundles sent | delivered | goodput | bundles/s | ÷ goodput at 0 s | "
          "session up: goodput | session up: bundles/s | 1 bundle / RTT ceiling | session ÷ ceiling | "
          "latency min / p50 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for line in rows:
        print(line)


def run_one(args: argparse.Namespace, window: int | None) -> list[str]:
    """One experiment (every delay) at one TCPCL window; its table rows."""
    delays = [float(d) for d in args.delays.split(",")]
    profiles = ["none" if d == 0 else {"delay": f"{d:g}s"} for d in delays]
    rate = args.rate if args.rate == "max" else float(args.rate)
    doc = {"type": "dtn", "name": "dtn-bdelay", "backend": args.backend, "pattern": "all-to-ground", "sizes": [1],
           "bundle_sizes": [args.bundle], "rates": [rate], "clas": ["tcp"], "routings": ["epidemic"],
           "profiles": profiles, "duration": f"{args.duration:g}s", "drain": f"{args.drain:g}s",
           "swarm": {"networks": {"isl": {"subnet": "10.184.1.0/24"}, "ground": {"subnet": "10.185.1.0/24"}}}}
    if window is not None:
        doc["dtn"] = {"tcpcl": {"window": window}}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "results" / f"bench-dtn-delay-{stamp}"
    exp = experiment_from_dict(doc, "bench")
    store = ResultsStore.create(out, exp, host_facts())
    print(f"TCPCL over {args.delays} s one-way, {args.bundle} bundles at {args.rate}/s, window "
          f"{window or 'framework'}, {args.duration:g} s + {args.drain:g} s drain", flush=True)
    run_dtn_experiment(exp, store, message=lambda m: print(f"  {m}", flush=True))
    write_dtn_report(store.dir)
    tests = pd.read_csv(store.dir / "tests.csv")
    bundles = pd.read_csv(store.dir / "bundles.csv")
    bits = parse_size(args.bundle) * 8
    base = None
    rows = []
    for delay, profile in zip(delays, profiles):
        label = profile if isinstance(profile, str) else f"delay={profile['delay']}"
        t = tests[tests["profile"] == label].iloc[0]
        goodput = float(t["goodput_bps"]) if pd.notna(t["goodput_bps"]) else 0.0
        base = goodput if delay == 0 else base
        ceiling = bits / (2 * delay) if delay > 0 else float("nan")
        # once the session is up: bundles after the first over the time between the first and last delivery
        got = bundles[(bundles["test_id"] == t["test_id"]) & (bundles["delivered"] == True)]  # noqa: E712
        ts = sorted(got["delivered_ts"].astype(float))
        steady = (len(ts) - 1) * bits / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else float("nan")
        rows.append((delay, int(t["bundles_sent"]), int(t["bundles_delivered"]), goodput,
                     goodput / base if base else float("nan"), ceiling, steady,
                     t["latency_min_s"], t["latency_p50_s"]))
    print(f"\nrun folder: {store.dir}")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {platform.release()}\n", flush=True)
    out = []
    for d, sent, got, gp, ratio, ceil, steady, lmin, l50 in rows:
        ceil_s = "-" if d == 0 else f"{ceil / 1e3:.0f} kbit/s"
        of_s = "-" if d == 0 else f"{steady / ceil:.2f}"
        out.append(f"| {window or 'framework'} | {d:g} s | {sent} | {got} | {gp / 1e3:,.1f} kbit/s | {gp / bits:,.1f} | "
                   f"{ratio:.5f} | {steady / 1e3:,.1f} kbit/s | {steady / bits:,.1f} | {ceil_s} | {of_s} | "
                   f"{float(lmin):.2f} / {float(l50):.2f} s |")
    return out


if __name__ == "__main__":
    main()
