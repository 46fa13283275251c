"""The userspace link engine's processes: finding the swarm-linkd binary, starting one engine per swarm at a
forwarding hop (else one per node, under a restart loop), handing it its configuration, and its iptables rules.

Where the packets are held (LinkdHold): at a forwarding hop, where iptables sees every bridged frame
(br_netfilter) on its way to the receiver: on the netns backend the swarm's switch namespace, on compose the
host beside the swarm's Docker ISL bridge (swarm.runtime.backends.compose.hostengine). One engine for the whole
swarm runs there, serving node N's queue (fed by node N's chain, which mangle FORWARD jumps to for frames
leaving through N's bridge port) with node N's control socket and saved configuration (host paths under the
swarm's state): one process and, under load, one wake-up per tick for all nodes instead of a process and a
wake-up per packet each. At the netns switch the chain is SWARM_EMU_LINKS_N and the queue N+1 (the namespace is
the swarm's own); on the shared host the chain carries a per-swarm tag (SWARM_EMU_H<tag>_N), the jump a comment
naming the swarm, and the queue is the swarm's host-wide allocated base + N. Held there, a packet no longer
counts against its sender's socket, and the receiver's kernel stamps it when it really arrives, so plain
`ping` shows the whole round trip (2 x 1.3 s = 2.6 s to the Moon).
Elsewhere (the multi-host swarm backend, compose without root, a kernel without br_netfilter) everything lives
inside the node: the engine (`docker exec -d` in the container, the binary copied in; only when pinned on a
container backend) and the chain SWARM_EMU_LINKS that the node's mangle PREROUTING jumps to; there the
receiver's kernel stamps a packet before the engine holds it (`ping -U` shows the RTT applications see). The
control socket and last configuration are then in the node's /run.
Every engine's argv carries `--swarm NAME` (where the binary takes it), so `ps` names its swarm and `down`/`wipe`
find a host engine after a crash even without the swarm's state. Removing the swarm (down, wipe) removes all
of it. The rules have no --queue-bypass: while no engine listens, the kernel drops the packets of the impaired
links (fail closed); the restart loop brings the engine back with its last configuration within about a
second, and `impair --show` names any node whose engine is not answering; the next change of the node's links
starts a new engine.
"""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator


from netem.engines.hold import LINKD_CONTROL, LINKD_MAX_BYTES, LINKD_QUEUE, LINKD_STATE, LinkdHold
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.runtime.runner import Result

if TYPE_CHECKING:
    from swarm.runtime.context import SwarmContext
    from swarm.spec.model import NodePlan

LINKD_ENV = "SWARM_LINKD"
#: the engine's bound on packets it leaves in the kernel's queue (swarm-linkd --kernel-hold): past it the engine
#: keeps the bytes itself; set lower to exercise that path (tests), or for a kernel with a smaller bound
KERNEL_HOLD_ENV = "SWARM_LINKD_KERNEL_HOLD"
IN_CONTAINER = "/usr/local/bin/swarm-linkd"
START_TIMEOUT = 10.0
#: Held packets one NFQUEUE queue can track on newer kernels (measured on 6.18: the 65,537th held packet is
#: dropped by the kernel, "nf_queue: hash insert failed: -7"; each queue, i.e. each node's engine, has its own).
#: The engine leaves at most KERNEL_HOLD of them there and keeps the bytes of the rest itself (IPv4 packets
#: up to the MTU; a GSO super-packet or an IPv6 packet still waits in the kernel's queue).
KERNEL_HELD_PACKETS = 65536
KERNEL_HOLD = 49152
MAX_PACKETS = 1_000_000
#: Restart loop around the engine: `sh -c SUPERVISE swarm-linkd BINARY ARGS...`, "$@" the engine's argv (nothing
#: interpolated); the wrapper convention of flightsw.protocol.labelled, so a label reaches the engine itself.
SUPERVISE = ('while :; do "$@"; echo "swarm-linkd: engine exited with status $?; restarting" >&2; '
             'sleep 0.5; done')
SUPERVISOR_NAME = "swarm-linkd"  # the restart loop's $0


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swarm-emu"


def linkd_binary() -> str | None:
    """The swarm-linkd binary: $SWARM_LINKD, else where `make setup` builds it, else on PATH."""
    env = os.environ.get(LINKD_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    built = cache_dir() / "linkd-target" / "release" / "swarm-linkd"
    if os.access(built, os.X_OK):
        return str(built)
    return shutil.which("swarm-linkd")


def label_args(swarm: str | None) -> list[str]:
    """`--swarm NAME` (pure): the label that names the engine's swarm in `ps`, and by which `down` and `wipe` find
    the engine after a crash; nothing for an engine started without a swarm."""
    return ["--swarm", swarm] if swarm else []


@lru_cache(maxsize=8)
def _accepts_label(binary: str, mtime: float) -> bool:
    try:
        res = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--swarm" in res.stderr


def accepts_label(binary: str) -> bool:
    """Whether this swarm-linkd build takes `--swarm NAME` (its usage says so); a binary built before it did
    runs without the label (older `make setup` caches)."""
    try:
        return _accepts_label(binary, os.stat(binary).st_mtime)
    except OSError:
        return False


def engine_argv(binary: str, queue: int = LINKD_QUEUE, inject: tuple[str, str] | None = None,
                kernel_hold: int = KERNEL_HOLD, swarm: str | None = None) -> list[str]:
    """The supervised engine (pure): restart loop, label (`--swarm`), queue, control socket, saved configuration,
    bounds; at a hop `inject` = (bridge port towards the node, the node's MAC) for duplicates and for packets the
    engine keeps past the kernel's bound (swarm-linkd --inject-dev)."""
    extra = ["--inject-dev", inject[0], "--inject-mac", inject[1].lower()] if inject else []
    if kernel_hold != KERNEL_HOLD:
        extra += ["--kernel-hold", str(kernel_hold)]
    return ["sh", "-c", SUPERVISE, SUPERVISOR_NAME, binary, "run", *label_args(swarm), "--queue", str(queue), *extra,
            "--control", LINKD_CONTROL, "--state", LINKD_STATE, "--max-bytes", str(LINKD_MAX_BYTES),
            "--max-packets", str(MAX_PACKETS), "--realtime"]


def instance_spec(queue: int, control: str, state: str, inject: tuple[str, str] | None = None) -> str:
    """One queue of a swarm's engine (pure): `swarm-linkd run --instance` (paths without blanks)."""
    spec = f"queue={queue} control={control} state={state}"
    return spec + (f" inject-dev={inject[0]} inject-mac={inject[1].lower()}" if inject else "")


def swarm_engine_argv(binary: str, instances: list[str], kernel_hold: int = KERNEL_HOLD,
                      swarm: str | None = None) -> list[str]:
    """The supervised engine serving many nodes' queues from one process (pure): one wake-up takes the
    packets waiting for every node and releases those due for every node (batched per queue)."""
    extra = ["--kernel-hold", str(kernel_hold)] if kernel_hold != KERNEL_HOLD else []
    inst = [a for spec in instances for a in ("--instance", spec)]
    return ["sh", "-c", SUPERVISE, SUPERVISOR_NAME, binary, "run", *label_args(swarm), *inst, *extra, "--max-bytes", str(LINKD_MAX_BYTES),
            "--max-packets", str(MAX_PACKETS), "--realtime"]


def kernel_hold_setting() -> int:
    """$SWARM_LINKD_KERNEL_HOLD, else KERNEL_HOLD; a bad value is a SpecError naming it."""
    raw = os.environ.get(KERNEL_HOLD_ENV, "")
    if not raw:
        return KERNEL_HOLD
    if not raw.isdigit() or not 1 <= int(raw) <= KERNEL_HELD_PACKETS:
        raise SpecError(f"${KERNEL_HOLD_ENV} {raw!r}: expected a packet count from 1 to {KERNEL_HELD_PACKETS}")
    return int(raw)


def config_lines(config: str | None) -> list[str]:
    """A configuration's non-blank lines; an empty one is a comment line (so `ctl set` never reads stdin)."""
    return [ln for ln in (config or "").splitlines() if ln.strip()] or ["# no links"]


def ctl_argv(binary: str, request: str, config: str | None = None) -> list[str]:
    """swarm-linkd ctl (pure); a configuration goes as arguments, one per line (no stdin through docker exec)."""
    return [binary, "ctl", "--control", LINKD_CONTROL, request,
            *(config_lines(config) if request in ("set", "sched") else [])]


def ctl_body(request: str, config: str | None = None) -> str:
    """What `swarm-linkd ctl` writes to the control socket (pure): the request line, then a configuration."""
    if request not in ("set", "sched"):
        return f"{request}\n"
    return f"{request}\n" + "".join(f"{ln}\n" for ln in config_lines(config))


def ctl_socket(path: str, body: str, timeout: float) -> Result:
    """One request over the engine's control socket, as `swarm-linkd ctl` makes it (same exit codes: 0 ok,
    2 refused, 1 no engine), without starting a process: a live orbit update is then one socket round trip."""
    argv = ["swarm-linkd-ctl", path]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(body.encode())
            sock.shutdown(socket.SHUT_WR)
            reply = b"".join(iter(lambda: sock.recv(65536), b"")).decode(errors="replace")
    except OSError as exc:
        return Result(argv, 1, "", f"swarm-linkd: {path}: {exc} (engine not running?)")
    if reply.startswith("error: "):
        return Result(argv, 2, "", reply[len("error: "):])
    return Result(argv, 0, reply, "")


def parse_kv(text: str) -> dict[str, str]:
    """`key=value key=value` (the engine's replies and stats' first line) -> dict."""
    return dict(w.split("=", 1) for w in text.split() if "=" in w)


def jump_argv(op: str, iface: str, hold: LinkdHold, hop_port: str | None = None,
              comment: str | None = None) -> list[str]:
    """The jump to the engine's chain (pure): from FORWARD for frames leaving through the node's bridge port at
    the hop, else from the node's PREROUTING for frames arriving on `iface`; `comment` names the swarm where the
    hop is shared (the host)."""
    where = ["FORWARD", "-m", "physdev", "--physdev-out", hop_port] if hop_port else ["PREROUTING", "-i", iface]
    note = ["-m", "comment", "--comment", comment] if comment else []
    return ["iptables", "-t", "mangle", op, *where, *note, "-j", hold.chain]


def stale_jumps(rules: str, chain: str, port: str) -> list[list[str]]:
    """`iptables -S FORWARD` lines jumping to `chain` through another bridge port than `port` (a restarted
    container's old veth), as `-D` argument lists (pure)."""
    out = []
    for ln in rules.splitlines():
        words = shlex.split(ln)
        if words[:2] == ["-A", "FORWARD"] and words[-2:] == ["-j", chain] and "--physdev-out" in words \
                and words[words.index("--physdev-out") + 1] != port:
            out.append(["-D", *words[1:]])
    return out


class Linkd:
    """One swarm's userspace engines, one per node, through the swarm's backend and runner."""

    def __init__(self, swarm: "SwarmContext"):
        self.swarm = swarm
        self.backend = swarm.backend
        # the backend's forwarding hop, where the engine holds packets if iptables sees bridged frames there
        self.at_hop = swarm.backend.hop() if swarm.caps.bridge_nf else None
        self.host_binary = swarm.caps.linkd or linkd_binary() or ""
        self._start_lock = threading.Lock()  # nodes are configured in parallel; the swarm's engine starts once
        self._served_cache: tuple[tuple, dict[str, str]] | None = None  # _served(): the listing as last read
        # see batched_rules: node -> (argv prefix at the hop, bridge port, hold, chain body; None: remove the chain)
        self._batch: dict[str, tuple[list[str], str, LinkdHold, str | None]] | None = None

    def hop(self, node: "NodePlan", iface: str) -> tuple[list[str], str] | None:
        """The forwarding hop where this node's packets are held (argv prefix, bridge port), or None: in the node."""
        return self.at_hop.port(self.swarm.name, node.index, iface) if self.at_hop else None

    def hold(self, node: "NodePlan", iface: str, cut_frames: bool = True) -> LinkdHold:
        if self.at_hop and self.hop(node, iface):
            shared = self.at_hop.hold(self.swarm.name, node.index, len(self.swarm.nodes))
            if shared:  # the host: the swarm's tagged chain and its queue range there
                return LinkdHold(chain=shared[0], queue=shared[1], cut_frames=cut_frames)
            return LinkdHold.at_hop(node.index, cut_frames)
        return LinkdHold(cut_frames=cut_frames)

    def placement(self) -> str:
        """Where this swarm's userspace engine runs (probe, status, host.json)."""
        if self.at_hop:
            return self.at_hop.placement
        if self.backend.traits.containers:
            return "inside each node (the binary copied into the container; pinned only)"
        return "in each node's namespace, at its ingress (no br_netfilter here)"

    def hop_notes(self) -> list[str]:
        """What the backend changed at its forwarding hop that a user should know."""
        return self.at_hop.notes(self.swarm.name) if self.at_hop else []

    def label(self) -> str | None:
        """The swarm's name for the engine's `--swarm` label, where the binary takes it."""
        return self.swarm.name if self.host_binary and accepts_label(self.host_binary) else None

    def binary(self) -> str:
        return self.backend.node_binary(self.host_binary or IN_CONTAINER)

    def _ctl(self, node: str, request: str, config: str | None = None, timeout: float = 30) -> Result:
        """One control request to the node's engine: straight over its socket where the node's /run is a host
        folder (netns), else through `swarm-linkd ctl` run in the node."""
        host = self.backend.run_path_on_host(self.swarm.name, node, LINKD_CONTROL)
        if host is not None and len(str(host)) < 100:  # sun_path holds 108 bytes
            return ctl_socket(str(host), ctl_body(request, config), timeout)
        prefix = self.backend.private_run_prefix(self.swarm.name, node)
        return self.swarm.runner.run(prefix + ctl_argv(self.binary(), request, config), check=False, timeout=timeout)

    def ping(self, node: str) -> dict[str, str] | None:
        """The engine's answer (pid, gen), or None when no engine answers in the node."""
        try:
            res = self._ctl(node, "ping", timeout=15)
        except CommandError:
            return None
        return parse_kv(res.stdout) if res.ok and res.stdout.startswith("ok") else None

    def ensure_running(self, plan: "NodePlan", iface: str, rec: dict) -> None:
        """Start the node's engine (at the hop, or in the node) if none answers, and wait until it does."""
        node = plan.name
        hop = self.hop(plan, iface)
        if hop and self._port_moved(node, hop[1]):  # a restarted container: new veth, so a new engine for all
            with self._start_lock:
                if self._port_moved(node, hop[1]):
                    if self.at_hop:
                        self.at_hop.stop_daemon(self.swarm.name, "linkd")
                    listing = self._engine_list()
                    if listing is not None:
                        listing.unlink(missing_ok=True)
        answer = self.ping(node)
        if answer:  # already served (the swarm's engine, started for another node): record which process
            rec["linkd_pid"] = int(answer.get("pid", 0))
            return
        if not self.host_binary:
            raise RuntimeFailure("userspace link engine: no swarm-linkd binary (run `make setup`, or set $SWARM_LINKD)")
        hop = self.hop(plan, iface)
        binary = self.host_binary if hop else self.backend.install_binary(self.swarm.name, node, self.host_binary)
        if hop and self._start_swarm_engine(plan, iface, binary):
            return self._wait_answer(node, rec)
        argv = engine_argv(binary, self.hold(plan, iface).queue, (hop[1], plan.isl_mac) if hop else None,
                           kernel_hold_setting(), self.label())
        self.backend.start_daemon(self.swarm.name, node, argv, "linkd", at_hop=bool(hop))
        self._wait_answer(node, rec)

    def _engine_list(self) -> Path | None:
        """The nodes whose queues the swarm's engine serves (written when it starts), or None without a hop."""
        sd = getattr(self.backend, "state_dir", None)
        return sd(self.swarm.name) / "linkd-swarm-engine.txt" if sd else None

    def _served(self) -> dict[str, str]:
        """{node: its bridge port when the engine started} of the swarm's engine ('' when not recorded); read
        again only when the file changed (every node's apply asks: 1,001 reads of 1,001 lines at 1,000 nodes)."""
        listing = self._engine_list()
        try:
            st = listing.stat() if listing else None
        except FileNotFoundError:
            st = None
        if listing is None or st is None:
            return {}
        key = (str(listing), st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._served_cache
        if cached is None or cached[0] != key:
            text = listing.read_text()
            cached = (key, {w[0]: (w[1] if len(w) > 1 else "") for w in (ln.split() for ln in text.splitlines()) if w})
            self._served_cache = cached
        return cached[1]

    def _port_moved(self, node: str, port: str) -> bool:
        """The engine serving `node` injects through another port than the node's now (its container restarted)."""
        was = self._served().get(node)
        return bool(was) and was != port

    def _start_swarm_engine(self, plan: "NodePlan", iface: str, binary: str) -> bool:
        """At the hop: one engine for every node of the swarm whose engine does not answer yet (their queues
        are free), started once; True when the node's queue is (or is being) served by it. When a node it lists
        does not answer within START_TIMEOUT (the engine and its restart loop were killed), a new one is started
        for every node that does not answer."""
        listing = self._engine_list()
        with self._start_lock:
            if self.ping(plan.name):
                return True
            ports = self._served()
            served = set(ports)
            if plan.name in served:
                deadline = time.monotonic() + START_TIMEOUT
                while time.monotonic() < deadline:
                    if self.ping(plan.name):
                        return True
                    time.sleep(0.1)
                # the swarm's engine and its restart loop are gone (killed): a new one for every silent node
                served, ports = set(), {}
            instances = self._instances(plan, iface, served)
            if instances is None:
                return False
            specs, names = instances
            argv = swarm_engine_argv(binary, specs, kernel_hold_setting(), self.label())
            if listing is None or not self.at_hop or not self.at_hop.start_daemon(self.swarm.name, argv, "linkd"):
                return False
            ports = {n: p for n, p in ports.items() if n in served} | names
            listing.write_text("".join(f"{n} {p}\n" for n, p in sorted(ports.items())))
            return True

    def _instances(self, plan: "NodePlan", iface: str, served: set[str]) -> tuple[list[str], dict[str, str]] | None:
        """The engine's `--instance` specs for every node not `served` whose engine does not answer (and `plan`'s),
        and {node: its bridge port}; None when `plan`'s queue cannot be served at the hop (no port, no short
        socket path)."""
        specs, names = [], {}
        for n in self.swarm.nodes:
            if n.name in served or (n.name != plan.name and self.ping(n.name)):
                continue
            hop = self.hop(n, iface)
            if not hop and n.name != plan.name:
                continue  # a node that is not running has no port yet: served by an engine of its own later
            control = self.backend.run_path_on_host(self.swarm.name, n.name, LINKD_CONTROL)
            state = self.backend.run_path_on_host(self.swarm.name, n.name, LINKD_STATE)
            if not hop or control is None or state is None or len(str(control)) >= 100 or " " in str(control):
                return None
            control.parent.mkdir(parents=True, exist_ok=True)
            specs.append(instance_spec(self.hold(n, iface).queue, str(control), str(state), (hop[1], n.isl_mac)))
            names[n.name] = hop[1]
        return specs, names

    def _wait_answer(self, node: str, rec: dict) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            answer = self.ping(node)
            if answer:
                rec["linkd_pid"] = int(answer.get("pid", 0))
                return
            time.sleep(0.1)
        raise RuntimeFailure(f"node {node!r}: the userspace link engine did not answer within {START_TIMEOUT:.0f} s "
                             f"(see its log: .swarm/<name>/logs/hop.linkd.log for the swarm's engine, else {node}.linkd.log)")

    def configure(self, node: str, config: str | None) -> dict[str, str]:
        """Hand the engine its whole configuration (replacing the previous one); returns its reply
        (gen, set_at_ns). A configuration the engine refuses is a SpecError (exit 2), though the planner's
        checks normally catch it first."""
        res = self._ctl(node, "set", config)
        if res.returncode == 2:
            raise SpecError(f"node {node!r}: userspace link engine: {(res.stderr or res.stdout).strip()}")
        if not res.ok:
            raise RuntimeFailure(f"node {node!r}: userspace link engine: {(res.stderr or res.stdout).strip()[:200]}")
        return parse_kv(res.stdout)

    def schedule(self, node: str, entries: list[str]) -> dict[str, str]:
        """Hand the engine serving `node` a window of a link schedule (netem.runtime.orbit_schedule): it keeps
        all entries or none; a refusal (an entry in the past, an unknown link, ...) is a SpecError naming it."""
        res = self._ctl(node, "sched", "".join(f"{e}\n" for e in entries), timeout=60)
        if res.returncode == 2:
            raise SpecError(f"link schedule: userspace link engine: {(res.stderr or res.stdout).strip()}")
        if not res.ok:
            raise RuntimeFailure(f"link schedule: node {node!r}'s engine: {(res.stderr or res.stdout).strip()[:200]}")
        return parse_kv(res.stdout.splitlines()[0])

    def schedule_log(self, node: str) -> tuple[int, list[tuple[int, int, int]]]:
        """(changes still pending, [(entry id, due ns, applied ns)] applied since the last call)."""
        res = self._ctl(node, "schedlog", timeout=15)
        if not res.ok:
            raise RuntimeFailure(f"link schedule: node {node!r}'s engine: {(res.stderr or res.stdout).strip()[:200]}")
        lines = res.stdout.splitlines()
        done = [(int(a), int(b), int(c)) for a, b, c in (ln.split() for ln in lines[1:] if ln.strip())]
        return int(parse_kv(lines[0]).get("pending", 0)), done

    def schedule_clear(self, node: str) -> None:
        """Drop what the engine still has pending of a schedule (a stopped run)."""
        self._ctl(node, "schedclear", timeout=15)

    def stats(self, node: str, links: bool = True) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The engine's counters: the engine's own, and one dict per link (`links` False: not parsed; a node of
        a 1,000-node swarm has a line per sender that sent)."""
        res = self._ctl(node, "stats", timeout=15)
        if not res.ok:
            return {}, []
        head_line, _, rest = res.stdout.partition("\n")
        head = parse_kv(head_line)
        if not links:
            return head, []
        lines = rest.splitlines()
        links_out = [{"mac": ln.split()[1], **parse_kv(ln)} for ln in lines if ln.startswith("link ")]
        return head, links_out

    def _comment(self, port: str | None) -> str | None:
        return self.at_hop.comment(self.swarm.name) if port and self.at_hop else None

    def _drop_stale_jumps(self, prefix: list[str], chain: str, port: str) -> None:
        """Remove jumps to `chain` through a port the node no longer has (at a hop whose ports change: the host)."""
        res = self.swarm.runner.run(prefix + ["iptables", "-t", "mangle", "-S", "FORWARD"], check=False, timeout=30)
        for argv in stale_jumps(res.stdout, chain, port):
            self.swarm.runner.run(prefix + ["iptables", "-t", "mangle", *argv], check=False, timeout=30)

    def _rules_prefix(self, plan: "NodePlan", iface: str, interactive: bool = False) -> tuple[list[str], str | None]:
        """Where the node's rules go (argv prefix) and, at a hop, the bridge port to match."""
        hop = self.hop(plan, iface)
        if hop:
            return hop
        return self.backend.exec_prefix(self.swarm.name, plan.name, interactive=interactive), None

    @contextmanager
    def batched_rules(self) -> Iterator[list[str]]:
        """At a hop of the swarm's own (netns): every node's chain and jump set within the block goes to the hop in
        one `iptables-restore` when the block ends (one listing of FORWARD, one sysctl), instead of four or five
        commands per node; the engines were configured first, so no packet meets an engine that does not know
        its link. Yields the nodes whose rules were batched (to mark stale if the restore fails)."""
        if not self.at_hop or self._comment("x") is not None:
            yield []
            return
        self._batch = {}
        nodes: list[str] = []
        try:
            yield nodes
            batch, self._batch = self._batch, None
            nodes += sorted(batch)
            if batch:
                self._flush_rules(batch)
        finally:
            self._batch = None

    def _flush_rules(self, batch: dict[str, tuple[list[str], str, LinkdHold, str | None]]) -> None:
        """One iptables-restore for the batched nodes (see batched_rules): chains filled and jumps made, or jumps
        and chains removed (a node with no link through the engine any more)."""
        hop = self.at_hop
        assert hop is not None  # batched only at a hop
        prefix = next(iter(batch.values()))[0]
        listing = self.swarm.runner.run(prefix + ["iptables", "-t", "mangle", "-S"], check=False, timeout=60)
        lines = listing.stdout.splitlines()
        have = set(lines)
        exists = {ln[3:] for ln in lines if ln.startswith("-N ")}
        by_chain: dict[str, list[str]] = {}  # FORWARD's jumps by target chain, read once (not once per node)
        for ln in lines:
            if ln.startswith("-A FORWARD "):
                by_chain.setdefault(ln.rsplit(" ", 1)[-1], []).append(ln)
        chains, rules, removed = [], [], False
        for _node, (_prefix, port, hold, body) in sorted(batch.items()):
            jump = f"-A FORWARD -m physdev --physdev-out {port} -j {hold.chain}"
            stale = [" ".join(w) for w in stale_jumps("\n".join(by_chain.get(hold.chain, [])), hold.chain, port)]
            if body is None:  # remove: every jump to the chain, then the chain
                removed = True
                rules += stale + (["-D" + jump[2:]] if jump in have else [])
                if hold.chain in exists:
                    rules += [f"-F {hold.chain}", f"-X {hold.chain}"]
                continue
            body_lines = body.splitlines()
            chains += [ln for ln in body_lines if ln.startswith(":")]
            rules += [ln for ln in body_lines if ln.startswith("-A ")]
            if jump not in have:
                rules += stale + [f"-I FORWARD -m physdev --physdev-out {port} -j {hold.chain}"]
        if chains:
            hop.prepare(self.swarm.name)
        script = "*mangle\n" + "".join(f"{c}\n" for c in chains) + "".join(f"{r}\n" for r in rules) + "COMMIT\n"
        self.swarm.runner.run(prefix + ["iptables-restore", "--noflush"], input=script, timeout=300)
        if removed:
            hop.release(self.swarm.name)

    def set_rules(self, plan: "NodePlan", iface: str, script: str | None) -> None:
        """Fill the node's chain (or empty it) and make sure the jump to it exists (once)."""
        hold = self.hold(plan, iface)
        prefix, port = self._rules_prefix(plan, iface, interactive=True)
        body = script or f"*mangle\n:{hold.chain} - [0:0]\nCOMMIT\n"
        if self._batch is not None and port:
            with self._start_lock:
                self._batch[plan.name] = (self._rules_prefix(plan, iface)[0], port, hold, body)
            return
        self.swarm.runner.run(prefix + ["iptables-restore", "--noflush"], input=body, timeout=30)
        prefix, port = self._rules_prefix(plan, iface)
        comment = self._comment(port)
        if not self.swarm.runner.run(prefix + jump_argv("-C", iface, hold, port, comment), check=False, timeout=30).ok:
            if port and self.at_hop:  # bridged IPv4 through iptables at the hop; no jump through an old port
                self.at_hop.prepare(self.swarm.name)
                self._drop_stale_jumps(prefix, hold.chain, port)
            self.swarm.runner.run(prefix + jump_argv("-I", iface, hold, port, comment), timeout=30)

    def remove_rules(self, plan: "NodePlan", iface: str) -> None:
        """Remove the jump and the chain (only ours), tolerating their absence."""
        hold = self.hold(plan, iface)
        prefix, port = self._rules_prefix(plan, iface)
        if self._batch is not None and port:
            with self._start_lock:
                self._batch[plan.name] = (prefix, port, hold, None)
            return
        run = self.swarm.runner.run
        while run(prefix + jump_argv("-D", iface, hold, port, self._comment(port)), check=False, timeout=30).ok:
            pass
        if port:
            self._drop_stale_jumps(prefix, hold.chain, port)
        run(prefix + ["iptables", "-t", "mangle", "-F", hold.chain], check=False, timeout=30)
        run(prefix + ["iptables", "-t", "mangle", "-X", hold.chain], check=False, timeout=30)
        if port and self.at_hop:
            self.at_hop.release(self.swarm.name)
