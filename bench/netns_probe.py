"""What the DTN benchmarks read from a running netns swarm beside their figures, to say where the time goes: the CPU
each node's processes used over a span (from /proc, by process name), the host's CPU over the same span, and
samples of a TCP connection's state from `ss -tin` in a node's namespace. Standard library and iproute2 only."""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import defaultdict
from typing import Callable, Optional

TICK = os.sysconf("SC_CLK_TCK")
SS_FIELDS = {"cwnd": r"\bcwnd:(\d+)", "ssthresh": r"\bssthresh:(\d+)", "rtt_ms": r"\brtt:([\d.]+)/",
             "retrans_total": r"\bretrans:\d+/(\d+)", "delivery_mbit": r"\bdelivery_rate ([\d.]+)([KMG]?)bps",
             "unacked": r"\bunacked:(\d+)", "notsent": r"\bnotsent:(\d+)", "app_limited": r"\b(app_limited)\b",
             "busy_ms": r"\bbusy:(\d+)ms", "rwnd_limited_ms": r"\brwnd_limited:(\d+)ms",
             "sndbuf_limited_ms": r"\bsndbuf_limited:(\d+)ms"}


def namespace(swarm: str, node: str) -> str:
    """The node's network namespace (netns backend): the one `ip netns` lists for this swarm and node."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found = [ln.split()[0] for ln in out.splitlines() if ln.strip() and swarm in ln.split()[0]
             and ln.split()[0].endswith(node)]
    if len(found) != 1:
        raise SystemExit(f"no single namespace for {swarm}/{node}: {found}")
    return found[0]


def cpu_by_process(namespaces: dict[str, str]) -> dict[tuple[str, str], float]:
    """CPU seconds (user + system) used so far by each (node, process name) of the named namespaces' processes."""
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    for node, ns in namespaces.items():
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                continue  # ended since
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            seconds[(node, comm)] += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return dict(seconds)


def host_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole host so far (/proc/stat; busy = all but idle and iowait)."""
    parts = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    total = sum(parts[:8])
    return (total - parts[3] - parts[4]) / TICK, total / TICK


class CpuSpan:
    """CPU used by each (node, process) and by the whole host between start() and stop(); processes that start
    inside the span are counted from zero, ones that end inside it are lost (say so where it matters)."""

    def __init__(self, namespaces: dict[str, str]):
        self.namespaces = namespaces

    def start(self) -> None:
        self.before, self.host_before, self.t0 = cpu_by_process(self.namespaces), host_cpu(), time.monotonic()

    def stop(self) -> dict:
        after, host_after = cpu_by_process(self.namespaces), host_cpu()
        wall = time.monotonic() - self.t0
        used = {k: round(v - self.before.get(k, 0.0), 2) for k, v in after.items() if v - self.before.get(k, 0.0) > 0}
        busy = host_after[0] - self.host_before[0]
        return {"wall_s": round(wall, 2), "host_busy_s": round(busy, 2),
                "host_cpus": round((host_after[1] - self.host_before[1]) / wall, 2) if wall else 0,
                "by_process": {f"{n}/{c}": s for (n, c), s in sorted(used.items(), key=lambda kv: -kv[1])},
                "unattributed_s": round(busy - sum(used.values()), 2)}


def parse_ss(text: str, port: int) -> Optional[dict]:
    """The TCP connection with `port` at either end and the largest window in `ss -tin` output, as a dict of
    SS_FIELDS; None when there is none."""
    best = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if f":{port} " not in line + " " or i + 1 >= len(lines):
            continue
        row = _fields(lines[i + 1])
        if row and (best is None or row.get("cwnd", 0) > best.get("cwnd", 0)):
            best = row
    return best


def _fields(info: str) -> dict:
    row: dict = {}
    for key, pattern in SS_FIELDS.items():
        m = re.search(pattern, info)
        if not m:
            continue
        if key == "app_limited":
            row[key] = 1
        elif key == "delivery_mbit":
            row[key] = round(float(m.group(1)) * {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[m.group(2)], 2)
        else:
            row[key] = float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    return row


class SsSampler:
    """`ss -tin` in namespace `ns` every `interval` s in a thread, the connection with `port` kept per sample
    (`on_row` gets each as it is taken: results written as they arrive)."""

    def __init__(self, ns: str, port: int, interval: float = 1.0, on_row: Callable[[dict], None] = lambda r: None):
        self.ns, self.port, self.interval, self.on_row = ns, port, interval, on_row
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "SsSampler":
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.rows

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            out = subprocess.run(["ip", "netns", "exec", self.ns, "ss", "-tin", "state", "established"],
                                 capture_output=True, text=True).stdout
            row = parse_ss(out, self.port)
            if row:
                row = {"t": round(time.monotonic() - t0, 2), **row}
                self.rows.append(row)
                self.on_row(row)
            self._stop.wait(self.interval)


def ss_summary(rows: list[dict]) -> dict:
    """What the samples say of the connection: its largest window, retransmissions, how often the sender had
    nothing to send (app_limited) and, from the kernel's own timers, the share of its busy time it was held by
    the receiver's window or its own send buffer."""
    if not rows:
        return {}
    last = rows[-1]
    busy = last.get("busy_ms") or 0
    return {"samples": len(rows), "max_cwnd": max(r.get("cwnd", 0) for r in rows),
            "retrans_segments": max(r.get("retrans_total", 0) for r in rows),
            "app_limited_share": round(sum(r.get("app_limited", 0) for r in rows) / len(rows), 2),
            "rwnd_limited_share": round((last.get("rwnd_limited_ms") or 0) / busy, 2) if busy else None,
            "sndbuf_limited_share": round((last.get("sndbuf_limited_ms") or 0) / busy, 2) if busy else None,
            "rtt_ms_last": last.get("rtt_ms")}
