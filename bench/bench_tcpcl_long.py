#!/usr/bin/env python3
"""Where TCPCL's time goes on a long link: dtn7 -> dtn7 over TCPCLv4 on one link of RATE and DELAY one-way (netns,
the userspace link engine, `tcp_buffers: bdp`), N bundles of SIZE offered as fast as dtnd takes them, while the
sender's TCP connection is sampled with `ss -tin` in its namespace every INTERVAL s (window, slow-start threshold,
round trip, retransmissions, delivery rate, app-limited, the kernel's receiver-window and send-buffer limited
timers; bench/netns_probe.py), and the link engine's own counters for the link (tail drops at its queue limit) are
read at the end. `--cc` sets both nodes' TCP congestion control (a per-namespace sysctl): Cubic against BBR over
the same link. A namespace may set only what net.ipv4.tcp_allowed_congestion_control lists (on the machine of
2026-11-28: reno and bbr, and bbr is the host's default; cubic was refused).

    bench/bench_tcpcl_long.py [--count 3000] [--size 100000] [--delay 300] [--rate 100] [--cc cubic|bbr|reno]
                              [--window N] [--interval 1] [--csv FILE]

Prints each `ss` sample as a JSON line as it is taken (and to --csv) and a summary line: delivered, duplicates,
span, goodput as a fraction of the link over the whole span and from the first arrival, the samples' summary, the
engine's counters. Brings up swarm bench-long (10.206.x) and takes it down after.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.dtn_swarm import bring_up, events, swarm, traffic  # noqa: E402
from bench.netns_probe import SS_FIELDS, SsSampler, namespace, ss_summary  # noqa: E402

NAME = "bench-long"
TCPCL_PORT = 4556


def engine_counters(spec: Path) -> dict:
    """The userspace engine's counters of link sat01 -> sat02 (the sender's engine keeps one per destination MAC)."""
    from swarm import Swarm

    sw = Swarm.from_yaml(str(spec))
    to_sat02 = next(n.isl_mac.lower() for n in sw.nodes if n.name == "sat02")
    for row in sw.links.linkd.stats("sat01")[1]:
        if row.get("mac", "").lower() == to_sat02:
            return {k: row[k] for k in ("packets", "held", "dropped_limit", "dropped_loss") if k in row}
    return {}


def run(args, tmp: Path, spec: Path, on_row) -> dict:
    sampler = SsSampler(namespace(NAME, "sat01"), TCPCL_PORT, args.interval, on_row)
    release = time.time() + 3
    recv = traffic(NAME, "sat02", "dtn7-http", {"flows": [], "release": release, "duration": 1, "drain": 600, "expect": args.count}, tmp)
    send = traffic(NAME, "sat01", "dtn7-http", {"flows": [{"dst": "sat02", "size": args.size, "rate": 0, "count": args.count}],
                             "release": release, "duration": 600, "receive": False}, tmp)
    sampler.start()
    out_s, err_s = send.communicate(timeout=900)
    out_r, err_r = recv.communicate(timeout=900)
    rows = sampler.stop()
    sent = [e for e in events(out_s) if e.get("ev") == "sent" and e.get("ok")]
    got = [e for e in events(out_r) if e.get("ev") == "recv"]
    fresh = [g for g in got if not g["dup"]]
    if not sent or not fresh:
        raise SystemExit(f"sent {len(sent)}, received {len(fresh)}; {err_s[-300:]} {err_r[-300:]}")
    first_sent, first_got, last_got = min(s["t"] for s in sent), min(g["t"] for g in fresh), max(g["t"] for g in fresh)
    bits, link = len(fresh) * args.size * 8, args.rate * 1e6
    return {"cc": args.cc, "window": args.window or "framework's", "one_way_ms": args.delay, "rate_mbit": args.rate, "size": args.size,
            "sent": len(sent), "delivered": len(fresh), "duplicates": len(got) - len(fresh),
            "span_s": round(last_got - first_sent, 2), "first_arrival_s": round(first_got - first_sent, 2),
            "of_link_whole": round(bits / (last_got - first_sent) / link, 3),
            "of_link_from_first": round((bits - args.size * 8) / max(last_got - first_got, 1e-9) / link, 3),
            **ss_summary(rows), "engine_sat01_to_sat02": engine_counters(spec)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--delay", type=float, default=300.0, help="one-way delay, ms")
    ap.add_argument("--rate", type=float, default=100.0, help="link rate, Mbit/s")
    ap.add_argument("--cc", default="cubic", help="the nodes' TCP congestion control (cubic, bbr, reno)")
    ap.add_argument("--window", type=int, help="dtn.tcpcl.window (default: the framework's, from the link)")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--csv", help="also write the samples here, as they are taken")
    args = ap.parse_args()
    handle = open(args.csv, "w", newline="") if args.csv else None
    writer = csv.DictWriter(handle, fieldnames=["t", *SS_FIELDS]) if handle else None
    if writer:
        writer.writeheader()

    def on_row(row: dict) -> None:
        print(json.dumps(row), flush=True)
        if writer:
            writer.writerow(row)
            handle.flush()

    with tempfile.TemporaryDirectory(prefix="bench-long-") as t:
        tmp = Path(t)
        spec = tmp / "spec.yaml"
        window = f", tcpcl: {{window: {args.window}}}" if args.window else ""
        spec.write_text(f"name: {NAME}\nbackend: netns\nnodes: 2\ndefaults: {{dtn: {{cla: tcp{window}}}}}\n"
                        "networks: {isl: {subnet: 10.206.0.0/25}, ground: {subnet: 10.206.0.128/25}}\n"
                        f"links: {{tcp_buffers: bdp, default: {{delay: {args.delay:g}ms, rate: {args.rate:g}Mbit}}}}\n")
        if not bring_up(NAME, spec):
            return 1
        try:
            for node in ("sat01", "sat02"):
                res = subprocess.run(["ip", "netns", "exec", namespace(NAME, node), "sysctl", "-q", "-w",
                                      f"net.ipv4.tcp_congestion_control={args.cc}"], capture_output=True, text=True)
                if res.returncode != 0:
                    raise SystemExit(f"{node}: congestion control {args.cc}: {res.stderr.strip()}")
            summary = run(args, tmp, spec, on_row)
        finally:
            swarm("down", NAME)
            if handle:
                handle.close()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
