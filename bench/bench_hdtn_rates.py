#!/usr/bin/env python3
"""Seed 001's bundle-rate table on HDTN, measured with HDTN's own tools: two HDTN nodes (your build:
SWARM_HDTN_INSTALL) on the compose backend, sat01 -> sat02 over each --clas CLA between their routers. In sat01
HDTN's `bpgen-async` sends --size byte bundles as fast as HDTN takes them (`--bundle-rate=0`, BPv7) for --duration
s into sat01's router (STCP on loopback, as the node's applications do); in sat02 HDTN's `bpsink-async` takes the
place of the node's application side (ipn:2.1, STCP on loopback) and logs its received bundles every 5 s. The
rate is the median of bpsink's full 5 s intervals while bundles flowed (its own "Bundles/sec" figure), beside the
total it received over bpgen's duration. One swarm per CLA, taken down after. With `udp` a bundle is one datagram,
so bundles are 60,000 bytes there.

    SWARM_HDTN_INSTALL=<prefix> bench/bench_hdtn_rates.py [--clas tcp udp] [--duration 20] [--size 100000]

Seed 001 (HDTN on a Raspberry Pi 4, ~100 kB bundles): TCPCL 659 bundles/s, STCP 895/s, LTP over UDP 142/s. Here
both routers, bpgen and bpsink share this host's 2 cores with the framework's containers: the CPU share is what
`nproc` says, printed with the figures. Swarm bench-hdtn on 10.192.3.0/24 and 10.193.3.0/24. One JSON line per CLA.
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "bench-hdtn"
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}
WD = "/var/lib/swarm-dtn"
SEED_001 = {"tcp": 659, "stcp": 895, "ltp": 142}  # bundles/s, seed 001 Table 1 (~100 kB bundles)
ROUTER_BASE = 1_000_000
SINK = {"inductConfigName": "bench", "inductVector": [{"name": "sink", "convergenceLayer": "stcp", "boundPort": 4558,
                                                        "numRxCircularBufferElements": 1000,
                                                        "keepAliveIntervalSeconds": 15}]}
GEN = {"outductConfigName": "bench", "outductVector": [{"name": "gen", "convergenceLayer": "stcp",
                                                         "nextHopNodeId": 1 + ROUTER_BASE, "remoteHostname": "127.0.0.1",
                                                         "remotePort": 4557, "maxNumberOfBundlesInPipeline": 50,
                                                         "maxSumOfBundleBytesInPipeline": 50_000_000,
                                                         "keepAliveIntervalSeconds": 15}]}
UDP_MAX = 60_000
RATE_RE = re.compile(r"Bundles/sec: ([0-9.]+)")
TOTAL_RE = re.compile(r"m_totalBundlesVersion7Rx: (\d+)")


def swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


def in_node(node: str, script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return swarm("exec", NAME, node, "--", "sh", "-c", f"cd {WD} && {script}", timeout=timeout)


def one(cla: str, duration: int, size: int, tmp: Path) -> dict:
    spec = tmp / f"{NAME}.yaml"
    spec.write_text(f"name: {NAME}\nbackend: compose\nnode_list: [{{name: sat01}}, {{name: sat02}}]\n"
                    f"defaults: {{dtn: {{agent: hdtn, cla: {cla}, eid: ipn}}}}\n"
                    "networks: {isl: {subnet: 10.192.3.0/24}, ground: {subnet: 10.193.3.0/24}}\n")
    swarm("down", NAME)
    up = swarm("up", str(spec))
    if up.returncode:
        raise SystemExit(f"up failed: {up.stderr[-800:]}")
    try:
        # sat02: HDTN's bpsink in place of the application side (the router's STCP outduct reconnects to it)
        put = in_node("sat02", f"pkill -f 'hdtn_app[.]py serve'; echo '{json.dumps(SINK)}' > sink.json; "
                               "(bpsink-async --my-uri-eid=ipn:2.1 --inducts-config-file=sink.json "
                               "> sink.log 2>&1 &) ; sleep 1; pgrep -f 'bpsink-asyn[c]'")
        if put.returncode:
            raise SystemExit(f"bpsink did not start: {put.stdout} {put.stderr[-400:]}")
        t0 = time.monotonic()
        gen = in_node("sat01", f"echo '{json.dumps(GEN)}' > gen.json; bpgen-async --bundle-size={size} "
                               f"--bundle-rate=0 --duration={duration} --my-uri-eid=ipn:1.2 --dest-uri-eid=ipn:2.1 "
                               "--outducts-config-file=gen.json --use-bp-version-7 --force-disable-custody "
                               "> gen.log 2>&1; grep -a -e bundle_count -e 'payload data' gen.log",
                      timeout=duration + 300)
        sent_s = time.monotonic() - t0
        time.sleep(6)  # bpsink's next 5 s report covers the tail
        in_node("sat02", "pkill -INT -f 'bpsink-asyn[c]'; sleep 2")
        log = in_node("sat02", "cat sink.log").stdout
        sent = re.search(r"bundle_count: (\d+)", gen.stdout)
        rates = [float(x) for x in RATE_RE.findall(log)]
        full = rates[1:-1] if len(rates) > 2 else rates  # the first and last intervals are partly idle
        total = TOTAL_RE.search(log)
        return {"cla": cla, "size": size, "duration_s": duration, "bundles_sent": int(sent.group(1)) if sent else None,
                "bundles_received": int(total.group(1)) if total else None,
                "bundles_per_s_median": round(statistics.median(full), 1) if full else None,
                "bundles_per_s_intervals": rates, "gen_wall_s": round(sent_s, 1),
                "seed_001_bundles_per_s": SEED_001.get(cla), "cpus": os.cpu_count()}
    finally:
        swarm("down", NAME, timeout=180)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clas", nargs="+", default=["tcp", "udp"], choices=["tcp", "udp"])
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--size", type=int, default=100_000)
    args = ap.parse_args()
    if not os.environ.get("SWARM_HDTN_INSTALL"):
        print("set SWARM_HDTN_INSTALL to your HDTN install prefix (docs/DTN.md)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for cla in args.clas:  # a UDP bundle must fit one datagram: at most UDP_MAX bytes there
            row = one(cla, args.duration, min(args.size, UDP_MAX) if cla == "udp" else args.size, Path(tmp))
            if row["seed_001_bundles_per_s"] and row["bundles_per_s_median"]:
                row["ratio_to_seed_001"] = round(row["bundles_per_s_median"] / row["seed_001_bundles_per_s"], 3)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
