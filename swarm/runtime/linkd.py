"""The userspace link engine's processes: finding the swarm-linkd binary, starting one engine per node (under
a restart loop), handing it its configuration, and its iptables rules.

Everything lives inside the node: the engine process (netns: started on the host inside the node's namespace,
with the node's own /run; compose: `docker exec -d` in the container, the binary copied in), its control
socket and last configuration in the node's /run, and the framework's chain SWARM_EMU_LINKS in the node's
mangle table. Removing the node (down, wipe) removes all of it. The rules have no --queue-bypass: while no
engine listens, the kernel drops the packets of the impaired links (fail closed); the restart loop brings
the engine back with its last configuration within about a second, and `impair --show` names any node
whose engine is not answering.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from compose.render import container_name
from netem.engines import LINKD_CHAIN, LINKD_CONTROL, LINKD_MAX_BYTES, LINKD_QUEUE, LINKD_STATE
from swarm.errors import CommandError, RuntimeFailure, SpecError

if TYPE_CHECKING:
    from swarm.runtime.swarm import Swarm

LINKD_ENV = "SWARM_LINKD"
IN_CONTAINER = "/usr/local/bin/swarm-linkd"
START_TIMEOUT = 10.0
MAX_PACKETS = 1_000_000
#: Restart loop around the engine: "$0" is the binary, "$@" its arguments (nothing interpolated).
SUPERVISE = ('while :; do "$0" "$@"; echo "swarm-linkd: engine exited with status $?; restarting" >&2; '
             'sleep 0.5; done')


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


def engine_argv(binary: str) -> list[str]:
    """The supervised engine (pure): restart loop, queue, control socket, saved configuration, bounds."""
    return ["sh", "-c", SUPERVISE, binary, "run", "--queue", str(LINKD_QUEUE), "--control", LINKD_CONTROL,
            "--state", LINKD_STATE, "--max-bytes", str(LINKD_MAX_BYTES), "--max-packets", str(MAX_PACKETS), "--realtime"]


def ctl_argv(binary: str, request: str, config: str | None = None) -> list[str]:
    """swarm-linkd ctl (pure); a configuration goes as arguments, one per line (no stdin through docker exec)."""
    lines = [ln for ln in (config or "").splitlines() if ln.strip()]
    return [binary, "ctl", "--control", LINKD_CONTROL, request, *(lines if request == "set" else [])]


def parse_kv(text: str) -> dict[str, str]:
    """`key=value key=value` (the engine's replies and stats' first line) -> dict."""
    return dict(w.split("=", 1) for w in text.split() if "=" in w)


def jump_argv(op: str, iface: str) -> list[str]:
    return ["iptables", "-t", "mangle", op, "PREROUTING", "-i", iface, "-j", LINKD_CHAIN]


class Linkd:
    """One swarm's userspace engines, one per node, through the swarm's backend and runner."""

    def __init__(self, swarm: "Swarm"):
        self.swarm = swarm
        self.backend = swarm.backend
        self.host_binary = swarm.caps.linkd or linkd_binary() or ""

    def binary(self) -> str:
        return IN_CONTAINER if self.backend.name == "compose" else self.host_binary

    def _run(self, node: str, argv: list[str], check: bool = True, timeout: float = 30):
        prefix = self.backend.private_run_prefix(self.swarm.name, node)
        return self.swarm.runner.run(prefix + argv, check=check, timeout=timeout)

    def ping(self, node: str) -> dict[str, str] | None:
        """The engine's answer (pid, gen), or None when no engine answers in the node."""
        try:
            res = self._run(node, ctl_argv(self.binary(), "ping"), check=False, timeout=15)
        except CommandError:
            return None
        return parse_kv(res.stdout) if res.ok and res.stdout.startswith("ok") else None

    def ensure_running(self, node: str, rec: dict) -> None:
        """Start the node's engine if none answers, and wait until it does."""
        if self.ping(node):
            return
        if not self.host_binary:
            raise RuntimeFailure("userspace link engine: no swarm-linkd binary (run `make setup`, or set $SWARM_LINKD)")
        if self.backend.name == "compose":
            self.swarm.runner.run(["docker", "cp", self.host_binary, f"{container_name(self.swarm.name, node)}:{IN_CONTAINER}"],
                                  timeout=60)
        self.backend.start_daemon(self.swarm.name, node, engine_argv(self.binary()), "linkd")
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            answer = self.ping(node)
            if answer:
                rec["linkd_pid"] = int(answer.get("pid", 0))
                return
            time.sleep(0.1)
        raise RuntimeFailure(f"node {node!r}: the userspace link engine did not answer within {START_TIMEOUT:.0f} s "
                             f"(see its log: swarm logs / .swarm/<name>/logs/{node}.linkd.log)")

    def configure(self, node: str, config: str | None) -> dict[str, str]:
        """Hand the engine its whole configuration (replacing the previous one); returns its reply
        (gen, set_at_ns). A configuration the engine refuses is a SpecError (exit 2), though the planner's
        checks normally catch it first."""
        res = self._run(node, ctl_argv(self.binary(), "set", config), check=False)
        if res.returncode == 2:
            raise SpecError(f"node {node!r}: userspace link engine: {(res.stderr or res.stdout).strip()}")
        if not res.ok:
            raise RuntimeFailure(f"node {node!r}: userspace link engine: {(res.stderr or res.stdout).strip()[:200]}")
        return parse_kv(res.stdout)

    def stats(self, node: str) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The engine's counters: the engine's own, and one dict per link."""
        res = self._run(node, ctl_argv(self.binary(), "stats"), check=False, timeout=15)
        if not res.ok:
            return {}, []
        lines = res.stdout.splitlines()
        head = parse_kv(lines[0]) if lines else {}
        links = [{"mac": ln.split()[1], **parse_kv(ln)} for ln in lines[1:] if ln.startswith("link ")]
        return head, links

    def set_rules(self, node: str, iface: str, script: str | None) -> None:
        """Fill the framework's chain (or empty it) and make sure PREROUTING jumps to it from `iface` (once)."""
        prefix = self.backend.exec_prefix(self.swarm.name, node, interactive=True)
        body = script or f"*mangle\n:{LINKD_CHAIN} - [0:0]\nCOMMIT\n"
        self.swarm.runner.run(prefix + ["iptables-restore", "--noflush"], input=body, timeout=30)
        exec_prefix = self.backend.exec_prefix(self.swarm.name, node)
        if not self.swarm.runner.run(exec_prefix + jump_argv("-C", iface), check=False, timeout=30).ok:
            self.swarm.runner.run(exec_prefix + jump_argv("-I", iface), timeout=30)

    def remove_rules(self, node: str, iface: str) -> None:
        """Remove the jump and the chain (only ours), tolerating their absence."""
        exec_prefix = self.backend.exec_prefix(self.swarm.name, node)
        run = self.swarm.runner.run
        while run(exec_prefix + jump_argv("-D", iface), check=False, timeout=30).ok:
            pass
        run(exec_prefix + ["iptables", "-t", "mangle", "-F", LINKD_CHAIN], check=False, timeout=30)
        run(exec_prefix + ["iptables", "-t", "mangle", "-X", LINKD_CHAIN], check=False, timeout=30)
