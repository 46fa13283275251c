#!/usr/bin/env python3
"""Benchmark the DTN agents (issue 13): dtn7-rs's overhead over plain TCP, its bundle rate against seed 001's
HDTN-on-Raspberry-Pi-4 figures, and a 32-spacecraft telemetry swarm through epidemic routing.

1. overhead: one hop sat01 -> ground, 100 kB bundles sent as fast as the sending agent accepts (5 s, or 10 x the
   one-way delay), per CLA,
   against iperf3 TCP over the same namespaces and link (5 s), on an unlimited veth link and on a rate-limited
   one (`--link-rates`, HTB here), where the link and not the host is the bottleneck. Goodput = payload delivered / (first bundle
   created .. last delivered). With `--delays` (one-way, e.g. 0,0.3,2) each delay is a link profile; a delay
   this host's impairment engine cannot apply is reported as unavailable.
2. bundle rate: the same max-rate tests, bundles/s per CLA, beside seed 001's 659 (TCPCL) / 895 (STCP) /
   142 (LTP) bundles/s (analysis/reference/dtn/seed001_hdtn_rpi4_table1.csv).
3. scale: 32 spacecraft + ground, each spacecraft 1 bundle/s of 1 kB to ground (epidemic, tcp, static peers:
   a full mesh of agents), 30 s: delivery ratio, latency p50/p95, host CPU; then the same with every
   spacecraft-ground link up 50 % of the time (periodic contacts: 10 s of every 20 s, staggered): delivered
   eventually?, latency, peak store.

Everything runs into results/bench-dtn-<timestamp>/ (one run folder per part, the report of each) and prints
Markdown tables for BENCHMARKS.md.
Usage: bench_dtn.py [--parts overhead,scale] [--clas tcp,mtcp,http] [--delays 0] [--link-rates 0,100Mbit] [--scale-size 32]
                    [--scale-seconds 30] [--backend netns]
Subnets 10.210-10.219.x (issue 13's range); swarm names start with dtn-b.
"""
from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from analysis.dtn import write_dtn_report
from analysis.pages import markdown_table
from experiments.dtn.model import experiment_from_dict
from experiments.dtn.run import run_dtn_experiment
from experiments.store import ResultsStore, host_facts
from swarm.errors import SpecError
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

ROOT = Path(__file__).resolve().parents[1]
SEED001 = ROOT / "analysis" / "reference" / "dtn" / "seed001_hdtn_rpi4_table1.csv"


def nets(k: int) -> dict:
    return {"isl": {"subnet": f"10.21{k}.2.0/24"}, "ground": {"subnet": f"10.21{k + 1}.2.0/24"}}


def run_dtn(doc: dict, out: Path) -> pd.DataFrame:
    exp = experiment_from_dict(doc, "bench")
    store = ResultsStore.create(out, exp, host_facts())
    run_dtn_experiment(exp, store, message=lambda m: print(f"  {m}", flush=True))
    write_dtn_report(store.dir)
    print(f"  run folder: {store.dir}", flush=True)
    return pd.read_csv(store.dir / "tests.csv")


def iperf3_tcp(seconds: float, profile: dict | None, backend: str) -> float:
    """iperf3 TCP goodput (bit/s, receiver side) sat01 -> ground on a 2-node swarm with the same networks."""
    data = {"name": "dtn-b-iperf", "backend": backend, "node_list": [{"name": "sat01"}, {"name": "ground"}],
            "networks": nets(0)}
    if profile:
        data["links"] = {"default": profile}
    swarm = Swarm(spec_from_dict(data), backend=backend)
    swarm.down()
    try:
        swarm.up()
        ground = swarm.node("ground")
        swarm.exec("ground", ["iperf3", "-s", "-D", "-1", "-B", ground.isl_ip, "-p", "5201"])
        time.sleep(0.5)
        res = swarm.exec("sat01", ["iperf3", "-c", ground.isl_ip, "-p", "5201", "-t", f"{seconds:g}", "-J"],
                         timeout=seconds + 60)
        return float(json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"])
    finally:
        swarm.down()


def overhead(args, out: Path) -> pd.DataFrame:
    rows = []
    combos = [(float(d), r) for d in args.delays.split(",") for r in args.link_rates.split(",")]
    for delay, rate in combos:
        profile = {k: v for k, v in (("delay", f"{delay:g}s" if delay else None),
                                     ("rate", rate if rate not in ("0", "") else None)) if v}
        seconds = max(5.0, 10 * delay)  # at least 5 round trips of the link
        try:
            tcp = iperf3_tcp(seconds, profile or None, args.backend)
        except SpecError as exc:
            print(f"delay {delay:g} s, rate {rate}: unavailable on this host: {exc}", flush=True)
            rows.append({"one_way_delay_s": delay, "link_rate": rate, "cla": "-",
                         "note": f"unavailable: {str(exc)[:120]}"})
            continue
        doc = {"type": "dtn", "name": "dtn-b-overhead", "backend": args.backend, "pattern": "all-to-ground",
               "sizes": [1], "bundle_sizes": ["100kB"], "rates": ["max"], "clas": args.clas.split(","),
               "routings": ["epidemic"], "profiles": [profile or "none"], "duration": f"{seconds:g}s",
               "drain": f"{max(20, 4 * delay + 10):g}s", "swarm": {"networks": nets(0)}}
        tests = run_dtn(doc, out)
        for t in tests.itertuples():
            rows.append({"one_way_delay_s": delay, "link_rate": rate, "seconds": seconds, "cla": t.cla,
                         "bundles": t.bundles_delivered,
                         "sent": t.bundles_sent, "dtn_goodput_mbps": t.goodput_bps / 1e6,
                         "tcp_goodput_mbps": tcp / 1e6, "dtn_over_tcp": t.goodput_bps / tcp,
                         "bundle_rate": t.bundle_rate, "latency_p50_s": t.latency_p50_s,
                         "latency_p95_s": t.latency_p95_s, "cpu_busy_pct": t.cpu_busy_pct})
    return pd.DataFrame(rows)


def bundle_rates(over: pd.DataFrame) -> pd.DataFrame:
    seed = pd.read_csv(SEED001)
    zero = over[(over["one_way_delay_s"] == 0) & (over["cla"] != "-") & (over["link_rate"].astype(str) == "0")]
    rows = [{"agent": f"dtn7-rs {r.cla} (this host, 2 shared cores)", "bundles_per_s": r.bundle_rate,
             "payload_mbps": r.dtn_goodput_mbps} for r in zero.itertuples()]
    for r in seed.itertuples():
        rows.append({"agent": f"HDTN {r.cla} (seed 001, Raspberry Pi 4)", "bundles_per_s": r.bundle_rate_per_s,
                     "payload_mbps": r.payload_mbps})
    table = pd.DataFrame(rows)
    best = zero["bundle_rate"].max() if len(zero) else float("nan")
    table["ours_best_over_this"] = best / table["bundles_per_s"]
    return table


def scale(args, out: Path) -> pd.DataFrame:
    size, seconds = args.scale_size, args.scale_seconds
    base = {"type": "dtn", "backend": args.backend, "pattern": "all-to-ground", "sizes": [size],
            "bundle_sizes": ["1kB"], "rates": [1], "clas": ["tcp"], "routings": ["epidemic"],
            "duration": f"{seconds:g}s", "store_interval": "1s"}
    rows = []
    for label, extra in (("always connected", {"name": "dtn-b-scale", "drain": "30s", "swarm": {"networks": nets(2)}}),
                         ("50 % contact to ground", {"name": "dtn-b-scale50", "drain": "60s",
                                                     "contacts": {"periodic": {"period": "20s", "up": "10s",
                                                                               "stagger": "0.625s"}, "others": "keep"},
                                                     "swarm": {"networks": nets(4)}})):
        t0 = time.monotonic()
        tests = run_dtn({**base, **extra}, out)
        t = tests.iloc[0]
        rows.append({"case": label, "spacecraft": size, "bundles_sent": t.bundles_sent,
                     "delivered": t.bundles_delivered, "delivery_ratio": t.delivery_ratio,
                     "latency_p50_s": t.latency_p50_s, "latency_p95_s": t.latency_p95_s, "latency_max_s": t.latency_max_s,
                     "store_peak_bundles": t.store_peak_bundles, "cpu_busy_pct": t.cpu_busy_pct,
                     "cpu_busy_max_pct": t.cpu_busy_max_pct, "mem_used_peak_mib": t.mem_used_peak_mib,
                     "agents_ready_s": t.agents_ready_s, "wall_s": round(time.monotonic() - t0, 1)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="overhead,scale")
    ap.add_argument("--clas", default="tcp,mtcp,http")
    ap.add_argument("--delays", default="0")
    ap.add_argument("--link-rates", default="0,100Mbit", help="link rate profiles (0: unlimited)")
    ap.add_argument("--scale-size", type=int, default=32)
    ap.add_argument("--scale-seconds", type=float, default=30)
    ap.add_argument("--backend", default="netns")
    args = ap.parse_args()
    out = ROOT / "results" / f"bench-dtn-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}"
    out.mkdir(parents=True)
    print(f"results in {out}", flush=True)
    parts = args.parts.split(",")
    if "overhead" in parts:
        over = overhead(args, out)
        over.to_csv(out / "overhead.csv", index=False)
        print("\n## DTN goodput / TCP goodput (100 kB bundles, one hop)\n")
        print(markdown_table(over))
        rates = bundle_rates(over)
        rates.to_csv(out / "bundle_rates.csv", index=False)
        print("\n## Bundle rate vs seed 001 (HDTN, Raspberry Pi 4)\n")
        print(markdown_table(rates))
    if "scale" in parts:
        sc = scale(args, out)
        sc.to_csv(out / "scale.csv", index=False)
        print(f"\n## {args.scale_size} spacecraft x 1 bundle/s of 1 kB to ground, epidemic\n")
        print(markdown_table(sc))


if __name__ == "__main__":
    main()
