#!/usr/bin/env python3
"""Benchmark: bring-up and teardown time and host memory per node, for 10, 50 and 100 nodes per backend.

For the compose backend the same generated Compose file is also brought up and down with the raw Compose
CLI (`<compose> up -d` / `down`), so the framework's cost (readiness wait, labels, audit) is a ratio.
Prints a Markdown table for BENCHMARKS.md. Usage: bench_up.py [--sizes 10,50,100] [--backends netns,compose]
"""
from __future__ import annotations

import argparse
import platform
import subprocess
import time
from pathlib import Path

from swarm.runtime.state import default_workdir
from swarm.runtime.swarm import Swarm
from swarm.runtime.probe import capabilities
from swarm.spec.model import spec_from_dict


def mem_used_mib() -> float:
    info = {l.split(":")[0]: int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines()}
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def leftovers(name: str) -> int:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=io.swarm-emu.swarm={name}"],
                         capture_output=True, text=True).stdout.split()
    ns = [l for l in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
          if l.startswith(f"swarm-emu_{name}")]
    return len(out) + len(ns)


def bench(backend: str, n: int) -> dict:
    name = f"bu-{backend}-{n}"
    nets = {"isl": {"subnet": "10.64.0.0/16"}, "ground": {"subnet": "10.65.0.0/16"}}
    swarm = Swarm(spec_from_dict({"name": name, "nodes": n, "networks": nets}), backend=backend)
    swarm.down()
    time.sleep(2)
    before = mem_used_mib()
    t = time.monotonic()
    swarm.up(ready_timeout=600)
    up_s = time.monotonic() - t
    time.sleep(3)
    per_node = (mem_used_mib() - before) / n
    reach = swarm.reachability()
    t = time.monotonic()
    swarm.down()
    down_s = time.monotonic() - t
    row = {"backend": backend, "n": n, "up_s": up_s, "down_s": down_s, "mem_per_node_mib": per_node,
           "left": leftovers(name), "pairs_ok": "-" if reach is None else
           f"{sum(v for r in reach.values() for v in r.values())}/{n * (n - 1)}"}
    if backend == "compose":
        compose = capabilities().compose
        f = str(default_workdir() / "compose" / f"{name}.yml")
        t = time.monotonic()
        subprocess.run([*compose, "-f", f, "-p", name, "up", "-d"], check=True, capture_output=True)
        row["raw_up_s"] = time.monotonic() - t
        t = time.monotonic()
        subprocess.run([*compose, "-f", f, "-p", name, "down", "-t", "2"], check=True, capture_output=True)
        row["raw_down_s"] = time.monotonic() - t
        row["left"] += leftovers(name)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,50,100")
    ap.add_argument("--backends", default="netns,compose")
    args = ap.parse_args()
    rows = []
    for backend in args.backends.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            rows.append(bench(backend, n))
            print(rows[-1], flush=True)
    print(f"\nmachine: {platform.node()}, {open('/proc/cpuinfo').read().count('processor')} cores, kernel {platform.release()}")
    print("| backend | nodes | up s | down s | raw compose up s | up ÷ raw | raw down s | down ÷ raw | host MiB/node | ISL pairs | left |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        raw_up, raw_down = r.get("raw_up_s"), r.get("raw_down_s")
        cells = [r["backend"], r["n"], f"{r['up_s']:.1f}", f"{r['down_s']:.1f}",
                 f"{raw_up:.1f}" if raw_up else "-", f"{r['up_s'] / raw_up:.2f}" if raw_up else "-",
                 f"{raw_down:.1f}" if raw_down else "-", f"{r['down_s'] / raw_down:.2f}" if raw_down else "-",
                 f"{r['mem_per_node_mib']:.1f}", r["pairs_ok"], r["left"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")

if __name__ == "__main__":
    main()
