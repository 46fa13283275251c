#!/usr/bin/env python3
"""Benchmark (issue 39): a large netns swarm with a delay on every link, and a Walker shell whose ISLs follow
the orbits: where the time goes, and how many host commands it takes.

Case `delay`: N nodes, `links: default: {delay: 10ms}`: `up` (and its link phase), the host commands `up` ran
(by tool: iptables, iptables-restore, nft, tc, ip ...), ping between two nodes (the RTT shows 2 x 10 ms),
`swarm impair --show` through the CLI (seconds, lines printed), host memory, `down`.
Case `walker`: N satellites in a Walker delta (planes as asked, 550 km, 53 deg, 4 mutual ISLs within 5,000 km,
1 s steps) + 1 ground station: `up`, the orbit plan's initial state, then `--duration` of plan at x1 (steps
applied before the next, lag p50/p99 from the engine, CPU per step of the engine's processes and of the driver),
host memory.

Each result row is printed (a Markdown table) and appended to results/bench-constellation-<time>/rows.jsonl as
it arrives; `--profile` writes a cProfile of `up` (and the initial state) there too (read it with
`python -m pstats`). Subnets 10.64.0.0/16 and 10.65.0.0/16 (bench_up.py's).

    python bench/bench_constellation.py --case delay --sizes 250 500
    python bench/bench_constellation.py --case walker --sizes 100 300 --duration 60s
"""
from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swarm.runtime.swarm import Swarm  # noqa: E402
from swarm.spec.model import spec_from_dict  # noqa: E402

NETS = {"isl": {"subnet": "10.64.0.0/16"}, "ground": {"subnet": "10.65.0.0/16"}}
SWARM_CLI = str(REPO / ".venv" / "bin" / "swarm")


class CommandCounter(logging.Handler):
    """Counts the framework's commands (the runner logs each one) by tool, the netns/nsenter prefix skipped."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.tools: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if not msg.startswith("run: "):
            return
        try:
            words = shlex.split(msg[5:])
        except ValueError:
            return
        while words and (words[0] in ("ip", "nsenter", "sudo") and len(words) > 3 and words[1] == "netns"
                         and words[2] == "exec" or words[0] in ("nsenter", "sudo", "env", "timeout", "nice")):
            if words[0] == "ip":
                words = words[4:]
            else:
                words = words[1:]
                while words and words[0].startswith("-"):
                    words = words[1:]
        self.tools[Path(words[0]).name if words else "?"] += 1


def mem_used_mib() -> float:
    info = {ln.split(":")[0]: int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()}
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def netns_left(name: str) -> int:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
    return sum(1 for ln in out if name in ln)


def fresh_swarm(spec) -> Swarm:
    """The case's Swarm, its messages timestamped on stderr, with whatever an earlier interrupted run left removed."""
    swarm = Swarm(spec)
    swarm.message = lambda m: print(f"  [{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)
    swarm.down()
    return swarm


def take_down(swarm: Swarm, name: str, row: dict) -> None:
    """`down`, timed into the row, and the namespaces it left (0 when whole)."""
    t = time.monotonic()
    swarm.down()
    row["down_s"] = round(time.monotonic() - t, 1)
    row["netns_left"] = netns_left(name)


def walker_orbits(sats: int, planes: int, duration: str) -> dict:
    return {"epoch": "2026-03-20T12:00:00Z", "duration": duration, "step": "1s",
            "satellites": [{"walker": {"total": sats, "planes": planes, "phasing": 1, "altitude": "550km",
                                       "inclination": 53, "prefix": "sat"}}],
            "ground_stations": [{"name": "gs01", "lat": 47.4, "lon": 8.5}],
            "links": {"isl": {"max_range": "5000km", "max_degree": 4},
                      "ground": {"min_elevation": 10, "rate": "50Mbit"}}}


def profiled(out: Path | None, label: str, fn):
    if out is None:
        return fn()
    prof = cProfile.Profile()
    try:
        return prof.runcall(fn)
    finally:
        prof.dump_stats(str(out / f"{label}.prof"))


def run_cli(args: list[str], timeout: float = 900) -> tuple[float, int, int, str]:
    t = time.monotonic()
    res = subprocess.run([SWARM_CLI, *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "COLUMNS": "200"})
    return time.monotonic() - t, res.returncode, len(res.stdout.splitlines()), res.stdout + res.stderr


def ping_rtt(swarm: Swarm, src: str, dst: str) -> float | None:
    addr = swarm.node(dst).isl_ip
    res = swarm.exec(src, ["ping", "-c", "5", "-i", "0.2", "-W", "2", addr], check=False, timeout=30)
    m = re.search(r"= [\d.]+/([\d.]+)/", res.stdout)
    return float(m.group(1)) if m else None


def linkd_cpu_s() -> float:
    """CPU seconds (user + system) used so far by every running swarm-linkd process (the userspace engine, one per
    receiving node), from /proc/<pid>/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] == "swarm-linkd":
            fields = stat[stat.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / tick


def own_cpu_s() -> float:
    """CPU seconds of this process (the orbit driver runs in it) and its waited-for children."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bench_delay(n: int, out: Path, profile: bool, counter: CommandCounter) -> dict:
    name = f"bc-delay-{n}"
    spec = spec_from_dict({"name": name, "backend": "netns", "nodes": n, "networks": NETS,
                           "links": {"default": {"delay": "10ms"}}})
    swarm = fresh_swarm(spec)
    mem0 = mem_used_mib()
    counter.tools.clear()
    row: dict = {"case": "delay", "nodes": n}
    try:
        t = time.monotonic()
        profiled(out if profile else None, f"up-delay-{n}", lambda: swarm.up(ready_timeout=120 + n))
        row["up_s"] = round(time.monotonic() - t, 1)
        row["commands"] = dict(counter.tools.most_common(8))
        row["mem_after_up_mib"] = round(mem_used_mib() - mem0)
        names = [p.name for p in swarm.nodes]
        row["ping_ms"] = ping_rtt(swarm, names[0], names[-1])
        secs, rc, lines, text = run_cli(["impair", name, "--show"])
        row["show_s"], row["show_lines"], row["show_rc"] = round(secs, 1), lines, rc
        (out / f"show-{n}.txt").write_text(text)
    finally:
        take_down(swarm, name, row)
    return row


def bench_walker(n: int, planes: int, duration: str, out: Path, profile: bool, counter: CommandCounter) -> dict:
    from netem.orbits.planner import plan as make_plan
    from netem.runtime.orbits import LinkTimelineDriver
    from netem.spec.orbits import parse_orbits

    t = time.monotonic()
    plan = make_plan(parse_orbits(walker_orbits(n, planes, duration)))
    plan_s = time.monotonic() - t
    name = f"bc-walker-{n}"
    sats = sum(1 for k in plan.kinds.values() if k == "sat")
    spec = spec_from_dict({"name": name, "backend": "netns", "networks": NETS,
                           "groups": [{"prefix": "sat", "count": sats}, {"prefix": "gs", "count": len(plan.nodes) - sats}]})
    swarm = fresh_swarm(spec)
    mem0 = mem_used_mib()
    counter.tools.clear()
    row: dict = {"case": "walker", "nodes": n + 1, "planes": planes, "plan_s": round(plan_s, 1), "pairs_ever_up": len(plan.links())}
    try:
        t = time.monotonic()
        swarm.up(ready_timeout=120 + n)
        row["up_s"] = round(time.monotonic() - t, 1)
        counter.tools.clear()
        driver = LinkTimelineDriver(swarm.links, plan, workers=16,
                                    message=lambda m: print(f"  [{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr,
                                                            flush=True))
        load0 = os.getloadavg()[0]
        engine0, own0 = linkd_cpu_s(), own_cpu_s()
        t = time.monotonic()
        summary = profiled(out if profile else None, f"orbits-{n}", driver.run)
        row["run_s"] = round(time.monotonic() - t, 1)
        # CPU per plan step: every swarm-linkd (the engine) and this process (the driver: plan, batches, shells)
        steps = max(1, sum(1 for t_s, _ in plan.steps() if t_s > 0))
        row["engine_cpu_ms_per_step"] = round(1000 * (linkd_cpu_s() - engine0) / steps, 2)
        row["driver_cpu_ms_per_step"] = round(1000 * (own_cpu_s() - own0) / steps, 2)
        driver.close()
        t = time.monotonic()
        driver.restore()  # as `swarm orbits apply` does after the plan: the spec's links back
        row["restore_s"] = round(time.monotonic() - t, 1)
        row["commands"] = dict(counter.tools.most_common(8))
        row["mem_peak_mib"] = round(mem_used_mib() - mem0)
        for key in ("initial_s", "step_lag_ms_p50", "step_lag_ms_p99", "steps_finished_before_next", "applied_by",
                    "wall_s"):
            if key in summary:
                row[key] = summary[key]
        row["load_before"] = round(load0, 1)
    finally:
        take_down(swarm, name, row)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["delay", "walker"], default="delay")
    ap.add_argument("--sizes", type=int, nargs="+", default=[250])
    ap.add_argument("--planes", type=int, default=0, help="walker planes (default: 40 at 1,000, else a divisor)")
    ap.add_argument("--duration", default="60s", help="walker: plan length (default 60s)")
    ap.add_argument("--profile", action="store_true", help="cProfile of up (delay) / the orbit run (walker)")
    args = ap.parse_args()
    out = REPO / "results" / f"bench-constellation-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    out.mkdir(parents=True)
    counter = CommandCounter()
    logging.getLogger("swarm.run").addHandler(counter)
    logging.getLogger("swarm.run").setLevel(logging.DEBUG)
    print(f"host: {platform.node()}, {os.cpu_count()} cores, {round(mem_used_mib())} MiB used, "
          f"load {os.getloadavg()[0]:.2f}; results in {out}", flush=True)
    for n in args.sizes:
        print(f"-- {args.case} {n} nodes, {time.strftime('%H:%M:%S')}", flush=True)
        if args.case == "delay":
            row = bench_delay(n, out, args.profile, counter)
        else:
            planes = args.planes or next(p for p in (40, 20, 12, 10, 8, 6, 5, 4, 3, 2, 1)
                                         if n % p == 0 and n // p >= 2)
            row = bench_walker(n, planes, args.duration, out, args.profile, counter)
        row["load_after"] = round(os.getloadavg()[0], 1)
        with open(out / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
