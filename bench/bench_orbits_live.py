#!/usr/bin/env python3
"""Benchmark: a netns swarm's links following an orbit plan live (netem.runtime.orbits.LinkTimelineDriver).

Per size N: a Walker delta of N - G satellites at 550 km / 53 deg plus G ground stations (G = 1 for N < 32,
2 below 100, 4 from 100), ISLs within 5000 km, nearest 4 (mutual), ISL rate from a link budget (so links
change rate as they stretch: tc work on the sender, not only nft on the receiver), ground links above 10 deg.
The swarm (names orb-bench-N, subnets 10.234-235.x unless --subnets) comes up, the driver applies the initial state (every pair
down unless up at t=0) and then follows `--duration` of orbit at 1 s steps in real time (`--speedup` to
compress). Reported: initial apply time, links changing per step, per-step lag (due -> last update of the
step applied on both its nodes) p50/p99/max, the share of steps finished before the next step was due,
coalesced steps, per-update lag p50/p99. With the userspace engine the plan is handed to the engine, which applies
each change at its instant and measures its lag (applied_by "engine"; SWARM_ORBITS_ENGINE_SCHEDULE=0: the driver
applies each step, the earlier figures). `--engine nft` pins the nft engine (and `netem` kernel NetEm where
sch_netem exists): each node's tc and nft changes then go to one long-lived `tc -batch` / `nft -i` process per
node (SWARM_ORBITS_SHELLS=0: a process per change, the figures before). Prints a Markdown table for BENCHMARKS.md; links.csv of each size
goes to results/bench-orbits-live-<time>/.

    python bench/bench_orbits_live.py --sizes 16 32 --duration 120s
    python bench/bench_orbits_live.py --sizes 100 --duration 120s
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from analysis.orbits import lag_summary  # noqa: E402
from netem.orbits.planner import plan as make_plan  # noqa: E402
from netem.spec.orbits import parse_orbits  # noqa: E402
from netem.orbits.records import LINK_COLUMNS  # noqa: E402
from netem.runtime.orbits import LinkTimelineDriver, links_csv_writer  # noqa: E402
from swarm.runtime.swarm import Swarm  # noqa: E402
from swarm.spec.model import spec_from_dict  # noqa: E402

STATIONS = [("gs01", 47.4, 8.5), ("gs02", 37.9, -75.5), ("gs03", 30.4, 131.0), ("gs04", -3.0, 40.2)]


def orbits_for(n: int, duration: str) -> dict:
    g = 1 if n < 32 else 2 if n < 100 else 4
    sats = n - g
    planes = next(p for p in (8, 6, 5, 4, 3, 2, 1) if sats % p == 0 and sats // p >= 2)
    return {"epoch": "2026-03-20T12:00:00Z", "duration": duration, "step": "1s",
            "satellites": [{"walker": {"total": sats, "planes": planes, "phasing": 1, "altitude": "550km",
                                       "inclination": 53, "prefix": "sat"}}],
            "ground_stations": [{"name": name, "lat": lat, "lon": lon} for name, lat, lon in STATIONS[:g]],
            "links": {"isl": {"max_range": "5000km", "max_degree": 4,
                              "rate": {"bandwidth": "50MHz", "snr": "10dB", "at": "2000km", "max": "200Mbit",
                                       "step": "5Mbit"}},
                      "ground": {"min_elevation": 10, "rate": "50Mbit"}}}


def bench(n: int, duration: str, speedup: float, out: Path, workers: int, third: int = 234,
          engine: str | None = None) -> dict:
    plan = make_plan(parse_orbits(orbits_for(n, duration)))
    sats = sum(1 for k in plan.kinds.values() if k == "sat")
    doc = {"name": f"orb-bench-{n}", "backend": "netns",
           "groups": [{"prefix": "sat", "count": sats}, {"prefix": "gs", "count": n - sats}],
           "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}}}
    if engine:
        doc["links"] = {"engine": engine}
    spec = spec_from_dict(doc)
    swarm = Swarm(spec)
    swarm.down()
    t_up = time.monotonic()
    swarm.up(ready_timeout=60 + 2 * n)
    t_up = time.monotonic() - t_up
    rows: list[dict] = []
    record = links_csv_writer(out / f"links-{n}.csv", rows)

    try:
        driver = LinkTimelineDriver(swarm.links, plan, speedup=speedup, workers=workers, on_rows=record,
                                    message=lambda m: print(m, file=sys.stderr))
        load0 = os.getloadavg()[0]
        summary = driver.run()
        driver.close()
    finally:
        swarm.down()
    links = pd.DataFrame(rows, columns=LINK_COLUMNS)
    lag = lag_summary(links, plan.step / speedup)
    changed = plan.timeline[plan.timeline["t_start"] > 0].groupby("t_start").size()
    live = len(plan.links())
    return {"nodes": n, "up_s": round(t_up, 1), "pairs_ever_up": live, "initial_s": summary["initial_s"],
            "steps": int(plan.stats["steps"]), "steps_with_changes": int(len(changed)),
            "changes_per_step_mean": round(float(changed.mean()), 2) if len(changed) else 0,
            "changes_per_step_max": int(changed.max()) if len(changed) else 0,
            "changed_share_of_live_links_max": round(float(changed.max()) / max(1, live), 3) if len(changed) else 0,
            "step_lag_p50_ms": summary["step_lag_ms_p50"], "step_lag_p99_ms": summary["step_lag_ms_p99"],
            "step_lag_max_ms": round(summary["step_lag_ms_max"] or 0, 1),
            "before_next": summary["steps_finished_before_next"], "coalesced": summary["coalesced_steps"],
            "update_lag_p50_ms": round(lag.get("update_lag_ms_p50", float("nan")), 1),
            "update_lag_p99_ms": round(lag.get("update_lag_ms_p99", float("nan")), 1),
            "failed": lag.get("failed", 0), "engine": summary["engine"], "load_before": round(load0, 2),
            "tc_in_place": summary.get("tc_in_place_commands"), "tc_rebuilt": summary.get("tc_rebuilt_commands"),
            "nft": summary.get("nft_commands"), "applied_by": summary.get("applied_by"),
            "shell_processes": summary.get("shell_processes"), "shell_batches": summary.get("shell_batches"),
            "shell_batch_ms_p50": summary.get("shell_batch_ms_p50"), "shell_batch_ms_p90": summary.get("shell_batch_ms_p90")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--duration", default="120s", help="orbit time per size (default 120s)")
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--subnets", type=int, default=234, metavar="THIRD",
                    help="ISL subnet 10.THIRD.0.0/24, ground 10.THIRD+1.0.0/24 (default 234)")
    ap.add_argument("--engine", default=None, help="pin the link engine (netem, nft, userspace; default: the probe's)")
    args = ap.parse_args()
    out = REPO / "results" / f"bench-orbits-live-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    out.mkdir(parents=True)
    print(f"host: {platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"duration {args.duration} at x{args.speedup:g}, workers {args.workers}; links.csv in {out}")
    cols = ["nodes", "up_s", "pairs_ever_up", "initial_s", "steps", "steps_with_changes", "changes_per_step_mean",
            "changes_per_step_max", "changed_share_of_live_links_max", "step_lag_p50_ms", "step_lag_p99_ms",
            "step_lag_max_ms", "before_next", "coalesced", "update_lag_p50_ms", "update_lag_p99_ms", "failed",
            "tc_in_place", "tc_rebuilt", "nft", "shell_processes", "shell_batches",
            "shell_batch_ms_p50", "shell_batch_ms_p90", "engine", "applied_by",
            "load_before"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for n in args.sizes:
        r = bench(n, args.duration, args.speedup, out, args.workers, args.subnets, args.engine)
        print("| " + " | ".join(str(r[c]) for c in cols) + " |", flush=True)


if __name__ == "__main__":
    main()
