"""Capability probe: what this host can do, found by trying it (never by trusting a list).

Kernel features are tried inside a throwaway network namespace made with `unshare --net`, so the probe
creates nothing that outlives it. The result says which path the framework will use (kernel NetEm, the userspace
engine on NFQUEUE or the nftables/HTB fallback, batman-adv or batmand) and is shown by `swarm probe` and stored with results.
"""
from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from functools import lru_cache

from swarm.caps import Capabilities
from swarm.errors import CommandError
from swarm.runtime.runner import Runner
from netem.engines.drivers.linkd import linkd_binary


def _ok(runner: Runner, argv: list[str], timeout: float = 15) -> bool:
    try:
        return runner.run(argv, check=False, timeout=timeout).ok
    except CommandError:
        return False


def _out(runner: Runner, argv: list[str], timeout: float = 15) -> str:
    try:
        res = runner.run(argv, check=False, timeout=timeout)
    except CommandError:
        return ""
    return (res.stdout or res.stderr).strip() if res.ok else ""


def compose_command(runner: Runner) -> tuple[list[str], str]:
    """The Compose CLI to use and its version: `$SWARM_COMPOSE` if set, else v2 plugin, else v1.

    docker-compose v1 is a Python program whose package is named `compose`, like this project's top-level
    package: with the checkout on PYTHONPATH it imports ours and dies (`No module named 'compose.cli'`). Then it
    is run without PYTHONPATH (`env -u PYTHONPATH docker-compose`), and the probe says why (compose_note)."""
    override = os.environ.get("SWARM_COMPOSE")
    candidates = [override.split()] if override else [["docker", "compose"], ["docker-compose"]]
    for argv in candidates:
        version = _out(runner, argv + ["version", "--short"])
        if version:
            return argv, version.splitlines()[0]
        if argv == ["docker-compose"] and shadowing_compose_package():
            unshadowed = ["env", "-u", "PYTHONPATH", "docker-compose"]
            version = _out(runner, unshadowed + ["version", "--short"])
            if version:
                return unshadowed, version.splitlines()[0]
    return [], ""


def shadowing_compose_package(pythonpath: str | None = None) -> str:
    """The PYTHONPATH entry holding a `compose` package that is not docker-compose v1's (no compose/cli/), which
    v1 would import instead of its own; "" when none (pure but for reading the folders named)."""
    for entry in (os.environ.get("PYTHONPATH", "") if pythonpath is None else pythonpath).split(os.pathsep):
        pkg = Path(entry or ".") / "compose"
        if (pkg / "__init__.py").is_file() and not (pkg / "cli").is_dir():
            return str(Path(entry or ".").resolve())
    return ""


def compose_note(compose: list[str]) -> str:
    """One line for the probe when the Compose CLI had to be run without PYTHONPATH, or cannot run for it."""
    shadow = shadowing_compose_package()
    if not shadow:
        return ""
    if compose[:3] == ["env", "-u", "PYTHONPATH"]:
        return (f"docker-compose (v1) runs without PYTHONPATH: {shadow} on it holds this project's `compose` package, "
                "which would shadow docker-compose's own")
    if not compose:
        return (f"no Compose CLI: docker-compose (v1) cannot start with {shadow} on PYTHONPATH (this project's "
                "`compose` package shadows its own); unset PYTHONPATH or install the v2 plugin")
    return ""


#: iptables can match a bridged frame's output port (xt_physdev, which loads br_netfilter) and bridged IPv4 goes
#: through iptables in this namespace
BRIDGE_NF_PROBE = ("iptables -t mangle -A FORWARD -m physdev --physdev-out probe0 -j ACCEPT && "
                   "[ \"$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)\" = 1 ]")


def in_scratch_netns(argv: list[str]) -> list[str]:
    """argv run inside a fresh, unnamed network namespace that disappears when it exits."""
    return ["unshare", "--net", "--"] + argv


def probe(runner: Runner | None = None) -> Capabilities:
    """Probe this host (a few seconds; cached per process by `capabilities()`)."""
    runner = runner or Runner()
    root = os.geteuid() == 0
    docker_version = _out(runner, ["docker", "version", "--format", "{{.Server.Version}}"], timeout=20)
    compose, compose_version = compose_command(runner) if docker_version else ([], "")
    netns = root and _ok(runner, in_scratch_netns(["ip", "link", "set", "lo", "up"]))
    iperf = _out(runner, ["iperf3", "--version"])
    return Capabilities(
        kernel=platform.release(),
        root=root,
        docker=bool(docker_version),
        docker_version=docker_version,
        compose=compose,
        compose_version=compose_version,
        compose_note=compose_note(compose) if docker_version else "",
        netns=netns,
        sch_netem=netns and _ok(runner, in_scratch_netns(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])),
        batman_adv=netns and _ok(runner, in_scratch_netns(["ip", "link", "add", "bat0", "type", "batadv"])),
        nftables=netns and _ok(runner, in_scratch_netns(["nft", "add", "table", "bridge", "swarm_probe"])),
        tbf=netns and _ok(runner, in_scratch_netns(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit",
                                                    "burst", "32k", "latency", "50ms"])),
        iperf3_version=iperf.splitlines()[0] if iperf else "",
        batmand=shutil.which("batmand") is not None,
        ddsperf=shutil.which("ddsperf") is not None,
        htb=netns and _ok(runner, in_scratch_netns(["tc", "qdisc", "add", "dev", "lo", "root", "htb"])),
        nfqueue=netns and _ok(runner, in_scratch_netns(["iptables", "-t", "mangle", "-A", "PREROUTING", "-j", "NFQUEUE",
                                                        "--queue-num", "0"])),
        bridge_nf=netns and _ok(runner, in_scratch_netns(["sh", "-c", BRIDGE_NF_PROBE])),
        linkd=linkd_binary() or "",
    )


@lru_cache(maxsize=1)
def capabilities() -> Capabilities:
    """The probe of this host, run once per process."""
    return probe()
