#!/usr/bin/env python3
"""Benchmark: orbit planning time and memory (netem/orbits), no swarm started.

Default case (issue 15): a Walker delta 100/10/1 at 550 km, 53 deg, 4 ground stations, one orbit (95 min) at
1 s steps; ISLs up to 5000 km, nearest 4 (mutual); ground links above 10 deg. Each size is planned in a
fresh child process so its peak RSS is its own; tracemalloc's peak (numpy's buffers included) is reported
beside it. Prints a Markdown table for BENCHMARKS.md.

    python bench/bench_orbits.py                 # 100 satellites (+ 25, 50, 200 with --sweep)
    python bench/bench_orbits.py --sizes 100 200 --duration 95min
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def spec(total: int, duration: str, step: str) -> dict:
    planes = 10 if total % 10 == 0 else 5
    return {
        "duration": duration, "step": step,
        "satellites": [{"walker": {"type": "delta", "total": total, "planes": planes, "phasing": 1,
                                   "altitude": "550km", "inclination": 53}}],
        "ground_stations": [{"name": "gs-svalbard", "lat": 78.23, "lon": 15.39},
                            {"name": "gs-wallops", "lat": 37.94, "lon": -75.46},
                            {"name": "gs-tanegashima", "lat": 30.40, "lon": 130.97},
                            {"name": "gs-malindi", "lat": -2.99, "lon": 40.19}],
        "links": {"isl": {"max_range": "5000km", "max_degree": 4}, "ground": {"min_elevation": 10}},
    }


def child(total: int, duration: str, step: str) -> None:
    import tracemalloc

    sys.path.insert(0, str(REPO))
    from netem.orbits.export import to_hdtn, to_ion
    from netem.orbits.planner import plan
    from netem.spec.orbits import parse_orbits

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    tracemalloc.start()
    t0 = time.perf_counter()
    s = parse_orbits(spec(total, duration, step))
    p = plan(s)
    t_plan = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t1 = time.perf_counter()
    ion, hdtn = to_ion(p), to_hdtn(p)
    t_export = time.perf_counter() - t1
    summ = p.summary()
    print(json.dumps({
        "satellites": total, "ground_stations": 4, "steps": p.stats["steps"],
        "pairs": p.stats["pairs_considered"], "plan_s": round(t_plan, 2), "cpu_s": round(cpu, 2),
        "propagate_s": p.stats["propagate_s"], "visibility_s": p.stats["visibility_s"],
        "export_s": round(t_export, 2), "traced_peak_mib": round(peak / 2**20, 1),
        "rss_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_mib": round(rss0 / 1024, 1), "rows": len(p.timeline), "links_ever_up": summ["pairs_ever_up"],
        "ground_passes": summ["ground_passes"], "max_changes_per_step": summ["max_changes_per_step"],
        "ion_lines": ion.count("\n"), "hdtn_contacts": len(hdtn["contacts"]),
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100])
    ap.add_argument("--sweep", action="store_true", help="sizes 25 50 100 200")
    ap.add_argument("--duration", default="95min")
    ap.add_argument("--step", default="1s")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    # wall time follows the host's load (2 shared cores here); CPU time (user + sys of the planning process,
    # numpy single-threaded) is the figure to compare between runs
    args = ap.parse_args()
    if args.child:
        child(args.child, args.duration, args.step)
        return
    sizes = [25, 50, 100, 200] if args.sweep else args.sizes
    print(f"host: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
          f"python {platform.python_version()}")
    print("| satellites | ground | steps | pairs | plan s (wall) | plan CPU s | propagate s | visibility s | export s | traced peak MiB "
          "| RSS peak MiB | rows | links ever up | passes | max changes/step |")
    print("|" + "---|" * 15)
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--duration", args.duration,
                              "--step", args.step], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {r['satellites']} | {r['ground_stations']} | {r['steps']} | {r['pairs']} | {r['plan_s']} | {r['cpu_s']} | "
              f"{r['propagate_s']} | {r['visibility_s']} | {r['export_s']} | {r['traced_peak_mib']} | "
              f"{r['rss_peak_mib']} | {r['rows']} | {r['links_ever_up']} | {r['ground_passes']} | "
              f"{r['max_changes_per_step']} |", flush=True)


if __name__ == "__main__":
    main()
