"""Host kernel settings a swarm needs, planned purely and applied through the runner, and given back at `down`.

The kernel's IPv4 neighbour (ARP) table is shared by every network namespace, and so by every container:
with the default gc_thresh3 of 1024 entries a full mesh of 33 or more nodes (n*(n-1) entries on the ISL
alone) overflows it and pairs silently stop answering. `up` raises the thresholds when the swarm needs it
and says so. The compose host engine needs net.bridge.bridge-nf-call-iptables=1 (host-wide).

Why a ledger: these are host-wide and outlive the swarm; a 1,000-node swarm left gc_thresh3 at 2,002,000.
Every change is recorded in one host-wide file beside the locks (`host-settings.json` in the private lock
folder, swarm.runtime.locks; /run is a tmpfs, so it goes at reboot, as the settings do) under a lock: the
value before, the value set, and the swarms that need it. `down` of the last of them writes the old value
back (if nobody changed it since) and says so; a swarm never lowers what another still needs.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from swarm.errors import RuntimeFailure
from swarm.runtime.locks import lock_dir
from swarm.runtime.private import open_private
from swarm.runtime.runner import Runner

LEDGER = "host-settings.json"
BRIDGE_NF = "net.bridge.bridge-nf-call-iptables"

NEIGH = "net.ipv4.neigh.default.gc_thresh{}"


def neighbour_targets(nodes: int) -> dict[str, int]:
    """What `nodes` need of the neighbour table (pure): thresh3 (hard limit) twice the entries needed, thresh2
    (soft limit) what is needed plus half, thresh1 (no garbage collection below) what is needed."""
    need = neighbour_entries_needed(nodes)
    return {NEIGH.format(1): need, NEIGH.format(2): need + need // 2, NEIGH.format(3): 2 * need}


def neighbour_entries_needed(nodes: int) -> int:
    """ARP entries for a full ISL mesh plus ground: n*(n-1) between nodes, 2n with host and gateway."""
    return nodes * (nodes - 1) + 2 * nodes


def plan_neighbour_sysctls(nodes: int, current: dict[int, int]) -> dict[str, int]:
    """The gc_thresh settings to raise (name -> value) so `nodes` fit; empty when they already fit (pure)."""
    return {k: v for k, v in neighbour_targets(nodes).items() if v > current.get(int(k[-1]), 0)}


def ensure_neighbour_capacity(runner: Runner, nodes: int, message: Callable[[str], None], swarm: str) -> dict[str, int]:
    """Raise the neighbour-table thresholds if `nodes` need it, recorded for `swarm` in the ledger (given back at
    its `down`); returns what was set, a refused write as a negative value."""
    wanted = claim_settings(runner, swarm, neighbour_targets(nodes))
    done = {k: v for k, v in wanted.items() if v > 0}
    refused = {k: -v for k, v in wanted.items() if v < 0}
    if done:
        message(f"raised the host's ARP table limits for {nodes} nodes: " + ", ".join(f"{k}={v}" for k, v in done.items())
                + " (given back at `down`)")
    if refused:
        message(f"warning: {nodes} nodes need more ARP entries than the host allows; as root run: sysctl -w "
                + " ".join(f"{k}={v}" for k, v in refused.items()))
    return wanted


# ------------------------------------------------------------------------------------------------ the ledger
def plan_claim(ledger: dict, swarm: str, key: str, need: int, current: int) -> tuple[dict, int | None]:
    """`swarm` needs `key` >= `need`; the host has `current` (pure). Returns (the ledger after, the value to
    write or None). A value already high enough on its own is not recorded; one the framework raised is
    shared: the swarm joins its users, and the value only goes up."""
    entry = ledger.get(key)
    if entry is None:
        if current >= need:
            return ledger, None
        return {**ledger, key: {"old": current, "value": need, "users": [swarm]}}, need
    if need <= entry["old"]:
        return ledger, None
    value = max(int(entry["value"]), need)
    users = sorted(set(entry["users"]) | {swarm})
    return {**ledger, key: {**entry, "value": value, "users": users}}, (value if current < value else None)


def plan_release(ledger: dict, swarm: str, current: dict[str, int | None]) -> tuple[dict, dict[str, int], list[str]]:
    """`swarm` goes down (pure): (the ledger after, {key: old value to write back}, one line per setting it was
    the last user of). A setting still needed by another swarm stays; one changed by someone else since the
    framework set it is left as it is (and said)."""
    after: dict = {}
    restore: dict[str, int] = {}
    lines: list[str] = []
    for key, entry in ledger.items():
        if swarm not in entry.get("users", []):
            after[key] = entry
            continue
        users = [u for u in entry["users"] if u != swarm]
        if users:
            after[key] = {**entry, "users": users}
            continue
        now = current.get(key)
        if now == entry["value"]:
            restore[key] = int(entry["old"])
            lines.append(f"host setting {key}={entry['old']} (as before; {entry['value']} while needed)")
        else:
            lines.append(f"host setting {key} left at {now} (changed by someone else since it was set to {entry['value']})")
    return after, restore, lines


def read_sysctl(key: str) -> int | None:
    """The current value of sysctl `key` (an integer), None where it is not there."""
    try:
        return int((Path("/proc/sys") / key.replace(".", "/")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def settings_ledger() -> Iterator[dict]:
    """The host-wide ledger {key: {old, value, users}}, locked (flock) for the block and saved after if changed.
    Root writes it beside the locks: the folder is checked and both files opened without following links."""
    folder = lock_dir()
    path = folder / LEDGER
    lock_fd = open_private(folder / (LEDGER + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            fd = open_private(path, os.O_RDONLY)
            with os.fdopen(fd) as f:
                ledger = json.loads(f.read(1 << 20) or "{}")
        except (OSError, ValueError, RuntimeFailure):  # none yet, or not a plain file of ours: a new one
            ledger = {}
        if not isinstance(ledger, dict):
            ledger = {}
        box = {"ledger": ledger}
        before = json.dumps(ledger, sort_keys=True)
        yield box
        if json.dumps(box["ledger"], sort_keys=True) != before:
            tmp = folder / f".{LEDGER}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
                f.write(json.dumps(box["ledger"], indent=1, sort_keys=True))
            os.replace(tmp, path)
    finally:
        os.close(lock_fd)


def claim_settings(runner: Runner, swarm: str, needs: dict[str, int],
                   read: Callable[[str], int | None] = read_sysctl) -> dict[str, int]:
    """Raise each sysctl of `needs` that is lower, recorded for `swarm` in the ledger. Returns {key: value set},
    a refused write as {key: -value} (not recorded)."""
    done: dict[str, int] = {}
    with settings_ledger() as box:
        for key, need in needs.items():
            current = read(key)
            if current is None:
                continue
            ledger, write = plan_claim(box["ledger"], swarm, key, need, current)
            if write is None:
                box["ledger"] = ledger
                continue
            if runner.run(["sysctl", "-q", "-w", f"{key}={write}"], check=False, timeout=30).ok:
                box["ledger"] = ledger
                done[key] = write
            else:
                done[key] = -write
    return done


def release_settings(runner: Runner, swarm: str, read: Callable[[str], int | None] = read_sysctl) -> list[str]:
    """`swarm` is down: every host setting it was the last to need goes back to its old value. Returns one line
    per setting given back or left (for `down` to say)."""
    try:
        with settings_ledger() as box:
            mine = [k for k, e in box["ledger"].items() if swarm in e.get("users", [])]
            if not mine:
                return []
            after, restore, lines = plan_release(box["ledger"], swarm, {k: read(k) for k in mine})
            for key, old in restore.items():
                if not runner.run(["sysctl", "-q", "-w", f"{key}={old}"], check=False, timeout=30).ok:
                    lines = [line if not line.startswith(f"host setting {key}=") else
                             f"host setting {key}: could not be set back to {old}" for line in lines]
            box["ledger"] = after
            return lines
    except RuntimeFailure as exc:  # the lock folder refused (not ours): said, `down` goes on
        return [f"host settings not given back: {exc}"]
