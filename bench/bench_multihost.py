#!/usr/bin/env python3
"""Benchmark (issue 16): a swarm over two Docker Engines (backend swarm) against one engine.

The second engine is a real dockerd in its own network namespace (tests/hosts/second_engine.py),
started here if none runs, joined to the main Engine's Swarm by the backend. Measured in one run:
1. 16 nodes split 8/8 over the two engines: `up` (to ready) and `down` time, against 16 nodes on the
   main engine alone with the compose backend, interleaved `--repeats` times (medians); the first 8/8
   `up` also copies the node image to the fresh engine (docker save | docker load), timed on its own;
2. ISL reachability of the 8/8 swarm (16 x 15 = 240 directed pairs);
3. the cost of VXLAN: TCP bandwidth (iperf3, 5 s) and the UDP envelope (largest offered rate whose
   median loss over the repeats is < 1 %, 2 s per step, 1300-byte datagrams) between two nodes on the
   same engine and two on different engines, interleaved so both see the same background load;
4. a full-mesh `mux` sweep over the 8/8 swarm (UDP): start skew after clock correction against the
   test duration, and the hosts' clock uncertainty;
5. per-node CPU and memory of an idle node (docker stats), for the placement estimate on paper.
Prints a Markdown summary for BENCHMARKS.md and writes the raw figures as JSON.

Usage (root): python bench/bench_multihost.py [--nodes 16] [--sweep-seconds 10] [--out FILE]
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hosts.second_engine import SecondEngine  # noqa: E402
from swarm.runtime.swarm import Swarm  # noqa: E402
from swarm.spec.model import spec_from_dict  # noqa: E402

NETS = {"isl": {"subnet": "10.240.0.0/24", "mtu": 1400}, "ground": {"subnet": "10.240.128.0/24", "mtu": 1400}}
UDP_STEPS_MBIT = [25, 50, 75, 100, 150, 200, 300, 400, 600, 800, 1000]


def hosts(eng: SecondEngine) -> list[dict]:
    return [{"name": "main", "endpoint": "local", "advertise_addr": eng.host_address},
            {"name": "host2", "endpoint": eng.host, "advertise_addr": eng.address}]


def timed(fn) -> float:
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def iperf(swarm: Swarm, src: str, dst: str, args: list[str]) -> dict:
    ip = swarm.node(dst).isl_ip
    swarm.exec(dst, ["sh", "-c", "pkill -x iperf3; iperf3 -s -D -1 -B " + ip], check=False)
    time.sleep(0.5)
    res = swarm.exec(src, ["iperf3", "-c", ip, "-J", *args], check=False, timeout=120)
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError:
        return {"error": (res.stderr or res.stdout)[-300:]}


def tcp_mbit(swarm: Swarm, src: str, dst: str) -> float:
    doc = iperf(swarm, src, dst, ["-t", "5"])
    return doc.get("end", {}).get("sum_received", {}).get("bits_per_second", 0) / 1e6


def udp_loss(swarm: Swarm, src: str, dst: str, rate_mbit: int) -> float:
    doc = iperf(swarm, src, dst, ["-u", "-b", f"{rate_mbit}M", "-t", "2", "-l", "1300"])
    loss = doc.get("end", {}).get("sum", {}).get("lost_percent")
    return 100.0 if loss is None else float(loss)


def vxlan_cost(swarm: Swarm, same: tuple[str, str], cross: tuple[str, str], repeats: int) -> dict:
    """TCP bandwidth and the UDP envelope on the same host and across hosts, measured interleaved (same,
    cross, same, cross ...) so both paths see the same background load; medians over `repeats`. The
    envelope is the largest step of UDP_STEPS_MBIT whose median loss stays under 1 %."""
    tcp = {"same": [], "cross": []}
    for _ in range(repeats):
        for path, pair in (("same", same), ("cross", cross)):
            tcp[path].append(tcp_mbit(swarm, *pair))
    out = {f"tcp_{p}_mbit": round(statistics.median(v), 1) for p, v in tcp.items()}
    out["tcp_runs"] = tcp
    steps = {"same": [], "cross": []}
    best = {"same": 0, "cross": 0}
    open_paths = {"same": same, "cross": cross}
    for rate in UDP_STEPS_MBIT:
        for path in list(open_paths):
            losses = [udp_loss(swarm, *open_paths[path], rate) for _ in range(repeats)]
            steps[path].append((rate, losses))
            if statistics.median(losses) < 1.0:
                best[path] = rate
            else:
                del open_paths[path]
        if not open_paths:
            break
    out.update({f"udp_{p}_mbit": best[p] for p in best}, udp_steps=steps)
    return out


def node_cost(swarm: Swarm) -> dict:
    """Idle per-node CPU % (of one core) and memory, from docker stats on the main engine's nodes."""
    names = [f"{swarm.name}-{n.name}" for n in swarm.nodes[:4]]
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.CPUPerc}} {{.MemUsage}}", *names],
                         capture_output=True, text=True).stdout.split("\n")
    cpu, mem = [], []
    for line in filter(None, out):
        c, m = line.split()[0], line.split()[1]
        cpu.append(float(c.rstrip("%")))
        mem.append(float(m[:-3]) * (1024 if m.endswith("GiB") else 1 if m.endswith("MiB") else 1 / 1024))
    return {"idle_cpu_pct": round(sum(cpu) / len(cpu), 2) if cpu else None,
            "idle_mem_mib": round(sum(mem) / len(mem), 1) if mem else None}


def sweep(eng: SecondEngine | None, n: int, seconds: int, tmp: Path) -> dict:
    """The mux full-mesh UDP test over both engines (eng given) or on the main engine alone (compose)."""
    name = ("mh2-bmux" if eng else "mh2-bmux1") + time.strftime("-%H%M%S")
    exp = tmp / f"{name}.yaml"
    swarm = ({"backend": "swarm", "hosts": hosts(eng), "networks": NETS} if eng else
             {"backend": "compose", "networks": {w: {"subnet": v["subnet"]} for w, v in NETS.items()}})
    exp.write_text(json.dumps({"name": name, "sizes": [n], "protocols": ["udp"], "rates": ["1M"],
                               "duration": f"{seconds}s", "engine": "mux", "swarm": swarm}))
    tmp = tmp / name
    proc = subprocess.run([sys.executable, "-m", "swarm", "sweep", str(exp), "--results", str(tmp / "results"),
                           "--no-report"], capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        return {"error": proc.stderr[-500:]}
    run = next((tmp / "results").iterdir())
    row = next(csv.DictReader((run / "tests.csv").open()))
    return {k: row[k] for k in ("flows", "flows_ok", "skew_s", "window_s", "window_fraction", "release_spread_s",
                                "clock_uncertainty_s", "duration_s", "cpu_busy_pct")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--sweep-seconds", type=int, default=10)
    ap.add_argument("--out", default="")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of each TCP/UDP measurement (median taken)")
    args = ap.parse_args()
    n = args.nodes
    fig: dict = {"nodes": n, "machine": f"{platform.node()}, {open('/proc/cpuinfo').read().count('processor')} cores, "
                                       f"kernel {platform.release()}"}
    eng = SecondEngine("mh2-bench", "10.249.254.0/30", progress=print)
    own_engine = not eng.running()
    fig["engine_start_s"] = round(timed(eng.start), 2)
    try:
        multi = Swarm(spec_from_dict({"name": "mh2-bench", "nodes": n, "backend": "swarm", "hosts": hosts(eng),
                                      "networks": NETS}), message=print)
        fig["first_up_s"] = round(multi.up(ready_timeout=600), 2)
        fig["image_copy"] = multi.backend.plan(multi.name).get("images", [])
        fig["placement"] = {h: sum(1 for v in multi.backend.node_hosts(multi.name).values() if v == h) for h in ("main", "host2")}
        matrix = multi.reachability()
        fig["isl_pairs_ok"] = f"{sum(v for r in matrix.values() for v in r.values())}/{n * (n - 1)}"
        fig.update(vxlan_cost(multi, ("sat01", "sat02"), ("sat01", f"sat{n // 2 + 1:02d}"), args.repeats))
        fig["node_cost"] = node_cost(multi)
        fig["clocks"] = {h: o.as_dict() for h, o in multi.backend.clock_offsets(multi.name).items()}
        fig["first_down_s"] = round(timed(multi.down), 2)
        one = Swarm(spec_from_dict({"name": "mh2-bench1", "nodes": n, "backend": "compose",
                                    "networks": {"isl": {"subnet": "10.240.0.0/24"}, "ground": {"subnet": "10.240.128.0/24"}}}))
        # Interleaved (two engines, one engine, two, one ...) so both see the same background load; medians.
        runs: dict[str, list] = {"multi_up": [], "multi_down": [], "one_up": [], "one_down": []}
        for _ in range(args.repeats):
            for key, swarm in (("multi", multi), ("one", one)):
                time.sleep(2)
                runs[f"{key}_up"].append(round(swarm.up(ready_timeout=600), 2))
                time.sleep(2)
                runs[f"{key}_down"].append(round(timed(swarm.down), 2))
        fig["updown_runs"] = runs
        fig.update({f"{k}_s": statistics.median(v) for k, v in runs.items()})
        with tempfile.TemporaryDirectory(prefix="mh2-bench-") as tmp:
            fig["sweep"] = sweep(eng, n, args.sweep_seconds, Path(tmp))
            fig["sweep_one"] = sweep(None, n, args.sweep_seconds, Path(tmp))
    finally:
        if own_engine:
            eng.stop()
    print(json.dumps(fig, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(fig, indent=1))
    print(f"\nmachine: {fig['machine']}")
    print("| figure | two engines (8/8, swarm) | one engine (compose) | ratio |")
    print("|---|---|---|---|")
    print(f"| up to ready, {n} nodes, s (median of {args.repeats}) | {fig['multi_up_s']} | {fig['one_up_s']} | "
          f"{fig['multi_up_s'] / fig['one_up_s']:.2f} |")
    print(f"| down, s (median of {args.repeats}) | {fig['multi_down_s']} | {fig['one_down_s']} | "
          f"{fig['multi_down_s'] / fig['one_down_s']:.2f} |")
    print(f"| ISL pairs reachable | {fig['isl_pairs_ok']} | | |")
    print("| figure | cross-host (VXLAN) | same host | cross ÷ same |")
    print("|---|---|---|---|")
    print(f"| TCP Mbit/s | {fig['tcp_cross_mbit']} | {fig['tcp_same_mbit']} | {fig['tcp_cross_mbit'] / max(fig['tcp_same_mbit'], 1e-9):.2f} |")
    print(f"| UDP envelope Mbit/s (< 1 % loss) | {fig['udp_cross_mbit']} | {fig['udp_same_mbit']} | "
          f"{fig['udp_cross_mbit'] / max(fig['udp_same_mbit'], 1e-9):.2f} |")
    for label, sw in (("two engines", fig.get("sweep", {})), ("one engine", fig.get("sweep_one", {}))):
        if "skew_s" in sw:
            print(f"mux sweep n={n} UDP 1M {sw['duration_s']} s, {label}: {sw['flows_ok']}/{sw['flows']} flows, skew "
                  f"{float(sw['skew_s']) * 1e3:.1f} ms = {100 * float(sw['skew_s']) / float(sw['duration_s']):.2f} % of the "
                  f"test, release spread {float(sw['release_spread_s']) * 1e3:.1f} ms, clock uncertainty "
                  f"{float(sw['clock_uncertainty_s'] or 0) * 1e3:.3f} ms, window fraction {sw['window_fraction']}, "
                  f"host CPU {sw['cpu_busy_pct']} %")
        else:
            print(f"mux sweep, {label}: {sw}")


if __name__ == "__main__":
    main()
