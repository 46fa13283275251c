#!/usr/bin/env python3
"""Benchmark: accuracy of link impairments (measured / set, for loss and rate at several settings) and the time
to change the conditions of every directed link of a 32-node swarm (992 links).

- loss: a UDP flow (iperf3 -u -b 10M, 6 s) runs on a 2-node swarm's link; 1 s in, the loss is set (live,
  through the active engine); loss is counted from the receiver's intervals from 1.5 s on (~3,450 datagrams).
  Setting 0 measures the host's own loss under the same method.
  Set live because iperf3 does not retransmit its UDP setup handshake (esnet/iperf#862).
- rate: TCP goodput over 5 s on a link limited to the rate, divided by the rate; `l2_ratio` corrects for
  the 66 header bytes per 1448-byte segment that HTB counts (goodput x 1514 / 1448).
- change time: wall time of LinkController calls on a 32-node swarm: loss on all 992 links (nft: one table
  per node), a change of that loss, a rate on all links (tc: 31 HTB classes per node), one link, heal, clear.
Prints Markdown tables for BENCHMARKS.md. Usage: bench_impair.py [--backend netns] [--nodes 32] [--quick]
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time

from swarm.runtime.state import default_workdir
from swarm.runtime.swarm import Swarm
from netem.spec.links import impairment
from experiments.traffic.tools.iperf3.parse import parse_client_json
from swarm.runtime.probe import capabilities
from swarm.spec.model import spec_from_dict

PORTS = iter(range(5600, 6500))


def make(name: str, backend: str, n: int, third: int) -> Swarm:
    spec = spec_from_dict({"name": name, "nodes": n, "backend": backend,
                           "networks": {"isl": {"subnet": f"10.{third}.0.0/24"},
                                        "ground": {"subnet": f"10.{third + 1}.0.0/24"}}})
    return Swarm(spec, workdir=default_workdir())


def flow(swarm: Swarm, src: str, dst: str, args: list[str], seconds: int, change=None) -> tuple:
    dst_ip, port = swarm.node(dst).isl_ip, str(next(PORTS))
    swarm.exec(dst, ["iperf3", "-s", "-1", "-D", "-J", "-B", dst_ip, "-p", port])
    time.sleep(0.3)
    argv = ["iperf3", "-c", dst_ip, "-p", port, "-B", swarm.node(src).isl_ip, "-t", str(seconds), "-i", "0.5",
            "-J", "--get-server-output", *args]
    proc = subprocess.Popen(swarm.backend.exec_prefix(swarm.name, src) + argv, stdout=subprocess.PIPE, text=True)
    if change:
        time.sleep(1.0)
        change()
    out, _ = proc.communicate(timeout=seconds + 90)
    return parse_client_json(out)


def bench_loss(swarm: Swarm, settings: list[float], seconds: int) -> list[dict]:
    rows = []
    for pct in settings:
        set_loss = lambda: swarm.links.impair(impairment(loss=f"{pct}%"), between=["sat01", "sat02"], direction="a->b")  # noqa: E731
        result = flow(swarm, "sat01", "sat02", ["-u", "-b", "10M"], seconds, set_loss)
        after = [iv for iv in result.intervals if iv.start >= 1.5]
        packets, lost = sum(iv.packets or 0 for iv in after), sum(iv.lost_packets or 0 for iv in after)
        measured = 100.0 * lost / packets if packets else float("nan")
        rows.append({"loss_set_pct": pct, "loss_measured_pct": round(measured, 3),
                     "ratio": round(measured / pct, 3) if pct else "-",
                     "datagrams": packets, "ok": result.ok, "error": result.error})
        swarm.links.impair(impairment(loss=0), between=["sat01", "sat02"])
    return rows


def bench_rate(swarm: Swarm, settings: list[str], seconds: int) -> list[dict]:
    rows = []
    for rate in settings:
        target = impairment(rate=rate).rate
        swarm.links.impair(impairment(rate=rate), between=["sat01", "sat02"], direction="a->b")
        result = flow(swarm, "sat01", "sat02", [], seconds)
        ratio = result.bits_per_second / target
        rows.append({"rate_set": rate, "goodput_mbps": round(result.bits_per_second / 1e6, 3),
                     "goodput_ratio": round(ratio, 3), "l2_ratio": round(ratio * 1514 / 1448, 3), "ok": result.ok})
    swarm.links.impair(impairment(rate=0), between=["sat01", "sat02"])
    return rows


def timed(fn) -> float:
    t = time.monotonic()
    fn()
    return round(time.monotonic() - t, 3)


def bench_change(swarm: Swarm) -> list[dict]:
    ctl = swarm.links
    n = len(swarm.nodes)
    links = n * (n - 1)
    steps = [
        ("loss 1% on every link (first set)", lambda: ctl.impair(impairment(loss="1%"), all_links=True)),
        ("loss 1% -> 2% on every link", lambda: ctl.impair(impairment(loss="2%"), all_links=True)),
        ("rate 50Mbit on every link (+ loss kept)", lambda: ctl.impair(impairment(rate="50M"), all_links=True)),
        ("rate 50 -> 20Mbit on every link", lambda: ctl.impair(impairment(rate="20M"), all_links=True)),
        ("one link: loss 5%", lambda: ctl.impair(impairment(loss="5%"), between=["sat01", "sat02"])),
        ("partition in two halves", lambda: ctl.partition([[x.name for x in swarm.nodes[: n // 2]],
                                                           [x.name for x in swarm.nodes[n // 2:]]])),
        ("heal all", lambda: ctl.heal()),
        ("clear everything", lambda: ctl.clear()),
    ]
    rows = []
    for what, fn in steps:
        rows.append({"step": what, "links": links if "one link" not in what else 2, "seconds": timed(fn)})
    return rows


def table(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="netns")
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="fewer settings, shorter flows")
    args = parser.parse_args()
    caps = capabilities()
    loss_settings = [0, 1, 10, 30] if args.quick else [0, 1, 5, 10, 30, 50]  # 0: the host's own loss
    rate_settings = ["20M"] if args.quick else ["1M", "10M", "20M", "100M", "500M"]
    seconds = 4 if args.quick else 6
    results = {"host": {"kernel": platform.release(), "cpus": subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip(),
                        "backend": args.backend, "iperf3": caps.iperf3_version}}
    small = make("imp-bench2", args.backend, 2, 136)
    small.down()
    try:
        small.up()
        results["engine"] = small.links.engine.describe()
        results["loss"] = bench_loss(small, loss_settings, seconds)
        results["rate"] = bench_rate(small, rate_settings, 5)
    finally:
        small.down()
    big = make("imp-bench32", args.backend, args.nodes, 138)
    big.down()
    try:
        results["up_s"] = timed(big.up)
        results["change"] = bench_change(big)
    finally:
        big.down()
    print(f"engine: {results['engine']}\nhost: {json.dumps(results['host'])}\n")
    print("Loss (UDP 10 Mbit/s, set live, counted over the receiver's intervals after the change):\n")
    print(table(results["loss"]) + "\n")
    print("Rate (TCP goodput, 5 s):\n")
    print(table(results["rate"]) + "\n")
    print(f"Changing conditions on a {args.nodes}-node swarm ({args.nodes * (args.nodes - 1)} directed links; "
          f"up took {results['up_s']} s):\n")
    print(table(results["change"]))
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
