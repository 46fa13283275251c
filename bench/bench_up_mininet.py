#!/usr/bin/env python3
"""Benchmark: netns `swarm up` / `down` of N nodes against Mininet bringing up N hosts, in the same run.

Alternates the two (ours, Mininet, ours, Mininet, ...) `--repeats` times each, so both see the same host
load, and prints every run, the medians and the ratios (ours ÷ Mininet) as Markdown for BENCHMARKS.md.

- ours: `Swarm.up()` of an N-node netns swarm (two networks, an agent per node, ready = every node's process
  running and every ISL address answering one fping from a node), then `Swarm.down()`;
- Mininet: `Mininet(SingleSwitchTopo(N), switch=LinuxBridge, controller=None)` built and `start()`ed (hosts
  created, links made, addresses configured, bridge up), then `stop()`. Mininet waits for nothing more
  (no ping): its bridge is in the host namespace, where Docker's FORWARD DROP with br_netfilter drops the
  hosts' traffic on this machine, so a ping check would fail there rather than measure readiness.

Mininet is NOT a dependency of the project (bench only). Install it from Debian with
`apt-get install -y mininet bridge-utils` (LinuxBridge needs `brctl`); it runs under the system
interpreter (/usr/bin/python3), which this script calls for the Mininet half.
Usage (root): flock /tmp/swarm-emu-itest.lock .venv/bin/python bench/bench_up_mininet.py [--nodes 100] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MININET_CHILD = r"""
import json, subprocess, sys, time
from mininet.net import Mininet
from mininet.nodelib import LinuxBridge
from mininet.topo import SingleSwitchTopo
from mininet.log import setLogLevel
setLogLevel("error")
n = int(sys.argv[1])
t0 = time.monotonic()
net = Mininet(topo=SingleSwitchTopo(n), switch=LinuxBridge, controller=None, autoSetMacs=True)
net.start()
up = time.monotonic() - t0
t0 = time.monotonic()
net.stop()
down = time.monotonic() - t0
print(json.dumps({"up_s": up, "down_s": down, "hosts": len(net.hosts)}))
"""


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def run_mininet(n: int) -> dict:
    subprocess.run(["mn", "-c"], capture_output=True)  # leftovers of an interrupted run
    before = load()
    out = subprocess.run(["/usr/bin/python3", "-c", MININET_CHILD, str(n)],
                         capture_output=True, text=True, check=True, timeout=600)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row.update(kind="mininet", load=before)
    return row


def run_ours(n: int, name: str, isl: str, ground: str) -> dict:
    from swarm.runtime.swarm import Swarm
    from swarm.spec.model import spec_from_dict

    spec = spec_from_dict({"name": name, "nodes": n, "networks": {"isl": {"subnet": isl}, "ground": {"subnet": ground}}})
    swarm = Swarm(spec, backend="netns")
    swarm.down()
    before = load()
    t0 = time.monotonic()
    swarm.up(ready_timeout=600)
    up = time.monotonic() - t0
    phases = dict(getattr(swarm.backend, "timings", {}))
    t0 = time.monotonic()
    swarm.down()
    down = time.monotonic() - t0
    left = [l for l in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith(f"swarm-emu_{name}")]
    return {"kind": "ours", "up_s": up, "down_s": down, "left": len(left), "load": before, "phases": phases}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default="bringup-bench")
    ap.add_argument("--isl", default="10.150.0.0/16")
    ap.add_argument("--ground", default="10.151.0.0/16")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_up_mininet: needs root (network namespaces, Mininet)")
    rows: list[dict] = []
    for i in range(args.repeats):
        for kind in ("ours", "mininet"):
            row = (run_ours(args.nodes, args.name, args.isl, args.ground) if kind == "ours"
                   else run_mininet(args.nodes))
            row["repeat"] = i + 1
            rows.append(row)
            print(json.dumps(row), flush=True)
    ours = [r for r in rows if r["kind"] == "ours"]
    mn = [r for r in rows if r["kind"] == "mininet"]
    med = {k: {m: statistics.median(r[m] for r in rs) for m in ("up_s", "down_s")} for k, rs in (("ours", ours), ("mininet", mn))}
    print(f"\nmachine: {platform.node()}, {os.cpu_count()} cores, kernel {platform.release()}, load before each run: "
          + ", ".join(r["load"].split()[0] for r in rows))
    print(f"nodes: {args.nodes}, repeats: {args.repeats}, Mininet: LinuxBridge, no controller, up = build + start()")
    print("| run | ours up s | Mininet up s | ours down s | Mininet down s |")
    print("|---|---|---|---|---|")
    for i in range(args.repeats):
        o, m = ours[i], mn[i]
        print(f"| {i + 1} | {o['up_s']:.2f} | {m['up_s']:.2f} | {o['down_s']:.2f} | {m['down_s']:.2f} |")
    print(f"| median | {med['ours']['up_s']:.2f} | {med['mininet']['up_s']:.2f} | {med['ours']['down_s']:.2f} | {med['mininet']['down_s']:.2f} |")
    print(f"\nup ratio (ours ÷ Mininet, medians): {med['ours']['up_s'] / med['mininet']['up_s']:.2f}; "
          f"down ratio: {med['ours']['down_s'] / med['mininet']['down_s']:.2f}; leftovers after our down: {sum(r['left'] for r in ours)}")
    if ours[0]["phases"]:
        keys = list(ours[0]["phases"])
        print("our phases (median s): " + ", ".join(f"{k} {statistics.median(r['phases'].get(k, 0) for r in ours):.2f}" for k in keys))


if __name__ == "__main__":
    main()
