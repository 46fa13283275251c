"""Swarm backend: one swarm over several Docker Engines, joined in a Docker Swarm, on overlay networks.

Why not `docker stack deploy`: it silently ignores `ipv4_address` (moby#31345) and refuses
`mac_address`, and the framework's addressing (and the impairments that select links by address and
MAC) depends on both. What works, checked on Engine 20.10: the ISL and ground networks are Swarm
overlays created on the manager with `--attachable --internal`, the spec's subnet and MTU, and each
host runs its share of the nodes as a plain Compose project with those overlays as `external`
networks, so every node keeps its deterministic IPv4 (and the IP-derived MAC Docker gives it).

`up`, in order, each step recorded in <workdir>/.swarm/<name>/hosts.json before it is taken:
1. preflight (`check_spec`, nothing created): every host answers, has the rights it needs (the first
   host is, or becomes, a manager; the others are free or already in that Swarm), no subnet overlaps a
   network on any host, the placement fits the capacities;
2. the Swarm: initialised on the first host if it was in none, the others joined as workers; the
   Swarm's own node labels record what the framework did (io.swarm-emu.created / joined / gwbridge),
   so the last swarm to go down undoes exactly that and nothing else;
3. images: each host lacking the content-hash tag gets it streamed (`docker save | docker load`);
4. overlays: `<swarm>-isl` and `<swarm>-ground`, with `--ip-range` at the top of the subnet for the
   addresses the Swarm hands out itself (per-host load-balancer endpoints), MTU = spec MTU + 50 so the
   node sees the spec's MTU (less, if the hosts' underlay cannot carry it: said at `up`);
5. the overlays attached host by host (manager first) by a short-lived anchor container, each host once
   the ones before it list each other as the overlay's gossip peers: a worker sees a Swarm overlay only
   once a container on it is attached (Compose v1 inspects an external network before creating anything),
   and engines that join a new overlay at the same moment can time out (see _attach_overlays);
6. each host's share as a Compose project (compose/<swarm>@<host>.yml), in parallel over hosts.

`down` works host by host; a host that does not answer is skipped and named with what it still holds,
the state is kept, and `down` can be rerun when it answers. Everything runs through the one runner,
as `docker -H <endpoint> ...` (plus TLS options for tcp://).
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flightsw import protocol as proto
from compose.render import AGENT_COMMAND, LABEL_SWARM, container_name, network_name
from swarm.cfs.node import NO_CFS, CfsRuntime
from swarm.errors import CommandError
from swarm.caps import BACKEND_TRAITS
from swarm.runtime.backends.base import Backend, Progress, swarm_dir
from swarm.runtime.clocks import PROBE_ARGV, ClockOffset, estimate
from swarm.spec.hosts import HostSpec
from swarm.spec.model import NodePlan, SwarmSpec

from swarm.runtime.backends.multihost.common import LOCAL_HOST, REACH_TIMEOUT, CLOCK_EXCHANGES, _hosts_of, HostCompose
from swarm.runtime.backends.multihost.joining import Joining
from swarm.runtime.backends.multihost.overlays import LEAVE_ATTEMPTS  # noqa: F401  (LEAVE_ATTEMPTS: read by tests)
from swarm.runtime.backends.multihost.overlays import Overlays
from swarm.runtime.backends.multihost.preflight import Preflight
from swarm.runtime.backends.multihost.release import Release


class SwarmBackend(Preflight, Joining, Overlays, Release, Backend):
    """Docker Swarm overlays over several hosts; each host's share is a Compose project."""

    name = "swarm"
    traits = BACKEND_TRAITS[name]
    #: The orchestrator is on no overlay: ground addresses are probed from a node, not from the host.
    host_reaches_ground = False
    #: Images and ulimits of cFS nodes (unused: the swarm backend refuses cFS nodes at check_spec).

    def __init__(self, runner, caps, workdir: Path):
        super().__init__(runner, caps, workdir)
        self._plans: dict[str, dict] = {}
        self._preflight: dict[str, dict] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ checks
    def _state_path(self, swarm: str) -> Path:
        return swarm_dir(self.workdir, swarm) / "hosts.json"

    def _save(self, swarm: str, plan: dict) -> None:
        path = self._state_path(swarm)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(plan, indent=1))
        tmp.replace(path)
        self._plans[swarm] = plan

    def _record(self, swarm: str, plan: dict, what: dict) -> None:
        with self._lock:
            plan["created"].append(what)
            self._save(swarm, plan)

    def plan(self, swarm: str) -> dict | None:
        """The swarm's hosts.json (placement, hosts, what was created), or None."""
        if swarm not in self._plans:
            path = self._state_path(swarm)
            if not path.exists():
                return None
            self._plans[swarm] = json.loads(path.read_text())
        return self._plans[swarm]

    def hosts(self, swarm: str) -> list[HostSpec]:
        plan = self.plan(swarm)
        return [HostSpec(**h) for h in plan["hosts"]] if plan else [LOCAL_HOST]

    def node_hosts(self, swarm: str) -> dict[str, str]:
        plan = self.plan(swarm)
        return dict(plan["placement"]) if plan else {}

    def _host_of(self, swarm: str, node: str) -> HostSpec:
        plan = self.plan(swarm)
        if not plan:
            return LOCAL_HOST
        name = plan["placement"].get(node)
        return next((HostSpec(**h) for h in plan["hosts"] if h["name"] == name), LOCAL_HOST)

    def _compose(self, swarm: str, host: HostSpec, plan: dict | None = None) -> HostCompose:
        placement = (plan or self.plan(swarm) or {"placement": {}})["placement"]
        hc = HostCompose(self.runner, self.caps, self.workdir, host, [n for n, h in placement.items() if h == host.name])
        return hc

    # ---------------------------------------------------------------------------------------------- up
    def up(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, progress: Progress,
           cfs: CfsRuntime = NO_CFS) -> None:
        plan = self._preflight.pop(spec.name, None) or self.check_spec(spec, nodes)
        plan["image"] = image
        self._save(spec.name, plan)
        hosts = _hosts_of(spec)
        progress(0, len(nodes), "joining the Docker Swarm")
        self._ensure_swarm(spec.name, plan, hosts)
        self._ship_images(spec, nodes, image, plan, hosts, progress)
        self._create_overlays(spec, plan, hosts[0])
        shares = {h.name: [n for n in nodes if plan["placement"][n.name] == h.name] for h in hosts}
        started = {h.name: 0 for h in hosts}

        def host_progress(host: str):
            def cb(done: int, _total: int, what: str) -> None:
                started[host] = min(done, len(shares[host]))
                progress(sum(started.values()), len(nodes), f"{what} on {len(hosts)} hosts")
            return cb

        anchors = self._attach_overlays(spec, [h for h in hosts if shares[h.name]], image, progress)

        def bring_up(h: HostSpec) -> None:
            if not shares[h.name]:
                return
            hc = self._compose(spec.name, h, plan)
            try:
                hc.up(spec, shares[h.name], image, host_progress(h.name), cfs=cfs)
            finally:
                if h.name in anchors:
                    self.runner.run([*self._docker(h), "rm", "-f", anchors[h.name]], check=False, timeout=120)

        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            for fut in [pool.submit(bring_up, h) for h in hosts]:
                fut.result()
        progress(len(nodes), len(nodes), "containers started")

    def node_states(self, swarm: str) -> dict[str, str]:
        plan = self.plan(swarm)
        hosts = self.hosts(swarm)
        out: dict[str, str] = {}

        def states(h: HostSpec) -> dict[str, str]:
            try:
                return self._compose(swarm, h).node_states(swarm)
            except CommandError:
                if plan is None:
                    return {}
                return {n: "host unreachable" for n, hn in plan["placement"].items() if hn == h.name}

        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            for got in pool.map(states, hosts):
                out.update(got)
        return out

    def netns_ids(self, swarm: str) -> set[str]:
        """None: the nodes live on other kernels; agents release their own servers (swarm sweep)."""
        return set()

    def exec_prefix(self, swarm: str, node: str, interactive: bool = False) -> list[str]:
        return [*self._docker(self._host_of(swarm, node)), "exec", *(["-i"] if interactive else []), container_name(swarm, node)]

    def agent_argv(self, swarm: str, node: str, *args: str) -> list[str]:
        return self.exec_prefix(swarm, node, interactive=True) + proto.labelled([*AGENT_COMMAND[:2], *args],
                                                                             proto.label(swarm, node))

    def start_daemon(self, swarm: str, node: str, argv: list[str], name: str, at_hop: bool = False) -> None:
        self.runner.run([*self._docker(self._host_of(swarm, node)), "exec", "-d", container_name(swarm, node),
                         *proto.labelled(list(argv), proto.label(swarm, node))], timeout=60)

    def logs(self, swarm: str, node: str, tail: int = 50) -> str:
        return self._compose(swarm, self._host_of(swarm, node)).logs(swarm, node, tail)

    def not_ready_detail(self, swarm: str, node: str) -> str:
        """Each host's view of the ISL overlay's gossip peers: a node that runs but does not answer across
        hosts is, on Docker 20.10, most often a host whose overlay gossip has not reached the others."""
        views = []
        for h in self.hosts(swarm):
            peers = self._overlay_peers(swarm, h)
            views.append(f"{h.name} (no answer)" if peers is None else f"{h.name} [{', '.join(peers)}]")
        return f"overlay {network_name(swarm, 'isl')} gossip peers as each host sees them: " + "; ".join(views)

    def node_action(self, swarm: str, node: str, action: str) -> None:
        self._compose(swarm, self._host_of(swarm, node)).node_action(swarm, node, action)

    def clock_offsets(self, swarm: str, exchanges: int = CLOCK_EXCHANGES) -> dict[str, ClockOffset]:
        """Each host's clock against this machine's, measured through a node on that host (NTP-style)."""
        placement = self.node_hosts(swarm)
        out: dict[str, ClockOffset] = {}
        for h in self.hosts(swarm):
            node = next((n for n, hn in placement.items() if hn == h.name), None)
            if node is None:
                continue
            proc = self.runner.popen(self.exec_prefix(swarm, node, interactive=True) + PROBE_ARGV)
            assert proc.stdin is not None and proc.stdout is not None  # popen makes both pipes
            samples = []
            try:
                for _ in range(exchanges):
                    t0 = time.time()
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    t3 = time.time()
                    if not line.strip():
                        break
                    samples.append((t0, float(line), t3))
            finally:
                proc.stdin.close()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            out[h.name] = estimate(h.name, samples[1:] or samples, node)  # the first pays the interpreter's warm-up
        plan = self.plan(swarm)
        if plan is not None:
            plan["clocks"] = {k: v.as_dict() for k, v in out.items()}
            self._save(swarm, plan)
        return out

    def facts(self, swarm: str) -> list[str]:
        """Lines for `up` and `status`: hosts and their share, what a node sees of the overlays, images
        copied, clock offsets."""
        plan = self.plan(swarm)
        if not plan:
            return []
        placement = plan["placement"]
        lines = ["hosts: " + ", ".join(f"{h['name']} ({h.get('endpoint', 'local')}, "
                                       f"{sum(1 for v in placement.values() if v == h['name'])} nodes)"
                                       for h in plan["hosts"]) + f"; Swarm manager {plan['manager']}"]
        mtu = plan["mtu"]
        parts = []
        for w in ("isl", "ground"):
            m = mtu[w]
            note = "" if m["node"] == m["spec"] else f", less than the spec's {m['spec']}: the hosts' underlay carries {m['node'] + 50}"
            parts.append(f"{w} MTU {m['node']} in the nodes (overlay {m['overlay']} less VXLAN's 50 bytes{note})")
        lines.append("overlays: " + "; ".join(parts))
        for img in plan.get("images", []):
            lines.append(f"image {img['tag']} copied to host {img['host']} (docker save | docker load) in {img['seconds']} s")
        clocks = plan.get("clocks", {})
        if clocks:
            lines.append("clocks vs this machine: " + ", ".join(
                f"{h} {c['offset_s'] * 1e3:+.3f} ms ± {c['uncertainty_s'] * 1e3:.3f} ms" for h, c in clocks.items()))
        return lines

    def audit(self, swarm: str | None = None) -> dict[str, list[str]]:
        """What carries the framework's label on each host: {host: ['container x', 'network y', ...]}
        ('unreachable' when the host does not answer)."""
        label = f"label={LABEL_SWARM}" + (f"={swarm}" if swarm else "")
        hosts = self.hosts(swarm) if swarm else [LOCAL_HOST]
        out: dict[str, list[str]] = {}
        for h in hosts:
            if self._reach(h):
                out[h.name] = ["unreachable"]
                continue
            found = []
            for kind, argv in (("container", ["ps", "-a"]), ("network", ["network", "ls"]), ("volume", ["volume", "ls"])):
                res = self.runner.run([*self._docker(h), *argv, "--filter", label, "--format", "{{.Name}}" if kind == "volume"
                                       else "{{.Names}}" if kind == "container" else "{{.Name}}"], check=False, timeout=60)
                found += [f"{kind} {x}" for x in res.stdout.split()]
            out[h.name] = found
        return out

    # -------------------------------------------------------------------------------------------- down
    def describe_hosts(self, swarm: str) -> list[dict[str, Any]]:
        return describe_hosts(self, swarm)


def describe_hosts(backend: SwarmBackend, swarm: str) -> list[dict[str, Any]]:
    """Host facts for results and reports: name, endpoint, engine version, CPUs, memory, nodes, clock."""
    plan = backend.plan(swarm) or {}
    placement = plan.get("placement", {})
    clocks = plan.get("clocks", {})
    out = []
    for h in backend.hosts(swarm):
        res = backend.runner.run([*backend._docker(h), "info", "--format",
                                  "{{.ServerVersion}}|{{.NCPU}}|{{.MemTotal}}|{{.KernelVersion}}|{{.Name}}"],
                                 check=False, timeout=REACH_TIMEOUT)
        parts = res.stdout.strip().split("|") if res.ok else []
        row: dict[str, Any] = {"host": h.name, "endpoint": h.endpoint, "labels": dict(h.labels),
                               "nodes": sum(1 for v in placement.values() if v == h.name)}
        if len(parts) == 5:
            row.update(docker=parts[0], cpu_count=int(parts[1]), memory_gib=round(int(parts[2]) / 2**30, 1),
                       kernel=parts[3], hostname=parts[4])
        else:
            row["unreachable"] = True
        if h.name in clocks:
            row["clock_offset_s"] = clocks[h.name]["offset_s"]
            row["clock_uncertainty_s"] = clocks[h.name]["uncertainty_s"]
        out.append(row)
    return out

