"""Runs INSIDE the kernel-lab guest: the same link spec through several impairment engines (e.g. kernel `netem`
and the `userspace` engine), each pinned with `links: {engine: ...}` in a 2-node netns swarm of its own, and
the same measurements: the RTT distribution and loss of 600 pings sat01->sat02 over a link of delay 50 ms,
jitter 5 ms (normal), loss 5 % (sat01->sat02 only), and the TCP goodput over a 2 Mbit/s link (sat02->sat01).
While each swarm is up it also records which machinery acted: the netem qdiscs and the packets that iptables
NFQUEUE rules handed to userspace in the swarm's namespaces (so a `userspace` figure cannot come from kernel
NetEm, nor a `netem` one from swarm-linkd), and at the end the guest's loaded modules.
Prints `KL-RESULT <json>`: a list, one entry per engine (figures and the RTTs themselves), then
{"modules": [...], "namespaces_left": [...]}.

    python tests/kernel_lab/guest_crosscheck.py NAME THIRD ENGINE [ENGINE ...]
"""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time

from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

from guest_netem import iperf_tcp, percentile, ping, say

LINKS = [{"between": ["sat01", "sat02"], "direction": "a->b", "delay": "50ms", "jitter": "5ms",
          "jitter_distribution": "normal", "loss": "5%"},
         {"between": ["sat02", "sat01"], "direction": "a->b", "rate": "2Mbit"}]


def run_one(name: str, third: int, engine: str) -> dict:
    spec = spec_from_dict({
        "name": name, "nodes": 2, "backend": "netns", "defaults": {"command": ["sleep", "infinity"]},
        "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}},
        "links": {"engine": engine, "overrides": LINKS}})
    swarm = Swarm(spec)
    swarm.down()
    out: dict = {"engine": engine}
    t0 = time.monotonic()
    try:
        swarm.up()
        out["engine_used"] = swarm.links.engine.name
        p = ping(swarm, "sat01", "sat02", 600, 0.01)
        rtts = p["rtts"]
        out.update({"loss_pct": p["loss_pct"], "median": p["median"], "stdev": p["stdev"], "rtts": rtts,
                    "mean": statistics.fmean(rtts) if rtts else None,
                    **{f"p{q}": percentile(rtts, q) for q in (5, 25, 75, 95)}})
        out["rate_bps"] = iperf_tcp(swarm, "sat02", "sat01", seconds=10)  # a TCG stall weighs less in 10 s
        out.update(machinery(name))
        say(f"{engine}: RTT median {out['median']} stdev {out['stdev']:.2f} loss {out['loss_pct']:.1f} % "
            f"rate {out['rate_bps'] / 1e6:.2f} Mbit/s; netem qdiscs {out['netem_qdiscs']}, "
            f"NFQUEUE'd {out['nfqueue_packets']}")
    finally:
        out["down"] = swarm.down()
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def sh(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def machinery(name: str) -> dict:
    """In every namespace of swarm `name` (its nodes and its switch): the netem qdiscs, and the packets the
    iptables NFQUEUE rules queued (iptables-save -c counters), wherever the userspace engine put its rules."""
    netem, queued = 0, 0
    for ns in (line.split()[0] for line in sh(["ip", "netns", "list"]).splitlines() if name in line):
        netem += sum(" netem " in line for line in sh(["ip", "netns", "exec", ns, "tc", "qdisc", "show"]).splitlines())
        for line in sh(["ip", "netns", "exec", ns, "iptables-save", "-c", "-t", "mangle"]).splitlines():
            m = re.match(r"\[(\d+):\d+\].*-j NFQUEUE", line)
            queued += int(m.group(1)) if m else 0
    return {"netem_qdiscs": netem, "nfqueue_packets": queued}


def main() -> None:
    name, third = sys.argv[1], int(sys.argv[2])
    t0 = time.monotonic()
    results = [run_one(f"{name}-{engine}", third + 2 * i, engine) for i, engine in enumerate(sys.argv[3:])]
    say(f"cross-check done in {time.monotonic() - t0:.0f} s")
    with open("/proc/modules") as f:
        modules = sorted(line.split()[0] for line in f)
    left = [line for line in sh(["ip", "netns", "list"]).splitlines() if name in line]
    results.append({"modules": modules, "namespaces_left": left})
    print("KL-RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
