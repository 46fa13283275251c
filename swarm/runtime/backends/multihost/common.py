"""What the multi-host backend's modules share: the Swarm node labels that record what the framework did,
the local host, time limits; HostCompose, one host's share as a Compose project."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compose.render import LABEL_SWARM, compose_yaml, network_name, render_compose
from swarm.cfs.node import NO_CFS, CfsRuntime
from swarm.runtime.backends.compose.backend import ComposeBackend
from swarm.runtime.private import write_private_text
from swarm.spec.hosts import HostSpec
from swarm.spec.model import SwarmSpec

if TYPE_CHECKING:
    import threading

    from swarm.caps import Capabilities
    from swarm.runtime.runner import Runner



LABEL_CREATED = "io.swarm-emu.swarm-created"  # node label: the framework initialised this Swarm here
LABEL_JOINED = "io.swarm-emu.joined"  # node label: the framework joined this engine to the Swarm
LABEL_GWBRIDGE = "io.swarm-emu.gwbridge"  # node label: docker_gwbridge was absent before (remove it after)
LABEL_ENDPOINT = "io.swarm-emu.endpoint"  # node label: how to reach the engine (JSON list of docker args)
LABEL_ANCHOR = "io.swarm-emu.anchor"
LOCAL_HOST = HostSpec(name="local")
REACH_TIMEOUT = 15.0  # seconds a host gets to answer `docker version`
CLOCK_EXCHANGES = 12



def _hosts_of(spec: SwarmSpec) -> list[HostSpec]:
    return list(spec.hosts or [LOCAL_HOST])


class HostCompose(ComposeBackend):
    """The Compose backend aimed at one host of a multi-host swarm: its nodes only, on external overlays."""

    host_engine = False  # its nodes are on overlays, maybe on another machine: no link engine on this host

    def __init__(self, runner, caps, workdir: Path, host: HostSpec, node_names: list[str] | None = None):
        super().__init__(runner, caps, workdir)
        self.host = host
        self.docker = ["docker", *host.docker_args()]
        self.node_names = node_names or []
        self.up_log = f"compose-up@{host.name}.log"

    def compose_file(self, swarm: str) -> Path:
        return self.workdir / "compose" / f"{swarm}@{self.host.name}.yml"

    def compose_argv(self, swarm: str, *args: str) -> list[str]:
        base = list(self.caps.compose)
        if base[:2] == ["docker", "compose"]:
            base = ["docker", *self.host.docker_args(), "compose"]
        else:
            base = [*base, *self.host.docker_args()]
            if self.host.tls is not None:
                # docker-compose v1 talks through Python requests, which lets REQUESTS_CA_BUNDLE (set on
                # many machines, this one included) override the CA it was given: name the host's CA there.
                base = ["env", f"REQUESTS_CA_BUNDLE={self.host.tls.ca}", *base]
        return [*base, "-f", str(self.compose_file(swarm)), "-p", swarm, *args]

    def write_compose(self, spec: SwarmSpec, image: str, source: str = "", cfs: CfsRuntime = NO_CFS) -> Path:
        doc = render_compose(spec, image, cfs)
        doc["services"] = {k: v for k, v in doc["services"].items() if k in set(self.node_names)}
        doc["networks"] = {w: {"external": True, "name": network_name(spec.name, w)} for w in ("isl", "ground")}
        path = self.compose_file(spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_text(path, compose_yaml(doc, f"{source or spec.name} (host {self.host.name})"))
        return path

    def remove_containers(self, swarm: str) -> list[str]:
        """This host's labelled containers (and volumes); the overlays go on the manager afterwards."""
        label = f"label={LABEL_SWARM}={swarm}"
        removed: list[str] = []
        ids = self.runner.run([*self.docker, "ps", "-aq", "--filter", label], timeout=60).stdout.split()
        if ids:
            self.runner.run([*self.docker, "stop", "-t", "1", *ids], timeout=600, check=False)
            self._wait_endpoints_released(ids)
            for i in range(0, len(ids), 10):
                self.runner.run([*self.docker, "rm", "-f", "-v", *ids[i:i + 10]], timeout=600, check=False)
            removed.append(f"{len(ids)} container(s)")
        vols = self.runner.run([*self.docker, "volume", "ls", "-q", "--filter", label], timeout=60).stdout.split()
        if vols:
            self.runner.run([*self.docker, "volume", "rm", *vols], timeout=120, check=False)
            removed.append(f"{len(vols)} volume(s)")
        path = self.compose_file(swarm)
        if path.exists():
            path.unlink()
        return removed


# A worker's request to attach a container to an overlay goes through the manager; on a busy host Docker 20.10
# answers "attaching to network failed ... context deadline exceeded" now and then (seen in CI over TLS) and the
# same request succeeds a moment later. Such an attachment is tried again; anything else fails at once.


class MultiHostParts:
    """What the multi-host backend's mixins (Preflight, Joining, Overlays, Release) use of the SwarmBackend they
    are mixed into, declared once so that each mixin type-checks on its own; SwarmBackend provides all of it."""

    if TYPE_CHECKING:
        runner: Runner
        caps: Capabilities
        workdir: Path
        _plans: dict[str, dict]
        _preflight: dict[str, dict]
        _lock: threading.Lock

        def _docker(self, host: HostSpec) -> list[str]: ...
        def _reach(self, host: HostSpec) -> str: ...
        def _swarm_info(self, host: HostSpec) -> dict: ...
        def _save(self, swarm: str, plan: dict) -> None: ...
        def _record(self, swarm: str, plan: dict, what: dict) -> None: ...
        def plan(self, swarm: str) -> dict | None: ...
        def hosts(self, swarm: str) -> list[HostSpec]: ...
        def _compose(self, swarm: str, host: HostSpec, plan: dict | None = None) -> HostCompose: ...
