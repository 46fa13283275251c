"""The compose backend's userspace link engine on the host, beside the swarm's Docker ISL bridge.

A compose swarm's ISL network is a Docker bridge in the host's network namespace; with br_netfilter the host's
iptables sees every frame crossing it. So the swarm's one link engine (netem.engines.drivers.linkd) runs on the host, as
on the netns backend it runs in the swarm's switch namespace: mangle FORWARD jumps, for frames leaving through the
bridge port towards node N (the container's host-side veth, found from the container's iflink), to the chain
`SWARM_EMU_H<tag>_<N>`, which queues the impaired sources' frames to NFQUEUE `<base> + N`. No binary is copied
into the node image, and every NetEm condition works for a user's own image.

The host is shared (with Docker, with other swarms, with the user's own rules), so everything here is named:
- `tag`: 8 hex digits of the swarm name's SHA-256; chains carry HOST_CHAIN_PREFIX + tag, jumps a comment
  `swarm-emu:<swarm>`; `down` and `wipe` remove only chains with that prefix and the rules jumping to them.
  Two names can share a tag (one pair in ~10^5 names): a swarm whose tag another swarm on the host holds is
  refused under the registry lock, and `down` leaves chains whose jumps name another swarm;
- NFQUEUE numbers: allocated per swarm under a host-wide lock (QUEUE_DIR/linkd-queues.json), first fit from
  QUEUE_FIRST past every range another swarm holds and every queue number already in the host's rules;
- the engine process: its argv carries `--swarm <name>` (its supervising `sh` too), so `ps` names its swarm
  and `down`/`wipe` find it after a crash, also with the swarm's state gone; only processes in the host's
  network namespace count (a netns swarm's engine runs in its switch namespace).
The pure planners (tag, chain names, allocation, parsing iptables-save and a process's argv) are unit-tested.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from swarm.errors import RuntimeFailure
from swarm.runtime.private import open_private, private_dir

HOST_CHAIN_PREFIX = "SWARM_EMU_H"  # every host chain of the framework starts with this
CHAIN_MAX = 28  # iptables chain names: at most 28 characters
QUEUE_FIRST = 1000  # host NFQUEUE numbers below this are left to others (0 is everyone's default)
QUEUE_LAST = 65535
LABEL_ARG = "--swarm"  # swarm-linkd's label argument: the swarm an engine serves
COMMENT_PREFIX = "swarm-emu:"
#: host-wide registry of the queue ranges the swarms hold, and its lock (tmpfs: iptables rules go at reboot too)
QUEUE_DIR = Path(os.environ.get("SWARM_EMU_HOST_RUN", "/run/swarm-emu"))
STATE_FILE = "linkd-host.json"  # in the swarm's state: queue range, tag, engine pids, notes
SUN_PATH_MAX = 100  # a socket path must stay below sun_path's 108 bytes


def swarm_tag(swarm: str) -> str:
    """8 hex digits naming the swarm on the host (chain names are too short for a 32-character swarm name)."""
    return hashlib.sha256(swarm.encode()).hexdigest()[:8]


def chain_prefix(swarm: str) -> str:
    return f"{HOST_CHAIN_PREFIX}{swarm_tag(swarm)}_"


def chain_name(swarm: str, node_index: int) -> str:
    """The host chain of node `node_index`'s incoming links (at most 28 characters: 20 + the index)."""
    name = f"{chain_prefix(swarm)}{node_index}"
    if len(name) > CHAIN_MAX:
        raise RuntimeFailure(f"node index {node_index}: host chain name {name} is longer than {CHAIN_MAX} characters")
    return name


def rule_comment(swarm: str) -> str:
    return f"{COMMENT_PREFIX}{swarm}"


def allocate_queues(used: list[tuple[int, int]], count: int, first: int = QUEUE_FIRST, last: int = QUEUE_LAST) -> int:
    """The first base b >= first with [b, b + count) overlapping none of the `used` (base, count) ranges and
    ending at or below `last` (pure); RuntimeFailure when the host has no such range left."""
    base = first
    for start, n in sorted(used):
        if start + n <= base:
            continue
        if start >= base + count:
            break
        base = start + n
    if base + count - 1 > last:
        raise RuntimeFailure(f"no {count} free NFQUEUE numbers left on this host between {first} and {last} "
                             "(other swarms and the host's own rules hold them); take a swarm down")
    return base


_QUEUE_NUM = re.compile(r"--queue-num (\d+)")
_QUEUE_BAL = re.compile(r"--queue-balance (\d+):(\d+)")


def queues_in_rules(save: str) -> set[int]:
    """Every NFQUEUE number a rule in `iptables-save` output sends to (pure)."""
    used = {int(m) for m in _QUEUE_NUM.findall(save)}
    for a, b in _QUEUE_BAL.findall(save):
        used.update(range(int(a), int(b) + 1))
    return used


def our_chains(save: str, swarm: str | None = None) -> list[str]:
    """The framework's host chains (of `swarm`, or of every swarm) declared in `iptables-save -t mangle`."""
    prefix = chain_prefix(swarm) if swarm else HOST_CHAIN_PREFIX
    return [ln[1:].split()[0] for ln in save.splitlines() if ln.startswith(":" + prefix)]


def cleanup_script(save: str, swarm: str | None = None, shared: bool = False) -> str | None:
    """iptables-restore --noflush script (mangle) removing the framework's host chains (of `swarm`, see
    owned_chains; or of every swarm) and every rule that jumps to them; None when there are none. Nothing else
    is touched (pure)."""
    chains = owned_chains(save, swarm, shared) if swarm else our_chains(save)
    if not chains:
        return None
    mine = set(chains)
    deletes = []
    for ln in save.splitlines():
        words = ln.split()
        if ln.startswith("-A ") and "-j" in words and words[words.index("-j") + 1] in mine and words[1] not in mine:
            deletes.append("-D " + ln[3:])
    body = "".join(f"{d}\n" for d in deletes) + "".join(f"-F {c}\n" for c in chains) + "".join(f"-X {c}\n" for c in chains)
    return f"*mangle\n{body}COMMIT\n"


BUILTIN_MANGLE = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}


def mangle_unused(save: str) -> bool:
    """True when `iptables-save -t mangle` (nf_tables backend) shows the table with no rule and no chain of
    anyone's: the empty table iptables made for our first rule, which nobody else uses (pure)."""
    if "(nf_tables)" not in save or "*mangle" not in save:
        return False
    lines = save.splitlines()
    chains = {ln[1:].split()[0] for ln in lines if ln.startswith(":")}
    return chains <= BUILTIN_MANGLE and not any(ln.startswith("-A ") for ln in lines)


_NFT_EMPTY_BASE = re.compile(r"chain (\S+) \{ type filter hook \S+ priority (mangle|-150); policy accept; \}")


def nft_mangle_unused(listing: str) -> bool:
    """True when `nft list table ip mangle` shows nothing but empty built-in chains with policy accept (what
    iptables-nft leaves): no rule, set, map, object or other chain of anyone's -- iptables-save shows none of
    an nft user's sets, so it alone cannot tell (pure)."""
    body = " ".join(ln.strip() for ln in listing.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))
    if not body.startswith("table ip mangle {") or not body.endswith("}"):
        return False
    rest = body[len("table ip mangle {"):-1].strip()
    for m in _NFT_EMPTY_BASE.finditer(rest):
        if m.group(1) not in BUILTIN_MANGLE:
            return False
    return _NFT_EMPTY_BASE.sub("", rest).strip() == ""


def chain_owners(save: str) -> dict[str, str]:
    """{chain: swarm} from the comments on the jumps to the framework's host chains (pure); a chain whose jump
    is gone is named by its tag."""
    owners = {c: f"tag {c[len(HOST_CHAIN_PREFIX):].split('_')[0]}" for c in our_chains(save)}
    for ln in save.splitlines():
        m = re.search(r'--comment "?' + re.escape(COMMENT_PREFIX) + r'([a-z0-9-]+)"?.*-j (\S+)', ln)
        if m and m.group(2) in owners:
            owners[m.group(2)] = m.group(1)
    return owners


SUPERVISOR_MARK = "swarm-linkd: engine exited"  # in the restart loop's script (netem.engines.drivers.linkd.SUPERVISE)


def engine_of(argv: list[str]) -> tuple[str, bool] | None:
    """(swarm, is the restart loop) when `argv` is a swarm-linkd engine run or its supervising `sh`, labelled
    with `--swarm NAME` (pure); None otherwise (a `ctl` request, anything else)."""
    if LABEL_ARG not in argv or not argv:
        return None
    i = argv.index(LABEL_ARG)
    if i + 1 >= len(argv):
        return None
    swarm = argv[i + 1]
    if Path(argv[0]).name in ("sh", "dash", "bash") and len(argv) > 4 and argv[1] == "-c" and SUPERVISOR_MARK in argv[2]:
        runs = any(_program(a).startswith("swarm-linkd") for a in argv[4:i]) and "run" in argv[4:i]
        return (swarm, True) if runs else None
    if _program(argv[0]).startswith("swarm-linkd") and "run" in argv[1:i]:  # argv[0] may carry a ps label too
        return swarm, False
    return None


def _program(arg: str) -> str:
    """The program's file name in an argv[0] that may carry a ps label ("/path/swarm-linkd swarm-emu:S/N")."""
    return Path(arg.split(" ")[0]).name if arg else ""


def host_engines(swarm: str | None = None) -> dict[int, tuple[str, bool]]:
    """{pid: (swarm, restart loop?)} of the labelled engines running in this (the host's) network namespace."""
    try:
        mine = os.readlink("/proc/self/ns/net")
    except OSError:
        return {}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            which = engine_of(argv)
            if which is None or (swarm is not None and which[0] != swarm):
                continue
            if os.readlink(f"/proc/{entry}/ns/net") != mine:
                continue
        except OSError:
            continue
        found[int(entry)] = which
    return found


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def kill_engines(swarm: str | None = None) -> int:
    """End the host engines of `swarm` (or of every swarm): their restart loops first (SIGKILL, so nothing is
    started again), then the engines (SIGTERM: they remove their sockets; SIGKILL after 2 s). Returns how many."""
    count = 0
    for _round in range(5):
        found = host_engines(swarm)
        if not found:
            break
        count += len(found)
        loops = [p for p, (_, sup) in found.items() if sup]
        engines = [p for p, (_, sup) in found.items() if not sup]
        for pid in loops:
            _signal(pid, signal.SIGKILL)
        for pid in engines:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not all(_gone(p) for p in found):
            for p in found:
                _reap(p)
            time.sleep(0.05)
        for pid in found:
            if not _gone(pid):
                _signal(pid, signal.SIGKILL)
            _reap(pid)
    return count


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------ host-wide queue registry
@contextmanager
def queue_registry() -> Iterator[dict]:
    """The host-wide registry {swarm: {base, count, tag, state}}, locked (flock) for the block and saved after.
    Root writes it: its folder is checked and its lock opened without following links (swarm.runtime.private)."""
    path = private_dir(QUEUE_DIR, "host engine folder") / "linkd-queues.json"
    with os.fdopen(open_private(QUEUE_DIR / "linkd-queues.lock", os.O_RDWR | os.O_CREAT), "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reg = _read_json(path)
        before = json.dumps(reg, sort_keys=True)
        yield reg
        if json.dumps(reg, sort_keys=True) != before:
            _write_json(path, reg)


def read_record(state_dir: Path) -> dict:
    """The host engine's record in a swarm's state folder (STATE_FILE); {} where there is none (yet)."""
    return _read_json(state_dir / STATE_FILE)


def update_record(state_dir: Path, **fields) -> None:
    """Merge `fields` into the swarm's host engine record (queue range, tag, engine pids, notes)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    # Read-merge-write under a lock: the CLI's threads and the engine's supervisor update it at once (a CI run
    # lost a rename when two writers shared one temporary name).
    with open(state_dir / (STATE_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _write_json(state_dir / STATE_FILE, {**read_record(state_dir), **fields})


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        return {}


def _write_json(path: Path, doc: dict) -> None:
    """Written whole or not at all (a temporary file renamed over it): a crash never leaves half a record."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
    try:
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def tag_holder(reg: dict, swarm: str, save: str) -> str | None:
    """Another swarm holding `swarm`'s tag on this host (in the registry, or by the comment on a jump to a chain
    with the tag), or None (pure)."""
    tag = swarm_tag(swarm)
    for other, entry in reg.items():
        if other != swarm and entry.get("tag", swarm_tag(other)) == tag:
            return other
    owners = chain_owners(save)
    return next((o for c in our_chains(save, swarm) if (o := owners[c]) != swarm and not o.startswith("tag ")), None)


def owned_chains(save: str, swarm: str, shared: bool) -> list[str]:
    """`swarm`'s host chains to remove: those with its tag whose jump names it, and those whose jump is gone
    unless another swarm holds the tag (`shared`) (pure)."""
    owners = chain_owners(save)
    return [c for c in our_chains(save, swarm) if owners[c] == swarm or (not shared and owners[c].startswith("tag "))]


def allocate_for(reg: dict, swarm: str, count: int, save: str, state: str) -> int:
    """The queue base of `swarm` in the locked registry `reg`, allocated if it has none (or too few); entries of
    swarms whose state file is gone and that have no chain on the host are dropped first (a crash's leftovers).
    A swarm whose tag another swarm holds is refused (RuntimeFailure, one line): they would share chains."""
    for other, entry in list(reg.items()):
        if other != swarm and not Path(entry.get("state", "")).exists() and not our_chains(save, other):
            del reg[other]
    holder = tag_holder(reg, swarm, save)
    if holder:
        raise RuntimeFailure(f"swarm {swarm!r}: its host tag {swarm_tag(swarm)} is held by swarm {holder!r} on this "
                             "host (the names' 8-hex tags collide); rename one of them")
    entry = reg.get(swarm)
    if entry and entry.get("count", 0) >= count:
        return int(entry["base"])
    held = [(int(e["base"]), int(e["count"])) for o, e in reg.items() if o != swarm]
    held += [(q, 1) for q in queues_in_rules(save) if not (entry and entry["base"] <= q < entry["base"] + entry["count"])]
    base = allocate_queues(held, count)
    reg[swarm] = {"base": base, "count": count, "tag": swarm_tag(swarm), "state": state}
    return base


def short_run_path(state_dir: Path, swarm: str, node: str, rel: Path) -> Path:
    """Where a node's engine socket and saved configuration live on the host: under the swarm's state
    (state_dir/nodes/<node>/run/), or under QUEUE_DIR/<tag>/<node>/ when that path would not fit in sun_path."""
    path = state_dir / "nodes" / node / "run" / rel
    if len(str(path)) < SUN_PATH_MAX:
        return path
    return QUEUE_DIR / swarm_tag(swarm) / node / rel
