#!/usr/bin/env python3
"""Seeds 001, 002 and 004 on HDTN, measured with HDTN's own tools: two HDTN nodes (your build: SWARM_HDTN_INSTALL)
on the compose backend, sat01 -> sat02 over each --clas CLA between their routers. In sat01 HDTN's `bpgen-async`
sends --size byte bundles as fast as HDTN takes them (`--bundle-rate=0`, BPv7) for --duration s into sat01's router
(STCP on loopback, as the node's applications do); in sat02 HDTN's `bpsink-async` takes the place of the node's
application side (ipn:2.1, STCP on loopback) and logs what it received every 5 s. The rates are the medians of
bpsink's 5 s intervals while bpgen sent (its own "Bundles/sec" and "Payload Only Rate" figures), beside the
total it received once its log had not grown for 10 s after bpgen ended (`tail_s`: how long after bpgen that was;
bundles bpgen offered faster than the link waited in the router's storage) and that total's payload over the time
from bpgen's start to the last growth of bpsink's log (`goodput_total_mbps`: a transfer's goodput, the time known
to 5 s, so a lower bound). One swarm per row, taken down after. With `udp` a bundle is one datagram, so bundles are
60,000 bytes there.

    SWARM_HDTN_INSTALL=<prefix> bench/bench_hdtn_rates.py [--clas tcp udp stcp ltp] [--duration 20] [--size 100000]
        [--rate 1Gbit] [--delays 0 2 4] [--segments 1360 8000 64000] [--mtus 1500 9000]

Seed 001 (HDTN on a Raspberry Pi 4, ~100 kB bundles): TCPCL 659 bundles/s, STCP 895/s, LTP over UDP 142/s. Here
both routers, bpgen and bpsink share this host's 2 cores with the framework's containers: the CPU share is what
`nproc` says, printed with the figures.

`ltp` rows run on links of --rate (HDTN paces LTP at its contact's rate) at each of --delays s one-way (seed 002:
HDTN's LTP goodput at 0, 2 and 4 s; the ratio printed is the last delay's over the first's), each of --segments
bytes (seed 004's sweep: the factor printed is each size's goodput over the first size's) and each ISL MTU of --mtus.
A row's --duration is stretched by the round trip so that as long a stretch of full intervals is measured.

Swarm bench-hdtn on 10.192.3.0/24 and 10.193.3.0/24. One JSON line per row, then the ratios.
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
PAYLOAD_RE = re.compile(r"Payload Only Rate: ([0-9.]+) Mbits/sec")
PAYLOAD_TOTAL_RE = re.compile(r"totalPayloadBytesRx: (\d+)")
TOTAL_RE = re.compile(r"m_totalBundlesVersion7Rx: (\d+)")


def swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


def in_node(node: str, script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return swarm("exec", NAME, node, "--", "sh", "-c", f"cd {WD} && {script}", timeout=timeout)


def spec_text(cla: str, rate: str, delay: float, segment: int, mtu: int, link: bool = True) -> str:
    """The two-node swarm of one row: LTP paced at `rate` on links of `rate` and `delay` (`link` False: no link
    impairment, HDTN's pacing alone); other CLAs unimpaired."""
    dtn = f"agent: hdtn, cla: {cla}, eid: ipn"
    links = ""
    if cla == "ltp":
        dtn += f", ltp: {{segment: {segment}, rate: {rate}}}"
        if link:
            links = f"links: {{default: {{rate: {rate}" + (f", delay: {delay:g}s" if delay else "") + "}}\n"
    return (f"name: {NAME}\nbackend: compose\nnode_list: [{{name: sat01}}, {{name: sat02}}]\n"
            f"defaults: {{dtn: {{{dtn}}}}}\n{links}"
            f"networks: {{isl: {{subnet: 10.192.3.0/24, mtu: {mtu}}}, ground: {{subnet: 10.193.3.0/24}}}}\n")


def drain(least: float, most: float) -> tuple[float, float]:
    """Waits after bpgen ended until bpsink's log has not grown for 10 s (it logs a 5 s interval only when bundles
    came: every bundle still in flight or in the router's storage has arrived, or none will), at least `least` s and
    at most `most` s. (the wait, s; time.monotonic() of the last poll that found the log grown: the last delivery,
    to 5 s)."""
    t0 = last = time.monotonic()
    seen = -1
    while time.monotonic() - t0 < most:
        lines = len(RATE_RE.findall(in_node("sat02", "cat sink.log").stdout))
        if lines != seen:
            seen, last = lines, time.monotonic()
        elif time.monotonic() - last >= 10 and time.monotonic() - t0 >= least:
            break
        time.sleep(5)
    return round(time.monotonic() - t0, 1), last


def one(cla: str, duration: int, size: int, tmp: Path, rate: str = "1Gbit", delay: float = 0.0,
        segment: int = 1360, mtu: int = 1500, link: bool = True) -> dict:
    spec = tmp / f"{NAME}.yaml"
    spec.write_text(spec_text(cla, rate, delay, segment, mtu, link))
    duration = int(duration + 2 * delay)  # as many full intervals once the first bundles have crossed
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
        tail_s, last = drain(6 + 2 * delay, 60 + 10 * delay)
        in_node("sat02", "pkill -INT -f 'bpsink-asyn[c]'; sleep 2")
        log = in_node("sat02", "cat sink.log").stdout
        sent = re.search(r"bundle_count: (\d+)", gen.stdout)
        rates, payload = [float(x) for x in RATE_RE.findall(log)], [float(x) for x in PAYLOAD_RE.findall(log)]
        flowing = [i for i, r in enumerate(rates) if r > 0]
        # while bpgen sent: its intervals but the first (partly idle), not the tail after it
        full = flowing[1:1 + duration // 5] if len(flowing) > 2 else flowing
        payload_bytes = PAYLOAD_TOTAL_RE.search(log)
        span = last - t0  # first bundle sent .. last received (to 5 s: an upper bound)
        total = TOTAL_RE.search(log)
        return {"cla": cla, "size": size, "duration_s": duration, "delay_s": delay, "segment": segment, "mtu": mtu,
                "rate": rate if cla == "ltp" else None, "link_impaired": link and cla == "ltp",
                "bundles_sent": int(sent.group(1)) if sent else None,
                "bundles_received": int(total.group(1)) if total else None,
                "bundles_per_s_median": round(statistics.median(rates[i] for i in full), 1) if full else None,
                "payload_mbps_median": round(statistics.median(payload[i] for i in full), 1) if full else None,
                "goodput_total_mbps": round(int(payload_bytes.group(1)) * 8 / span / 1e6, 1)
                if payload_bytes and span else None,
                "bundles_per_s_intervals": rates, "gen_wall_s": round(sent_s, 1), "tail_s": tail_s,
                "seed_001_bundles_per_s": SEED_001.get(cla), "cpus": os.cpu_count()}
    finally:
        swarm("down", NAME, timeout=180)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clas", nargs="+", default=["tcp", "udp"], choices=["tcp", "udp", "stcp", "ltp"])
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--rate", default="1Gbit", help="ltp: the links' rate and HDTN's pacing")
    ap.add_argument("--delays", type=float, nargs="+", default=[0.0], help="ltp: one-way delays, s")
    ap.add_argument("--segments", type=int, nargs="+", default=[1360], help="ltp: segment sizes, bytes")
    ap.add_argument("--mtus", type=int, nargs="+", default=[1500], help="ltp: ISL MTUs, bytes")
    ap.add_argument("--no-link", action="store_true",
                    help="ltp: no link impairment (delays must be 0); HDTN paces at --rate alone, so a segment size's "
                         "cost shows where the impairment engine's per-packet work would hide it")
    args = ap.parse_args()
    if args.no_link and any(args.delays):
        ap.error("--no-link: a delay needs the link (leave --delays out)")
    if not os.environ.get("SWARM_HDTN_INSTALL"):
        print("set SWARM_HDTN_INSTALL to your HDTN install prefix (docs/DTN.md)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cla in args.clas:  # a UDP bundle must fit one datagram: at most UDP_MAX bytes there
            size = min(args.size, UDP_MAX) if cla == "udp" else args.size
            grid = [(d, s, m) for m in args.mtus for d in args.delays for s in args.segments] if cla == "ltp" \
                else [(0.0, 1360, 1500)]
            for delay, segment, mtu in grid:
                row = one(cla, args.duration, size, Path(tmp), args.rate, delay, segment, mtu, not args.no_link)
                if row["seed_001_bundles_per_s"] and row["bundles_per_s_median"] and not delay and segment == 1360:
                    row["ratio_to_seed_001"] = round(row["bundles_per_s_median"] / row["seed_001_bundles_per_s"], 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
    ltp = [r for r in rows if r["cla"] == "ltp"]
    for mtu in args.mtus:
        for segment in args.segments:  # seed 002: goodput at the last delay over the first
            by_delay = [r["payload_mbps_median"] for r in ltp if r["segment"] == segment and r["mtu"] == mtu]
            if len(by_delay) > 1 and by_delay[0] and by_delay[-1]:
                print(json.dumps({"mtu": mtu, "segment": segment, "delays_s": args.delays,
                                  "ratio_last_to_first_delay": round(by_delay[-1] / by_delay[0], 3)}))
        for delay in args.delays:  # seed 004: each segment size's goodput over the first size's
            by_seg = [r for r in ltp if r["delay_s"] == delay and r["mtu"] == mtu]
            base = by_seg[0]["payload_mbps_median"] if by_seg else None
            if len(by_seg) > 1 and base:
                print(json.dumps({"mtu": mtu, "delay_s": delay, "factor_over_segment": {
                    r["segment"]: round(r["payload_mbps_median"] / base, 2) if r["payload_mbps_median"] else None
                    for r in by_seg}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
