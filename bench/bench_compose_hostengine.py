"""RTT accuracy of the userspace link engine on the compose host (issue 27 item 2): a 3-node compose swarm with
the default engine (no --engine, no links: section), `swarm impair --delay D` on sat01-sat02, then N plain pings
from sat01 (inside its container) to sat02; prints the RTT distribution against the 2 x D set, where the engine
runs, and the load.

    python bench/bench_compose_hostengine.py [--delay 100ms] [--count 100] [--interval 0.2] [--backend compose]

Subnets 10.139.0.0/24 (ISL) and 10.139.1.0/24 (ground); swarm `hostengine-bench`; removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "hostengine-bench"


def cli(*args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "COLUMNS": "200"}, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"swarm {' '.join(args)}: exit {res.returncode}: {(res.stderr or res.stdout).strip()[:300]}")
    return res.stdout


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", default="100ms")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--backend", default="compose", choices=["compose", "netns"])
    a = ap.parse_args()
    set_ms = float(a.delay.removesuffix("ms"))
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / f"{NAME}.yaml"
        spec.write_text(f"name: {NAME}\nnodes: 3\nbackend: {a.backend}\n"
                        "networks:\n  isl: {subnet: 10.139.0.0/24}\n  ground: {subnet: 10.139.1.0/24}\n")
        cli("down", NAME)
        try:
            cli("up", str(spec))
            cli("impair", NAME, "--between", "sat01", "sat02", "--delay", a.delay)
            status = json.loads(cli("status", NAME, "--json"))
            enter = (["docker", "exec", f"{NAME}-sat01"] if a.backend == "compose"
                     else ["ip", "netns", "exec", f"swarm-emu_{NAME}_sat01"])
            load0 = os.getloadavg()
            res = subprocess.run([*enter, "ping", "-n", "-c", str(a.count), "-i", str(a.interval), "10.139.0.3"],
                                 capture_output=True, text=True, timeout=a.count * a.interval + 60)
            load1 = os.getloadavg()
        finally:
            cli("down", NAME)
    rtts = [float(m) for m in re.findall(r"time=([\d.]+) ms", res.stdout)]
    if not rtts:
        raise SystemExit(f"no replies: {res.stdout[-300:]} {res.stderr[-300:]}")
    err = [r - 2 * set_ms for r in rtts]
    # ping prints each reply of 100 ms or more to 1 ms; its summary has microseconds
    summary = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", res.stdout)
    print(f"backend {a.backend}, engine {status['impairment_engine']} ({status.get('userspace_engine')})")
    print(f"set {a.delay} each way (RTT {2 * set_ms:g} ms); {len(rtts)}/{a.count} replies, plain ping every "
          f"{a.interval} s from inside sat01")
    print(f"RTT ms per reply (1 ms resolution): min {min(rtts):.3f} median {statistics.median(rtts):.3f} mean {statistics.mean(rtts):.3f} "
          f"p95 {pct(rtts, 0.95):.3f} p99 {pct(rtts, 0.99):.3f} max {max(rtts):.3f} stdev {statistics.pstdev(rtts):.3f}")
    if summary:
        lo, avg, hi, mdev = (float(x) for x in summary.groups())
        print(f"ping summary (us resolution): min {lo:.3f} avg {avg:.3f} max {hi:.3f} mdev {mdev:.3f} ms; "
              f"avg - set {avg - 2 * set_ms:+.3f} ms, max - set {hi - 2 * set_ms:+.3f} ms")
    print(f"error vs set (1 ms resolution): median {statistics.median(err):+.3f} ms, max {max(err):+.3f} ms, min {min(err):+.3f} ms")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
