#!/usr/bin/env python3
"""ION's LTP goodput at several one-way delays, measured with ION's own benchmark tools (seed 002's table on a flight
stack): two ION nodes (your build: SWARM_ION_INSTALL) on the compose backend, sat01 -> ground over `cla: ltp` on a
link of --rate at each --delays one-way; `bpcounter` on the ground counts --count bundles of --size bytes that
`bpdriver` on sat01 sends as fast as ION takes them, and prints ION's own throughput figure (bundles x size over the
time from its first to its last bundle). One swarm per delay and segment size (ION's ranges and spans are set at
start), taken down after.

    SWARM_ION_INSTALL=<prefix> bench/bench_ion_ltp.py [--delays 0 2 4] [--count 300] [--size 100000] [--rate 1Gbit]
                                                      [--segments 1360 8000 64000]

`--segments` (LTP segment sizes, bytes; default 1360) is seed 004's sweep: on the links' MTU of 1,500 bytes a
segment above ~1,470 bytes is one UDP datagram the kernel sends as IP fragments; the factor is each size's goodput
over the first size's at the same delay.

Swarm bench-ion on 10.192.1.0/24 and 10.193.1.0/24 (the subnets of experiments/dtn-ltp-delay*.yaml). One JSON line
per delay, then the ratio goodput(last) / goodput(first).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "bench-ion"
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}
WD = "/var/lib/swarm-dtn"


def swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


def in_node(node: str, script: str, timeout: float) -> subprocess.CompletedProcess:
    return swarm("exec", NAME, node, "--", "sh", "-c", f"cd {WD} && {script}", timeout=timeout)


def one(delay: float, count: int, size: int, rate: str, tmp: Path, segment: int = 1360) -> dict:
    spec = tmp / f"{NAME}.yaml"
    link = f"{{rate: {rate}, delay: {delay:g}s}}" if delay else f"{{rate: {rate}}}"
    spec.write_text(f"name: {NAME}\nbackend: compose\nnode_list: [{{name: sat01}}, {{name: ground}}]\n"
                    f"defaults: {{dtn: {{agent: ion, cla: ltp, ltp: {{segment: {segment}}}}}}}\n"
                    f"links: {{default: {link}}}\n"
                    "networks: {isl: {subnet: 10.192.1.0/24}, ground: {subnet: 10.193.1.0/24}}\n")
    swarm("down", NAME)
    up = swarm("up", str(spec))
    if up.returncode:
        raise SystemExit(f"up failed: {up.stderr[-800:]}")
    try:
        # node 2 (ground) counts on ipn:2.1; node 1 (sat01) drives from ipn:1.1
        counter = subprocess.Popen(SWARM + ["exec", NAME, "ground", "--", "sh", "-c",
                                            f"cd {WD} && bpcounter ipn:2.1 {count}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        time.sleep(2)
        started = time.time()
        drv = in_node("sat01", f"bpdriver {count} ipn:1.1 ipn:2.1 -{size} t3600", 600)
        try:
            out, _ = counter.communicate(timeout=600 + 10 * delay)
        except subprocess.TimeoutExpired:
            counter.kill()
            out, _ = counter.communicate()
        wall = time.time() - started
        mbps = re.findall(r"Throughput \(Mbps\): ([\d.]+)", out)
        secs = re.findall(r"Time \(seconds\): ([\d.]+)", out)
        got = re.findall(r"bundles received: (\d+)", out)
        cpu = swarm("exec", NAME, "ground", "--", "cat", "/proc/loadavg").stdout.split()[:1]
        return {"delay_s": delay, "segment": segment, "count": count, "size": size, "rate": rate,
                "received": int(got[-1]) if got else 0, "seconds": float(secs[-1]) if secs else None,
                "goodput_mbps": float(mbps[-1]) if mbps else None, "wall_s": round(wall, 1),
                "driver": drv.stdout.strip().splitlines()[-1:] or drv.stderr[-200:], "loadavg_1m": cpu}
    finally:
        swarm("down", NAME, timeout=300)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", type=float, nargs="+", default=[0, 2, 4])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--rate", default="1Gbit")
    ap.add_argument("--segments", type=int, nargs="+", default=[1360], help="LTP segment sizes, bytes")
    args = ap.parse_args()
    if not os.environ.get("SWARM_ION_INSTALL"):
        print("set SWARM_ION_INSTALL to your ION build's install prefix (docs/DTN.md)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for delay in args.delays:
            for segment in args.segments:
                row = one(delay, args.count, args.size, args.rate, Path(tmp), segment)
                rows.append(row)
                print(json.dumps(row), flush=True)
    for segment in args.segments:  # seed 002: goodput at the last delay over the first, per segment size
        by_delay = [r["goodput_mbps"] for r in rows if r["segment"] == segment]
        if len(by_delay) > 1 and by_delay[0] and by_delay[-1]:
            print(json.dumps({"segment": segment, "ratio_last_to_first_delay": round(by_delay[-1] / by_delay[0], 3)}))
    for delay in args.delays:  # seed 004: each segment size's goodput over the first size's
        by_seg = [r for r in rows if r["delay_s"] == delay]
        base = by_seg[0]["goodput_mbps"]
        if len(by_seg) > 1 and base:
            print(json.dumps({"delay_s": delay, "factor_over_segment": {
                r["segment"]: round(r["goodput_mbps"] / base, 2) if r["goodput_mbps"] else None for r in by_seg}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
