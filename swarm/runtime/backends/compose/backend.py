"""Compose backend: one container per node on two Docker bridge networks, driven by a Compose file.

`up` writes compose/<swarm>.yml and runs `<compose> up -d` on it; everything else works from the
`io.swarm-emu.swarm` label, so `down` needs neither the file nor the state (after a crash) and never
touches a container, network or volume the framework did not label.

The swarm's userspace link engine runs on the host beside the swarm's ISL bridge (hostengine.py): the backend's
forwarding hop is the host, the bridge port towards a node is the container's host-side veth; `down` and `wipe`
end the engine (found by its `--swarm` label) and remove the host chains (found by their prefix and tag).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from swarm.cfs.node import NO_CFS, CfsRuntime
from flightsw import protocol as proto
from compose.render import (AGENT_COMMAND, GENERATED_HEADER, LABEL_INDEX, LABEL_NODE, LABEL_SWARM, compose_yaml,
                            container_name, network_name, project_name, render_compose)
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.spec.model import NodePlan, SwarmSpec
from swarm.caps import BACKEND_TRAITS
from swarm.runtime.backends.base import Backend, ForwardingHop, Progress, swarm_dir
from swarm.runtime.backends.compose.hop import ComposeHop
from swarm.runtime.private import write_private_text
import swarm.runtime.backends.compose.hostengine as he

RM_BATCH = 10  # containers per `docker rm`: bounded concurrent endpoint releases in the daemon
STALL_SECONDS = 60  # docker-compose v1 has been seen to hang mid-`up`; retry a batch when nothing moves
UP_BATCH = 20  # services per `compose up` call


class ComposeBackend(Backend):
    """Docker Compose on one host."""

    name = "compose"
    traits = BACKEND_TRAITS[name]
    #: The docker CLI and its global options: the swarm backend aims one instance at each of its hosts.
    docker: tuple[str, ...] | list[str] = ("docker",)
    up_log = "compose-up.log"  # in the swarm's state folder
    #: The swarm's link engine may run on this machine beside its bridge (False for a remote Docker host).
    host_engine: bool = True

    def __init__(self, runner, caps, workdir: Path):
        super().__init__(runner, caps, workdir)
        self._ports: dict[str, dict[int, str]] = {}  # swarm -> {node index: host-side ISL veth}, see isl_ports
        self._hold: dict[str, int] = {}  # swarm -> its NFQUEUE base on the host

    def check_available(self) -> None:
        if not self.caps.docker:
            raise SpecError("backend 'compose': Docker is not running (docker version found no server); use --backend netns")
        if not self.caps.compose:
            raise SpecError("backend 'compose': neither 'docker compose' nor 'docker-compose' is installed")

    def compose_file(self, swarm: str) -> Path:
        return self.workdir / "compose" / f"{swarm}.yml"

    def write_compose(self, spec: SwarmSpec, image: str, source: str = "", cfs: CfsRuntime = NO_CFS) -> Path:
        """Render and write compose/<swarm>.yml (`cfs`: the cFS nodes' images and ulimits); return its path."""
        path = self.compose_file(spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_text(path, compose_yaml(render_compose(spec, image, cfs), source))
        return path

    def compose_argv(self, swarm: str, *args: str) -> list[str]:
        return [*self.caps.compose, "-f", str(self.compose_file(swarm)), "-p", project_name(swarm), *args]

    def up(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, progress: Progress,
           cfs: CfsRuntime = NO_CFS) -> None:
        """`<compose> up -d` in batches of UP_BATCH services, each watched for stalls and retried once.

        docker-compose v1 was seen here to hang for good partway through one `up -d` of 50-100 services
        (every thread waiting, the daemon idle). Batches bound its concurrency, let progress move per
        batch, and turn a hang into one retry of that batch (`up` is idempotent) rather than a failure.
        """
        self.write_compose(spec, image, cfs=cfs)
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
        if at_hop:  # the host engine serves every node from one process (ComposeHop.start_daemon), never one per node
            raise RuntimeFailure(f"node {node!r}: {name}: the compose backend starts no per-node process on the host")
        self.runner.run([*self.docker, "exec", "-d", container_name(swarm, node),
                         *proto.labelled(list(argv), proto.label(swarm, node))], timeout=60)

    # ------------------------------------------------------------- the link engine on the host (hostengine.py)
    def state_dir(self, swarm: str) -> Path:
        return swarm_dir(self.workdir, swarm)

    def hop(self) -> ForwardingHop | None:
        """The host beside the swarm's ISL bridge (ComposeHop), where this machine is the Docker host, we are root
        (host iptables, NFQUEUE, packet sockets) and iptables sees bridged frames (br_netfilter); None otherwise
        (then the userspace engine runs only when pinned, inside each node)."""
        if self.host_engine and self.caps.root and self.caps.bridge_nf and self.caps.nfqueue:
            return ComposeHop(self)
        return None

    def isl_ports(self, swarm: str) -> dict[int, str]:
        """{node index: the host-side veth of the node's ISL interface} of the running nodes: two docker calls for
        the whole swarm (index, pid, ISL network), then files: the bridge's ports (/sys/class/net/<br>/brif) and
        each container's interfaces' iflink (read through /proc/<pid>/root/sys, the container's own sysfs).
        Cached; looked up again when a cached port is gone (a restarted container has new veths)."""
        cached = self._ports.get(swarm)
        if cached and all(os.path.exists(f"/sys/class/net/{p}") for p in cached.values()):
            return cached
        ids = self.runner.run([*self.docker, "ps", "-q", "--filter", f"label={LABEL_SWARM}={swarm}",
                               "--filter", f"label={LABEL_NODE}"], timeout=60).stdout.split()
        if not ids:
            return {}
        fmt = ('{{index .Config.Labels "%s"}} {{.State.Pid}} {{with index .NetworkSettings.Networks "%s"}}'
               '{{.NetworkID}}{{end}}' % (LABEL_INDEX, network_name(swarm, "isl")))
        res = self.runner.run([*self.docker, "inspect", "-f", fmt, *ids], check=False, timeout=60)
        ports: dict[int, str] = {}
        for line in res.stdout.splitlines():
            fields = line.split()
            if len(fields) != 3 or not fields[0].isdigit() or not fields[1].isdigit() or fields[1] == "0":
                continue
            bridge_ports = _bridge_ports(_bridge_of(fields[2]))
            for peer in _container_iflinks(int(fields[1])):
                if peer in bridge_ports:
                    ports[int(fields[0])] = bridge_ports[peer]
        self._ports[swarm] = ports
        return ports

    def run_path_on_host(self, swarm: str, node: str, path: str) -> Path | None:
        """With the engine on the host: its control socket and saved configuration for `node` (host paths under
        the swarm's state, short enough for a socket); None when the engine would run in the node."""
        if self.hop() is None:
            return None
        return he.short_run_path(self.state_dir(swarm), swarm, node, Path(path).relative_to("/run"))

    def _host_cleanup(self, swarm: str | None) -> list[str]:
        """End the host engines of `swarm` (None: of every swarm), remove their host chains and the rules jumping
        to them, and their queue ranges and run folders. Only what carries the framework's label or prefix."""
        if not self._may_have_host_engines():
            return []
        removed = []
        killed = he.kill_engines(swarm)
        if killed:
            removed.append(f"{killed} host engine process(es)")
        save = self._mangle()
        shared = False
        if swarm and he.QUEUE_DIR.exists():
            with he.queue_registry() as reg:
                shared = he.tag_holder(reg, swarm, "") is not None  # a colliding name's swarm runs: keep its chains
        script = he.cleanup_script(save, swarm, shared)
        if script:
            self.runner.run(["iptables-restore", "--noflush"], input=script, timeout=30)
            removed.append(f"{len(he.owned_chains(save, swarm, shared) if swarm else he.our_chains(save))} host chain(s)")
            self._drop_empty_mangle()
        if he.QUEUE_DIR.exists():
            with he.queue_registry() as reg:
                for name in [n for n in reg if swarm is None or n == swarm]:
                    del reg[name]
            if swarm and not shared:
                shutil.rmtree(he.QUEUE_DIR / he.swarm_tag(swarm), ignore_errors=True)
            if swarm is None:
                for d in he.QUEUE_DIR.iterdir():
                    if d.is_dir() and re.fullmatch(r"[0-9a-f]{8}", d.name):
                        shutil.rmtree(d, ignore_errors=True)
        if swarm:
            self._ports.pop(swarm, None)
            self._hold.pop(swarm, None)
        return removed

    def node_binary(self, host_path: str) -> str:
        """A container does not see the host's files: binaries are copied to /usr/local/bin."""
        return f"/usr/local/bin/{Path(host_path).name}"

    def install_binary(self, swarm: str, node: str, host_path: str) -> str:
        """`docker cp` the binary into the container (gone with it)."""
        self.runner.run([*self.docker, "cp", host_path, f"{container_name(swarm, node)}:{self.node_binary(host_path)}"],
                        timeout=60)
        return self.node_binary(host_path)

    def agent_argv(self, swarm: str, node: str, *args: str) -> list[str]:
        return self.exec_prefix(swarm, node, interactive=True) + proto.labelled([*AGENT_COMMAND[:2], *args],
                                                                             proto.label(swarm, node))

    def logs(self, swarm: str, node: str, tail: int = 50) -> str:
        res = self.runner.run([*self.docker, "logs", "--tail", str(tail), container_name(swarm, node)], check=False, timeout=30)
        return (res.stdout + res.stderr).strip()

    def node_action(self, swarm: str, node: str, action: str) -> None:
        argv = {"stop": [*self.docker, "stop", "-t", "2"], "kill": [*self.docker, "kill"], "pause": [*self.docker, "pause"],
                "unpause": [*self.docker, "unpause"], "restart": [*self.docker, "restart", "-t", "2"]}.get(action)
        if argv is None:
            raise SpecError(f"node action {action!r}: expected one of stop, kill, pause, unpause, restart")
        self.runner.run([*argv, container_name(swarm, node)], timeout=120)
        self._ports.pop(swarm, None)  # a restarted container has new veths

    def _remove_labelled(self, label_filter: str) -> list[str]:
        removed: list[str] = []
        ids = self.runner.run([*self.docker, "ps", "-aq", "--filter", label_filter], timeout=60).stdout.split()
        if ids:
            # Off their networks one endpoint at a time, then stop, then remove: with Docker 20.10, releasing
            # many endpoints at once (`rm -f` or `stop` of the swarm's containers) can lose a count update.
            self._disconnect_one_at_a_time(ids)
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

    def _disconnect_one_at_a_time(self, ids: list[str]) -> None:
        """Take the containers `ids` off each of their networks, one endpoint per daemon call.

        Docker 20.10 keeps a network's endpoint count in its store and, when several endpoints of the host are
        released at once (a parallel `docker stop` of a swarm's containers while other containers come and go),
        now and then loses a decrement: the network then refuses removal ('has active endpoints') with nothing
        attached until the daemon restarts ("Fixing inconsistent endpoint_cnt ... Expected=0, Actual=1" on its
        start). Seen at 6 nodes in CI; with plain docker calls here 2 of 60 networks drifted with the parallel
        stop and none of 60 with this (BENCHMARKS.md, "One endpoint per call at `down`"). Errors are left to the
        steps after."""
        fmt = "{{.Id}}{{range $net, $_ := .NetworkSettings.Networks}} {{$net}}{{end}}"
        res = self.runner.run([*self.docker, "inspect", "--format", fmt, *ids], check=False, timeout=60)
        for line in res.stdout.splitlines():
            container, *networks = line.split()
            for net in networks:
                self.runner.run([*self.docker, "network", "disconnect", "--force", net, container], check=False,
                                timeout=60)

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
        return found + self._host_leftovers(swarm)

    def _may_have_host_engines(self) -> bool:
        """Whether an engine of ours can have run on this host (its process, chains and queues to clean up): we are
        root on the Docker host and iptables NFQUEUE works here (also when the placement is off now, e.g. after
        br_netfilter was unloaded)."""
        return self.host_engine and self.caps.root and self.caps.nfqueue

    def _drop_empty_mangle(self) -> None:
        """iptables-nft makes `table ip mangle` for our first rule and never drops it: drop it once nobody's rule,
        chain, set or object is left in it (he.mangle_unused and he.nft_mangle_unused), checked and deleted under
        the host-wide registry lock so two swarms' `down`s do not race."""
        if not he.mangle_unused(self._mangle()):
            return
        with he.queue_registry():
            if not he.mangle_unused(self._mangle()):
                return
            try:
                listing = self.runner.run(["nft", "list", "table", "ip", "mangle"], check=False, timeout=30)
            except CommandError:  # no nft: nothing tells what else the table holds, so it stays
                return
            if listing.ok and he.nft_mangle_unused(listing.stdout):
                self.runner.run(["nft", "delete", "table", "ip", "mangle"], check=False, timeout=30)

    def _mangle(self) -> str:
        """The host's mangle table (`iptables-save -t mangle`); '' where iptables cannot be run."""
        try:
            return self.runner.run(["iptables-save", "-t", "mangle"], check=False, timeout=30).stdout
        except CommandError:
            return ""

    def _host_leftovers(self, swarm: str | None) -> list[tuple[str, str]]:
        if not self._may_have_host_engines():
            return []
        found = [(owner, f"host engine process {pid}") for pid, (owner, _) in sorted(he.host_engines(swarm).items())]
        save = self._mangle()
        owners = he.chain_owners(save)
        found += [(owners.get(c, "?"), f"host chain {c}") for c in he.our_chains(save, swarm)]
        return found

    #: Keep compose/<swarm>.yml on `down` (`swarm down --keep-compose`); by default the file `up` generated
    #: goes with the swarm, so they do not pile up in the checkout.
    keep_compose: bool = False

    def down(self, swarm: str) -> list[str]:
        removed = self._host_cleanup(swarm)
        removed += self._remove_until_gone(f"label={LABEL_SWARM}={swarm}") if self.caps.docker else []
        path = self.compose_file(swarm)
        if not self.keep_compose and path.is_file() and path.read_text(errors="replace").startswith(GENERATED_HEADER):
            path.unlink()  # only a file the framework generated (its header says so), never a user's
            removed.append(f"{path.parent.name}/{path.name}")
        return removed

    def wipe(self) -> list[str]:
        removed = self._host_cleanup(None)
        if not self.caps.docker:
            return removed
        return removed + self._remove_until_gone(f"label={LABEL_SWARM}")


def _bridge_of(network_id: str) -> str:
    """The Linux bridge of a Docker bridge network: `br-` + the network id's first 12 digits (Docker's naming)."""
    return f"br-{network_id[:12]}"


def _bridge_ports(bridge: str) -> dict[int, str]:
    """{ifindex: name} of a bridge's ports (its brif folder in the host's sysfs)."""
    ports = {}
    try:
        for port in os.listdir(f"/sys/class/net/{bridge}/brif"):
            try:
                ports[int(Path(f"/sys/class/net/{port}/ifindex").read_text())] = port
            except (OSError, ValueError):
                pass
    except OSError:
        pass
    return ports


def _container_iflinks(pid: int) -> list[int]:
    """The peer ifindex (iflink) of each interface of the container whose main process is `pid`, from the
    container's own sysfs; `nsenter` into its namespaces where that cannot be read."""
    root = f"/proc/{pid}/root/sys/class/net"
    out = []
    try:
        for dev in os.listdir(root):
            try:
                out.append(int(Path(f"{root}/{dev}/iflink").read_text()))
            except (OSError, ValueError):
                pass
        return out
    except OSError:
        pass
    try:
        res = subprocess.run(["nsenter", "-t", str(pid), "-n", "-m", "sh", "-c", "cat /sys/class/net/*/iflink"],
                             capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in res.stdout.split() if x.isdigit()]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
