"""Compose backend: one container per node on two Docker bridge networks, driven by a Compose file.

`up` writes compose/<swarm>.yml and runs `<compose> up -d` on it; everything else works from the
`io.swarm-emu.swarm` label, so `down` needs neither the file nor the state (after a crash) and never
touches a container, network or volume the framework did not label.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from swarm.cfs.node import CfsRuntime
from compose.render import (AGENT_COMMAND, GENERATED_HEADER, LABEL_NODE, LABEL_SWARM, compose_yaml, container_name,
                            project_name, render_compose)
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.spec.model import NodePlan, SwarmSpec
from swarm.caps import BackendTraits
from swarm.runtime.backends.base import Backend, Progress, swarm_dir

RM_BATCH = 10  # containers per `docker rm`: bounded concurrent endpoint releases in the daemon
STALL_SECONDS = 60  # docker-compose v1 has been seen to hang mid-`up`; retry a batch when nothing moves
UP_BATCH = 20  # services per `compose up` call


class ComposeBackend(Backend):
    """Docker Compose on one host."""

    name = "compose"
    traits = BackendTraits("compose", containers=True, runs_cfs=True)
    #: The docker CLI and its global options: the swarm backend aims one instance at each of its hosts.
    docker: tuple[str, ...] | list[str] = ("docker",)
    up_log = "compose-up.log"  # in the swarm's state folder
    #: Images and ulimits of cFS nodes, set by Swarm.up before `up` (swarm.cfs.node); empty without cFS nodes.
    cfs: CfsRuntime = CfsRuntime()

    def check_available(self) -> None:
        if not self.caps.docker:
            raise SpecError("backend 'compose': Docker is not running (docker version found no server); use --backend netns")
        if not self.caps.compose:
            raise SpecError("backend 'compose': neither 'docker compose' nor 'docker-compose' is installed")

    def compose_file(self, swarm: str) -> Path:
        return self.workdir / "compose" / f"{swarm}.yml"

    def write_compose(self, spec: SwarmSpec, image: str, source: str = "") -> Path:
        """Render and write compose/<swarm>.yml; return its path."""
        path = self.compose_file(spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(compose_yaml(render_compose(spec, image, self.cfs), source))
        return path

    def compose_argv(self, swarm: str, *args: str) -> list[str]:
        return [*self.caps.compose, "-f", str(self.compose_file(swarm)), "-p", project_name(swarm), *args]

    def up(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, progress: Progress) -> None:
        """`<compose> up -d` in batches of UP_BATCH services, each watched for stalls and retried once.

        docker-compose v1 was seen here to hang for good partway through one `up -d` of 50-100 services
        (every thread waiting, the daemon idle). Batches bound its concurrency, let progress move per
        batch, and turn a hang into one retry of that batch (`up` is idempotent) rather than a failure.
        """
        self.write_compose(spec, image)
        log = swarm_dir(self.workdir, spec.name) / self.up_log
        log.parent.mkdir(parents=True, exist_ok=True)
        names = [n.name for n in nodes]
        for i in range(0, len(names), UP_BATCH):
            batch = names[i:i + UP_BATCH]
            argv = self.compose_argv(spec.name, "up", "-d", "--no-color", "--no-deps", *batch)
            for attempt in (1, 2):
                if self._run_compose(argv, log, i + len(batch), len(nodes), spec.name, progress):
                    break
                if attempt == 2:
                    raise RuntimeFailure(f"compose up: stalled twice on {batch[0]}..{batch[-1]} "
                                         f"(nothing started for {STALL_SECONDS} s); see {log}")
        progress(len(nodes), len(nodes), "containers started")

    def _run_compose(self, argv: list[str], log: Path, target: int, total: int, swarm: str,
                     progress: Progress) -> bool:
        """Run one Compose call; False if it stalled (it is stopped then). Raises if it failed."""
        # Its own session: a Ctrl-C reaches us, and we stop Compose before rolling back, so it cannot
        # go on creating containers behind the rollback.
        proc = self.runner.start(argv, stdout_path=str(log))
        try:
            last, last_change = -1, time.monotonic()
            while proc.poll() is None:
                started = self._count_started(swarm)
                progress(started, total, "starting containers")
                if started != last:
                    last, last_change = started, time.monotonic()
                elif started < target and time.monotonic() - last_change > STALL_SECONDS:
                    _stop(proc)
                    return False
                time.sleep(0.5)
        except BaseException:
            _stop(proc)
            raise
        if proc.returncode != 0:
            raise CommandError(argv, proc.returncode, "", log.read_text(errors="replace"))
        return True

    def _count_started(self, swarm: str) -> int:
        res = self.runner.run(
            [*self.docker, "ps", "-q", "--filter", f"label={LABEL_SWARM}={swarm}", "--filter", f"label={LABEL_NODE}"],
            check=False, timeout=10,
        )  # nodes only: the swarm backend's overlay anchors carry the swarm's label too
        return len(res.stdout.split())

    def node_states(self, swarm: str) -> dict[str, str]:
        res = self.runner.run(
            [*self.docker, "ps", "-a", "--filter", f"label={LABEL_SWARM}={swarm}",
             "--format", f'{{{{.Label "{LABEL_NODE}"}}}}\t{{{{.State}}}}'],
            timeout=30,
        )
        states = {}
        for line in res.stdout.splitlines():
            node, _, state = line.partition("\t")
            states[node] = state
        return states

    def netns_ids(self, swarm: str) -> set[str]:
        ids = self.runner.run([*self.docker, "ps", "-q", "--filter", f"label={LABEL_SWARM}={swarm}"], timeout=60).stdout.split()
        if not ids:
            return set()
        pids = self.runner.run([*self.docker, "inspect", "-f", "{{.State.Pid}}", *ids], timeout=60).stdout.split()
        out = set()
        for pid in pids:
            try:
                out.add(os.readlink(f"/proc/{pid}/ns/net"))
            except OSError:
                pass
        return out

    def exec_prefix(self, swarm: str, node: str, interactive: bool = False) -> list[str]:
        return [*self.docker, "exec", *(["-i"] if interactive else []), container_name(swarm, node)]

    def start_daemon(self, swarm: str, node: str, argv: list[str], name: str, at_hop: bool = False) -> None:
        """`docker exec -d`: the process lives in the container and goes with it (also on `docker restart`)."""
        self.runner.run([*self.docker, "exec", "-d", container_name(swarm, node), *argv], timeout=60)

    def node_binary(self, host_path: str) -> str:
        """A container does not see the host's files: binaries are copied to /usr/local/bin."""
        return f"/usr/local/bin/{Path(host_path).name}"

    def install_binary(self, swarm: str, node: str, host_path: str) -> str:
        """`docker cp` the binary into the container (gone with it)."""
        self.runner.run([*self.docker, "cp", host_path, f"{container_name(swarm, node)}:{self.node_binary(host_path)}"],
                        timeout=60)
        return self.node_binary(host_path)

    def agent_argv(self, swarm: str, node: str, *args: str) -> list[str]:
        return self.exec_prefix(swarm, node, interactive=True) + [*AGENT_COMMAND[:2], *args]

    def logs(self, swarm: str, node: str, tail: int = 50) -> str:
        res = self.runner.run([*self.docker, "logs", "--tail", str(tail), container_name(swarm, node)], check=False, timeout=30)
        return (res.stdout + res.stderr).strip()

    def node_action(self, swarm: str, node: str, action: str) -> None:
        argv = {"stop": [*self.docker, "stop", "-t", "2"], "kill": [*self.docker, "kill"], "pause": [*self.docker, "pause"],
                "unpause": [*self.docker, "unpause"], "restart": [*self.docker, "restart", "-t", "2"]}.get(action)
        if argv is None:
            raise SpecError(f"node action {action!r}: expected one of stop, kill, pause, unpause, restart")
        self.runner.run([*argv, container_name(swarm, node)], timeout=120)

    def _remove_labelled(self, label_filter: str) -> list[str]:
        removed: list[str] = []
        ids = self.runner.run([*self.docker, "ps", "-aq", "--filter", label_filter], timeout=60).stdout.split()
        if ids:
            # Stop first, then remove: with Docker 20.10, `rm -f` of ~100 running containers at once
            # raced the daemon's own network cleanup and left a network with a phantom endpoint.
            self.runner.run([*self.docker, "stop", "-t", "1", *ids], timeout=600, check=False)
            self._wait_endpoints_released(ids)
            for i in range(0, len(ids), RM_BATCH):
                self.runner.run([*self.docker, "rm", "-f", "-v", *ids[i:i + RM_BATCH]], timeout=600)
            removed.append(f"{len(ids)} container(s)")
        nets = self.runner.run([*self.docker, "network", "ls", "-q", "--filter", label_filter], timeout=60).stdout.split()
        if nets:
            self._remove_networks(nets)
            removed.append(f"{len(nets)} network(s)")
        vols = self.runner.run([*self.docker, "volume", "ls", "-q", "--filter", label_filter], timeout=60).stdout.split()
        if vols:
            self.runner.run([*self.docker, "volume", "rm", *vols], timeout=120)
            removed.append(f"{len(vols)} volume(s)")
        return removed

    def _wait_endpoints_released(self, ids: list[str], timeout: float = 120) -> None:
        """Wait until the daemon has released the network endpoints of the stopped containers `ids`.

        Docker 20.10 releases a stopped container's endpoints in its exit handler, one container at a
        time (seconds for 100 containers); removing a container before that finished released them
        twice, and the network's endpoint count drifted: it then refuses removal with 'has active
        endpoints' though nothing is attached. The daemon marks the release itself by clearing each
        network's EndpointID in the container's settings, which is what this polls.
        """
        fmt = "{{range .NetworkSettings.Networks}}{{.EndpointID}}{{end}}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.runner.run([*self.docker, "inspect", "--format", fmt, *ids], check=False, timeout=60)
            if not res.stdout.split():  # every endpoint released (or the containers are already gone)
                return
            time.sleep(0.25)

    def _remove_networks(self, nets: list[str]) -> None:
        """docker network rm, retried briefly: right after `rm -f` of many containers the daemon may still
        be releasing their endpoints and refuse with 'has active endpoints'. When the refusal lasts, the
        network's stored endpoint count has drifted (Docker 20.10; nothing is attached): only a daemon
        restart repairs it (libnetwork logs "Fixing inconsistent endpoint_cnt" on start)."""
        for attempt in range(6):
            res = self.runner.run([*self.docker, "network", "rm", *nets], check=False, timeout=120)
            if res.ok:
                return
            nets = [n for n in nets if self.runner.run([*self.docker, "network", "inspect", n], check=False).ok]
            if not nets:
                return
            time.sleep(0.5 * (attempt + 1))
        raise RuntimeFailure(f"docker network rm {' '.join(nets)}: {res.stderr.strip().splitlines()[0]} "
                             "(nothing is attached: the daemon's endpoint count drifted, a Docker 20.10 bug; "
                             "restart the Docker daemon, which repairs it on start, then run `swarm wipe` again)")

    def _remove_until_gone(self, label_filter: str) -> list[str]:
        """Remove labelled objects; repeat briefly in case a create request was still in flight."""
        removed = self._remove_labelled(label_filter)
        for _ in range(3):
            if not removed or not (more := self._remove_labelled(label_filter)):
                break
            removed += more
            time.sleep(0.5)
        return removed

    def leftovers(self, swarm: str | None = None) -> list[tuple[str, str]]:
        if not self.caps.docker:
            return []
        label = f"label={LABEL_SWARM}" + (f"={swarm}" if swarm else "")
        fmt = f'{{{{.Label "{LABEL_SWARM}"}}}}\t{{{{.%s}}}}'
        found = []
        for kind, argv, field in (("container", ["docker", "ps", "-a"], "Names"), ("network", ["docker", "network", "ls"], "Name"),
                                  ("volume", ["docker", "volume", "ls"], "Name")):
            res = self.runner.run([*argv, "--filter", label, "--format", fmt % field], timeout=60)
            for line in res.stdout.splitlines():
                owner, _, name = line.partition("\t")
                found.append((owner, f"{kind} {name}"))
        return found

    #: Keep compose/<swarm>.yml on `down` (`swarm down --keep-compose`); by default the file `up` generated
    #: goes with the swarm, so they do not pile up in the checkout.
    keep_compose: bool = False

    def down(self, swarm: str) -> list[str]:
        removed = self._remove_until_gone(f"label={LABEL_SWARM}={swarm}") if self.caps.docker else []
        path = self.compose_file(swarm)
        if not self.keep_compose and path.is_file() and path.read_text(errors="replace").startswith(GENERATED_HEADER):
            path.unlink()  # only a file the framework generated (its header says so), never a user's
            removed.append(f"{path.parent.name}/{path.name}")
        return removed

    def wipe(self) -> list[str]:
        if not self.caps.docker:
            return []
        return self._remove_until_gone(f"label={LABEL_SWARM}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
