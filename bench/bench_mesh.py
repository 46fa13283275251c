#!/usr/bin/env python3
"""Benchmark: B.A.T.M.A.N. mesh (batmand here) convergence after `up`, after a cut and after its heal.

For each swarm size and OGM interval a swarm is brought up once; then, `--repeats` times, the link sat01 <-> sat02
is cut (every other path stays, so the mesh must route sat01 -> sat02 over 2 hops) and healed, and the time until
the mesh has converged (swarm.mesh: every node routes to every reachable node via a neighbour it hears; after the
heal, sat01 <-> sat02 direct again) is measured by polling the routing tables every 0.5 s; the resolution is
the span in which the change happened (from the last snapshot that saw it unconverged to the first that saw it
converged). Prints a Markdown table (medians over the repeats) for BENCHMARKS.md.

Usage: bench_mesh.py [--sizes 8,32] [--ogm 1000,200] [--repeats 5] [--backend netns]
Subnets 10.146.0.0/16 (ISL) and 10.147.0.0/16 (ground), swarm names mh-bench-*.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict


def bench(backend: str, n: int, ogm_ms: int, repeats: int) -> dict:
    name = f"mh-bench-{backend[:2]}-{n}-{ogm_ms}"
    data = {"name": name, "nodes": n, "backend": backend,
            "mesh": {"protocol": "batman", "ogm_interval": f"{ogm_ms}ms", "converge_timeout": 120},
            "networks": {"isl": {"subnet": "10.146.0.0/16"}, "ground": {"subnet": "10.147.0.0/16"}}}
    swarm = Swarm(spec_from_dict(data), backend=backend)
    swarm.down()
    cut_s, heal_s, resolution = [], [], []
    try:
        swarm.up(ready_timeout=600)
        up = swarm.mesh_result
        mesh = swarm.mesh
        for _ in range(repeats):
            swarm.links.cut("sat01", "sat02")
            applied = time.time()
            timing = mesh.wait_converged(applied)
            assert timing["converged"], timing
            cut_s.append(timing["converge_s"])
            resolution.append(timing["resolution_s"])
            swarm.links.heal("sat01", "sat02")
            applied = time.time()
            timing = mesh.wait_converged(applied, direct=frozenset({("sat01", "sat02"), ("sat02", "sat01")}))
            assert timing["converged"], timing
            heal_s.append(timing["converge_s"])
            resolution.append(timing["resolution_s"])
    finally:
        swarm.down()
    return {"backend": backend, "n": n, "ogm_ms": ogm_ms, "up_s": up["converge_s"] if up["converged"] else "no",
            "cut_median_s": statistics.median(cut_s), "cut_range": f"{min(cut_s):.1f}-{max(cut_s):.1f}",
            "heal_median_s": statistics.median(heal_s), "heal_range": f"{min(heal_s):.1f}-{max(heal_s):.1f}",
            "resolution_s": statistics.median(resolution), "repeats": repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,32")
    ap.add_argument("--ogm", default="1000,200", help="OGM intervals in ms")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--backend", default="netns")
    args = ap.parse_args()
    print(f"host: {platform.node()}, kernel {platform.release()}, backend {args.backend}")
    print("| backend | nodes | OGM interval | converged after up | after cut: median (range) | "
          "after heal: median (range) | resolution (median) | repeats |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        for ogm in (int(s) for s in args.ogm.split(",")):
            r = bench(args.backend, n, ogm, args.repeats)
            print(f"| {r['backend']} | {r['n']} | {r['ogm_ms']} ms | {r['up_s']} s | {r['cut_median_s']:.1f} s "
                  f"({r['cut_range']}) | {r['heal_median_s']:.1f} s ({r['heal_range']}) | {r['resolution_s']:.2f} s | "
                  f"{r['repeats']} |", flush=True)


if __name__ == "__main__":
    main()
