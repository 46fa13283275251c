"""Host kernel settings a large swarm needs, planned purely and applied through the runner.

The kernel's IPv4 neighbour (ARP) table is shared by every network namespace, and so by every container:
with the default gc_thresh3 of 1024 entries a full mesh of 33 or more nodes (n*(n-1) entries on the ISL
alone) overflows it and pairs silently stop answering. `up` raises the thresholds when the swarm needs it
and says so; it never lowers them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from swarm.runtime.runner import Runner

NEIGH = "net.ipv4.neigh.default.gc_thresh{}"


def neighbour_entries_needed(nodes: int) -> int:
    """ARP entries for a full ISL mesh plus ground: n*(n-1) between nodes, 2n with host and gateway."""
    return nodes * (nodes - 1) + 2 * nodes


def plan_neighbour_sysctls(nodes: int, current: dict[int, int]) -> dict[str, int]:
    """The gc_thresh settings to raise (name -> value) so `nodes` fit; empty when they already fit.

    Targets: thresh3 (hard limit) twice what is needed, thresh2 (soft limit) what is needed plus half,
    thresh1 (no garbage collection below) what is needed, each only if above the current value.
    """
    need = neighbour_entries_needed(nodes)
    targets = {1: need, 2: need + need // 2, 3: 2 * need}
    return {NEIGH.format(i): v for i, v in targets.items() if v > current.get(i, 0)}


def read_neighbour_sysctls() -> dict[int, int]:
    base = Path("/proc/sys/net/ipv4/neigh/default")
    return {i: int((base / f"gc_thresh{i}").read_text()) for i in (1, 2, 3)}


def ensure_neighbour_capacity(runner: Runner, nodes: int, message: Callable[[str], None]) -> dict[str, int]:
    """Raise the neighbour-table thresholds if `nodes` need it; returns what was set (or would be, if refused)."""
    try:
        current = read_neighbour_sysctls()
    except OSError:
        return {}
    wanted = plan_neighbour_sysctls(nodes, current)
    if not wanted:
        return {}
    res = runner.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in wanted.items())], check=False)
    if res.ok:
        message(f"raised the host's ARP table limits for {nodes} nodes: " + ", ".join(f"{k}={v}" for k, v in wanted.items()))
    else:
        message(f"warning: {nodes} nodes need more ARP entries than the host allows; as root run: sysctl -w "
                + " ".join(f"{k}={v}" for k, v in wanted.items()))
    return wanted
