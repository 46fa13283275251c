"""The multi-host backend's preflight (`check_spec`, nothing created): every host answers, has the rights it
needs, no subnet overlaps a network on any host, the placement fits the capacities."""
from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from compose.render import network_name
from swarm.errors import CommandError, SpecError
from swarm.spec.hosts import HostSpec, dynamic_range, node_mtu, overlay_driver_mtu, place, placeables
from swarm.spec.model import NodePlan, SwarmSpec

from swarm.runtime.backends.multihost.common import MultiHostParts, REACH_TIMEOUT, _hosts_of


class Preflight(MultiHostParts):
    """SwarmBackend's checks (a mixin: the methods use the backend's runner, caps and state)."""

    # ------------------------------------------------------------------------------------------ checks
    def check_available(self) -> None:
        if not self.caps.compose:
            raise SpecError("backend 'swarm': neither 'docker compose' nor 'docker-compose' is installed")

    def _docker(self, host: HostSpec) -> list[str]:
        return ["docker", *host.docker_args()]

    def _reach(self, host: HostSpec) -> str:
        """'' if the host's engine answers, else why not (one line)."""
        try:
            res = self.runner.run([*self._docker(host), "version", "--format", "{{.Server.Version}}"],
                                  check=False, timeout=REACH_TIMEOUT)
        except CommandError as exc:
            return str(exc).rsplit(": ", 1)[-1]
        if res.ok and res.stdout.strip():
            return ""
        return ((res.stderr or res.stdout).strip().splitlines() or ["no answer"])[-1]

    def _swarm_info(self, host: HostSpec) -> dict:
        out = self.runner.run([*self._docker(host), "info", "--format", "{{json .Swarm}}"], timeout=30).stdout
        return json.loads(out or "{}")

    def _networks(self, host: HostSpec) -> list[tuple[str, str]]:
        """(network name, subnet) of every network the host's engine knows."""
        ids = self.runner.run([*self._docker(host), "network", "ls", "-q"], timeout=30).stdout.split()
        if not ids:
            return []
        res = self.runner.run([*self._docker(host), "network", "inspect", "--format",
                               "{{.Name}}{{range .IPAM.Config}} {{.Subnet}}{{end}}", *ids], check=False, timeout=60)
        out = []
        for line in res.stdout.splitlines():
            name, *subnets = line.split()
            out += [(name, s) for s in subnets if "." in s]
        return out

    def check_spec(self, spec: SwarmSpec, nodes: list[NodePlan]) -> dict:
        """Everything that can be checked before creating anything, on every host; SpecError naming the
        host and field otherwise. Returns (and keeps for `up`) the plan: placement, Swarm facts, ranges."""
        hosts = _hosts_of(spec)
        placement = place(placeables(spec), hosts, spec.placement.policy)
        check_features(spec, nodes, across_hosts=len(set(placement.values())) > 1)
        ranges = {w: dynamic_range(getattr(spec.networks, w).subnet, len(nodes), len(hosts), w) for w in ("isl", "ground")}
        labels = [f"hosts[{i}] ({h.name!r})" for i, h in enumerate(hosts)]
        ssh = [(label, h) for label, h in zip(labels, hosts) if h.endpoint.startswith("ssh://")]
        missing = ssh_tools_missing(self.caps.compose) if ssh else ""
        if missing:  # before any host is asked: `docker -H ssh://...` without them fails obscurely
            raise SpecError(f"{ssh[0][0]}.endpoint {ssh[0][1].endpoint!r}: {missing}")
        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            why = list(pool.map(self._reach, hosts))
        for label, h, w in zip(labels, hosts, why):
            if w:
                raise SpecError(f"{label}.endpoint {h.endpoint!r}: unreachable: {w}")
        infos = [self._swarm_info(h) for h in hosts]
        self._check_swarm_states(hosts, labels, infos)
        self._check_subnets(spec, hosts, labels)
        mgr = hosts[0]
        plan = {"hosts": [h.model_dump(mode="json", exclude_none=True) for h in hosts], "placement": placement,
                "manager": mgr.name, "ranges": ranges,
                "mtu": {w: {"spec": getattr(spec.networks, w).mtu,
                            "node": node_mtu(getattr(spec.networks, w).mtu, hosts),
                            "overlay": overlay_driver_mtu(getattr(spec.networks, w).mtu, hosts)} for w in ("isl", "ground")},
                "swarm_state": {h.name: i.get("LocalNodeState", "") for h, i in zip(hosts, infos)},
                "created": []}
        self._preflight[spec.name] = plan
        return plan

    def _check_swarm_states(self, hosts: list[HostSpec], labels: list[str], infos: list[dict]) -> None:
        """The first host is a Swarm manager or in no Swarm; every other host is in no Swarm or in the manager's."""
        mgr, minfo = hosts[0], infos[0]
        mstate = minfo.get("LocalNodeState", "")
        if mstate == "active" and not minfo.get("ControlAvailable"):
            raise SpecError(f"{labels[0]}.endpoint {mgr.endpoint!r}: is a worker in a Swarm; the first host must be a "
                            "Swarm manager (or in no Swarm) to create overlays")
        if mstate not in ("active", "inactive"):
            raise SpecError(f"{labels[0]}.endpoint {mgr.endpoint!r}: Swarm state {mstate!r}; expected active or inactive")
        members = set()
        if mstate == "active":
            members = set(self.runner.run([*self._docker(mgr), "node", "ls", "--format", "{{.ID}}"], timeout=30).stdout.split())
        for label, h, info in zip(labels[1:], hosts[1:], infos[1:]):
            state = info.get("LocalNodeState", "")
            if state == "inactive":
                continue
            if state == "active" and info.get("NodeID") in members:
                continue
            if info.get("NodeID") == minfo.get("NodeID") and state == "active":
                raise SpecError(f"{label}.endpoint {h.endpoint!r}: is the same engine as {labels[0]}")
            raise SpecError(f"{label}.endpoint {h.endpoint!r}: already in another Swarm (state {state!r}); "
                            "make it leave, or list that Swarm's manager first")

    def _check_subnets(self, spec: SwarmSpec, hosts: list[HostSpec], labels: list[str]) -> None:
        """No network on any host overlaps the swarm's subnets (but the swarm's own overlays, at a second `up`)."""
        mine = {w: ipaddress.IPv4Network(getattr(spec.networks, w).subnet) for w in ("isl", "ground")}
        for label, h in zip(labels, hosts):
            for net_name, subnet in self._networks(h):
                theirs = ipaddress.IPv4Network(subnet, strict=False)
                for w, net in mine.items():
                    if theirs.overlaps(net) and net_name != network_name(spec.name, w):
                        raise SpecError(f"{label}: networks.{w}.subnet {str(net)!r} overlaps network {net_name!r} "
                                        f"({theirs}) there; choose another subnet")

    # ------------------------------------------------------------------------------------------- state


def ssh_tools_missing(compose: list[str], path: str | None = None) -> str:
    """What this machine lacks to reach an ssh:// host ('' if nothing), searched in `path` (default $PATH): the
    OpenSSH client, which the Docker CLI (and Compose) run for ssh:// hosts; and, where Compose is Debian's
    docker-compose v1 (a Python program), paramiko for its interpreter: docker-py imports it for any ssh:// host
    and refuses the host without it (found by test_a_host_over_ssh)."""
    if shutil.which("ssh", path=path) is None:
        return "needs the OpenSSH client 'ssh' (Debian package openssh-client), which is not in PATH"
    program = shutil.which(compose[0], path=path) if compose == ["docker-compose"] else None
    if program is None:
        return ""
    try:
        with open(program, "rb") as f:
            first = f.readline(256)
    except OSError:
        return ""
    interpreter = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if not interpreter or not any("python" in part.rsplit("/", 1)[-1] for part in interpreter[:2]):
        return ""  # a compiled docker-compose (v2 standalone) runs ssh itself
    try:
        ok = subprocess.run([*interpreter, "-c", "import paramiko"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if ok:
        return ""
    return (f"docker-compose ({program}, Python) needs paramiko for ssh:// hosts, which its interpreter "
            f"{' '.join(interpreter)} cannot import (Debian package python3-paramiko)")


def check_features(spec: SwarmSpec, nodes: list[NodePlan], across_hosts: bool) -> None:
    """What the multi-host backend cannot run: cFS nodes; across hosts, a mesh or multicast (no broadcast)."""
    for n in nodes:
        if n.spec.cfs is not None:
            raise SpecError(f"node {n.name!r}: cfs: the swarm backend does not run cFS nodes (use backend compose)")
    if across_hosts:
        # Checked here: a UDP broadcast from a node reached its own host's nodes only. Docker's overlay
        # does not flood broadcast or multicast to other hosts' VTEPs.
        if spec.mesh.enabled:
            raise SpecError("mesh.protocol 'batman': the swarm backend's overlays carry no broadcast between hosts, "
                            "so the mesh cannot form across them (pin every node to one host, or use mesh: none)")
        if spec.apps and spec.app.multicast:
            raise SpecError("app.multicast true: the swarm backend's overlays carry no multicast between hosts "
                            "(leave it unset: the swarm backend uses unicast to every peer)")
