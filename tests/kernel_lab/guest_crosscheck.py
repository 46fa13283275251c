"""Runs INSIDE the kernel-lab guest: the same link spec through several impairment engines (e.g. kernel `netem`
and the `userspace` engine), each pinned with `links: {engine: ...}` in a 2-node netns swarm of its own, and
the same measurements: the RTT distribution and loss of 600 pings sat01->sat02 over a link of delay 50 ms,
jitter 5 ms, loss 5 % (sat01->sat02 only), and the TCP goodput over a 2 Mbit/s link (sat02->sat01).
Prints `KL-RESULT <json>` (a list, one entry per engine).

    python tests/kernel_lab/guest_crosscheck.py NAME THIRD ENGINE [ENGINE ...]
"""
from __future__ import annotations

import json
import statistics
import sys
import time

from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

from guest_netem import iperf_tcp, percentile, ping, say

LINKS = [{"between": ["sat01", "sat02"], "direction": "a->b", "delay": "50ms", "jitter": "5ms", "loss": "5%"},
         {"between": ["sat02", "sat01"], "direction": "a->b", "rate": "2Mbit"}]


def run_one(name: str, third: int, engine: str) -> dict:
    spec = spec_from_dict({
        "name": name, "nodes": 2, "backend": "netns", "defaults": {"command": ["sleep", "infinity"]},
        "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}},
        "links": {"engine": engine, "overrides": LINKS}})
    swarm = Swarm(spec)
    swarm.down()
    out: dict = {"engine": engine}
    try:
        swarm.up()
        out["engine_used"] = swarm.links.engine.name
        p = ping(swarm, "sat01", "sat02", 600, 0.01)
        rtts = p["rtts"]
        out.update({"loss_pct": p["loss_pct"], "median": p["median"], "stdev": p["stdev"],
                    "mean": statistics.fmean(rtts) if rtts else None,
                    **{f"p{q}": percentile(rtts, q) for q in (5, 25, 75, 95)}})
        out["rate_bps"] = iperf_tcp(swarm, "sat02", "sat01")
        say(f"{engine}: RTT median {out['median']} stdev {out['stdev']:.2f} loss {out['loss_pct']:.1f} % "
            f"rate {out['rate_bps'] / 1e6:.2f} Mbit/s")
    finally:
        out["down"] = swarm.down()
    return out


def main() -> None:
    name, third = sys.argv[1], int(sys.argv[2])
    t0 = time.monotonic()
    results = [run_one(f"{name}-{engine}", third + 2 * i, engine) for i, engine in enumerate(sys.argv[3:])]
    say(f"cross-check done in {time.monotonic() - t0:.0f} s")
    print("KL-RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
