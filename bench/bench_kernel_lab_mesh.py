#!/usr/bin/env python3
"""Benchmark: batman-adv (kernel module) vs batmand (userspace daemon) convergence after a cut and a heal, same
nodes, same OGM interval, in ONE kernel-lab guest (Debian's kernel under qemu: this host's kernel has no
batman-adv, so that is the only way to run both side by side here).

Each implementation: an N-node netns swarm on one ISL bridge (every node hears every other), `up`, then ROUNDS
times cut sat01-sat02 (sat01 must route to sat02 over a third node) and heal (direct again); convergence is the
project's own judgement (swarm.mesh: every node has a route to every reachable node through a neighbour it
hears, and a healed link carries its direct route), polled as `swarm fault` does; its resolution is the span
between the last unconverged and the first converged snapshot. Prints a Markdown table for BENCHMARKS.md.

    python bench/bench_kernel_lab_mesh.py [--nodes 8] [--ogm 1000] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "kernel_lab"))
import klab  # noqa: E402  (the harness lives with the tests that use it)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--ogm", type=int, default=1000, help="OGM interval, ms (both implementations' default: 1000)")
    ap.add_argument("--rounds", type=int, default=2, help="cut/heal rounds per implementation")
    args = ap.parse_args()
    image = klab.build()
    t0 = time.monotonic()
    with klab.KernelLab(image).boot() as lab:
        klab.log(lab.describe())
        res = lab.run([sys.executable, "tests/kernel_lab/guest_mesh.py", "kl-bench", "224", str(args.nodes),
                       str(args.ogm), str(args.rounds), "batman-adv", "batmand"], cwd=str(REPO),
                      env={"PYTHONPATH": str(REPO), "KL_WATCH": "1"}, timeout=3600, echo=True)
        describe = lab.describe()
    lines = [line for line in res.stdout.splitlines() if line.startswith("KL-RESULT ")]
    if res.rc != 0 or not lines:
        print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        return 1
    results = json.loads(lines[-1].removeprefix("KL-RESULT "))
    saved = klab.save_figures("bench-mesh", {"describe": describe, "results": results})
    print(f"\n{describe}; guest run {time.monotonic() - t0:.0f} s; host {platform.node()} "
          f"({len(__import__('os').sched_getaffinity(0))} cores); figures in {saved}\n")
    print(f"{args.nodes} nodes, OGM every {args.ogm} ms, {args.rounds} cut/heal rounds of sat01-sat02.\n\n"
          "Route switch (fine): seconds from the start of the fault's application until sat01's route to sat02 "
          "AND sat02's to sat01 took their new next hop (a third node after the cut, direct after the heal), read "
          "continuously in both nodes; in brackets the gap between two reads (the resolution).\n")
    print("| implementation | cut: route switch (s) | heal: route switch (s) | read gap (s) |")
    print("|---|---|---|---|")
    for r in results:
        def sw(kind):
            vals = []
            for e in r["events"]:
                w = e.get("watch") or {}
                if e["event"].startswith(kind):
                    if w.get("sat01_s") is None or w.get("sat02_s") is None:
                        vals.append("not seen")
                    else:
                        vals.append(f"{max(w['sat01_s'], w['sat02_s']):.1f} "
                                    f"(±{max(w['sat01_res_s'], w['sat02_res_s']):.1f})")
            return " / ".join(vals)
        gaps = [e["watch"]["read_s"] for e in r["events"] if e.get("watch") and e["watch"].get("read_s")]
        print(f"| {r['implementation']} | {sw('cut')} | {sw('heal')} | "
              f"{statistics.median(gaps) if gaps else float('nan'):.2f} |")
    print("\nThe project's own judgement (swarm.mesh, as `swarm fault` reports it): every node has a route to every "
          "reachable node via a neighbour it hears; seconds from the end of the fault's application to the first "
          "converged snapshot of all nodes (resolution: the span of that snapshot and the one before)\n")
    print("| implementation | up: converged after (s) | cut: converged after (s) | cut: resolution (s) | cut: "
          "sat01->sat02 via | heal: converged after (s) | heal: resolution (s) | snapshot of all nodes (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        cuts = [e for e in r["events"] if e["event"].startswith("cut")]
        heals = [e for e in r["events"] if e["event"].startswith("heal")]

        def cell(events, key):
            vals = [e[key] for e in events if e["converged"] and e.get(key) is not None]
            bad = len(events) - len(vals)
            text = " / ".join(f"{v:.1f}" for v in vals)
            return text + (f" ({bad} not converged)" if bad else "")

        up = r["up"]
        print(f"| {r['implementation']} | {up['converge_s']:.1f} | {cell(cuts, 'converge_s')} | "
              f"{cell(cuts, 'resolution_s')} | {', '.join(str(e['sat01_to_sat02_via']) for e in cuts)} | "
              f"{cell(heals, 'converge_s')} | {cell(heals, 'resolution_s')} | "
              f"{statistics.median(r['snapshot_s']):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
