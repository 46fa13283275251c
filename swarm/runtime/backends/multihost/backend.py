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

from compose.render import AGENT_COMMAND, LABEL_NET, LABEL_SWARM, compose_yaml, container_name, network_name, render_compose
from swarm.cfs.node import CfsRuntime
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.caps import BackendTraits
from swarm.runtime.backends.base import Backend, Progress, swarm_dir
from swarm.runtime.backends.compose.backend import ComposeBackend
from swarm.runtime.clocks import PROBE_ARGV, ClockOffset, estimate
from swarm.spec.hosts import HostSpec, dynamic_range, node_mtu, overlay_driver_mtu, place, placeables
from swarm.spec.model import NodePlan, SwarmSpec, gateway_address

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

    def write_compose(self, spec: SwarmSpec, image: str, source: str = "") -> Path:
        doc = render_compose(spec, image, self.cfs)
        doc["services"] = {k: v for k, v in doc["services"].items() if k in set(self.node_names)}
        doc["networks"] = {w: {"external": True, "name": network_name(spec.name, w)} for w in ("isl", "ground")}
        path = self.compose_file(spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(compose_yaml(doc, f"{source or spec.name} (host {self.host.name})"))
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
ATTACH_TRANSIENT = ("attaching to network failed", "context deadline exceeded")
ATTACH_ATTEMPTS = 3
LEAVE_ATTEMPTS = 3
INGRESS_SETTLE_S = 15.0  # how long a leave waits for the engine to finish setting up the Swarm's ingress
GWBRIDGE_RM_S = 10.0  # how long docker_gwbridge removal is retried while the ingress sandbox lets go of it
PEER_WAIT_S = 30.0  # how long `up` waits for a newly attached host to appear in the others' overlay peers


class SwarmBackend(Backend):
    """Docker Swarm overlays over several hosts; each host's share is a Compose project."""

    name = "swarm"
    traits = BackendTraits("swarm", containers=True, multi_host=True)
    #: The orchestrator is on no overlay: ground addresses are probed from a node, not from the host.
    host_reaches_ground = False
    #: Images and ulimits of cFS nodes (unused: the swarm backend refuses cFS nodes at check_spec).
    cfs: CfsRuntime = CfsRuntime()

    def __init__(self, runner, caps, workdir: Path):
        super().__init__(runner, caps, workdir)
        self._plans: dict[str, dict] = {}
        self._preflight: dict[str, dict] = {}
        self._lock = threading.Lock()

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
        import ipaddress

        hosts = _hosts_of(spec)
        placement = place(placeables(spec), hosts, spec.placement.policy)
        for n in nodes:
            if n.spec.cfs is not None:
                raise SpecError(f"node {n.name!r}: cfs: the swarm backend does not run cFS nodes (use backend compose)")
        if len(set(placement.values())) > 1:
            # Checked here: a UDP broadcast from a node reached its own host's nodes only. Docker's overlay
            # does not flood broadcast or multicast to other hosts' VTEPs.
            if spec.mesh.enabled:
                raise SpecError("mesh.protocol 'batman': the swarm backend's overlays carry no broadcast between hosts, "
                                "so the mesh cannot form across them (pin every node to one host, or use mesh: none)")
            if spec.apps and spec.app.multicast:
                raise SpecError("app.multicast true: the swarm backend's overlays carry no multicast between hosts "
                                "(leave it unset: the swarm backend uses unicast to every peer)")
        ranges = {w: dynamic_range(getattr(spec.networks, w).subnet, len(nodes), len(hosts), w) for w in ("isl", "ground")}
        labels = [f"hosts[{i}] ({h.name!r})" for i, h in enumerate(hosts)]
        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            why = list(pool.map(self._reach, hosts))
        for label, h, w in zip(labels, hosts, why):
            if w:
                raise SpecError(f"{label}.endpoint {h.endpoint!r}: unreachable: {w}")
        infos = [self._swarm_info(h) for h in hosts]
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
        mine = {w: ipaddress.IPv4Network(getattr(spec.networks, w).subnet) for w in ("isl", "ground")}
        for label, h in zip(labels, hosts):
            for net_name, subnet in self._networks(h):
                theirs = ipaddress.IPv4Network(subnet, strict=False)
                for w, net in mine.items():
                    if theirs.overlaps(net) and net_name != network_name(spec.name, w):
                        raise SpecError(f"{label}: networks.{w}.subnet {str(net)!r} overlaps network {net_name!r} "
                                        f"({theirs}) there; choose another subnet")
        plan = {"hosts": [h.model_dump(mode="json", exclude_none=True) for h in hosts], "placement": placement,
                "manager": mgr.name, "ranges": ranges,
                "mtu": {w: {"spec": getattr(spec.networks, w).mtu,
                            "node": node_mtu(getattr(spec.networks, w).mtu, hosts),
                            "overlay": overlay_driver_mtu(getattr(spec.networks, w).mtu, hosts)} for w in ("isl", "ground")},
                "swarm_state": {h.name: i.get("LocalNodeState", "") for h, i in zip(hosts, infos)},
                "created": []}
        self._preflight[spec.name] = plan
        return plan

    # ------------------------------------------------------------------------------------------- state
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
        hc.cfs = self.cfs
        return hc

    # ---------------------------------------------------------------------------------------------- up
    def up(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, progress: Progress) -> None:
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
                hc.up(spec, shares[h.name], image, host_progress(h.name))
            finally:
                if h.name in anchors:
                    self.runner.run([*self._docker(h), "rm", "-f", anchors[h.name]], check=False, timeout=120)

        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            for fut in [pool.submit(bring_up, h) for h in hosts]:
                fut.result()
        progress(len(nodes), len(nodes), "containers started")

    def _ensure_swarm(self, swarm: str, plan: dict, hosts: list[HostSpec]) -> None:
        mgr = hosts[0]
        d = self._docker(mgr)
        if plan["swarm_state"][mgr.name] == "inactive":
            gw_before = self._has_gwbridge(mgr)
            self._record(swarm, plan, {"host": mgr.name, "what": "swarm-init", "gwbridge_before": gw_before})
            argv = [*d, "swarm", "init"]
            if mgr.advertise_addr:
                argv += ["--advertise-addr", mgr.advertise_addr]
            self.runner.run(argv, timeout=120)
            self._label_self(mgr, {LABEL_CREATED: swarm, LABEL_ENDPOINT: json.dumps(mgr.docker_args()),
                                   **({} if gw_before else {LABEL_GWBRIDGE: "1"})})
        token = self.runner.run([*d, "swarm", "join-token", "-q", "worker"], timeout=60).stdout.strip()
        addr = self.runner.run([*d, "info", "--format", "{{.Swarm.NodeAddr}}"], timeout=30).stdout.strip()
        for h in hosts[1:]:
            if plan["swarm_state"][h.name] != "inactive":
                continue
            gw_before = self._has_gwbridge(h)
            self._record(swarm, plan, {"host": h.name, "what": "swarm-join", "gwbridge_before": gw_before})
            argv = [*self._docker(h), "swarm", "join", "--token", token]
            if h.advertise_addr:
                argv += ["--advertise-addr", h.advertise_addr]
            self.runner.run([*argv, f"{addr}:2377"], timeout=120)
            node_id = self.runner.run([*self._docker(h), "info", "--format", "{{.Swarm.NodeID}}"], timeout=30).stdout.strip()
            plan["swarm_state"][h.name] = "active"
            self._node_labels(mgr, node_id, {LABEL_JOINED: "1", LABEL_ENDPOINT: json.dumps(h.docker_args()),
                                             **({} if gw_before else {LABEL_GWBRIDGE: "1"})})
        plan["swarm_state"][mgr.name] = "active"
        self._save(swarm, plan)

    def _has_gwbridge(self, host: HostSpec) -> bool:
        return self.runner.run([*self._docker(host), "network", "inspect", "docker_gwbridge"], check=False, timeout=30).ok

    def _label_self(self, host: HostSpec, labels: dict[str, str]) -> None:
        node_id = self.runner.run([*self._docker(host), "info", "--format", "{{.Swarm.NodeID}}"], timeout=30).stdout.strip()
        self._node_labels(host, node_id, labels)

    def _node_labels(self, mgr: HostSpec, node_id: str, labels: dict[str, str]) -> None:
        args = [a for k, v in labels.items() for a in ("--label-add", f"{k}={v}")]
        self.runner.run([*self._docker(mgr), "node", "update", *args, node_id], timeout=60)

    def _ship_images(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, plan: dict, hosts: list[HostSpec],
                     progress: Progress) -> None:
        """Stream every image a host's nodes need to that host when it lacks the tag (no registry needed)."""
        local = LOCAL_HOST
        for h in hosts:
            wanted = {n.spec.image or image for n in nodes if plan["placement"][n.name] == h.name}
            if wanted:
                wanted.add(image)  # the anchor that attaches the overlays on the host runs the node image
            wanted = sorted(wanted)
            for tag in wanted:
                if self.runner.run([*self._docker(h), "image", "inspect", "--format", "{{.Id}}", tag],
                                   check=False, timeout=60).ok:
                    continue
                if h.docker_args() == local.docker_args():
                    raise SpecError(f"image {tag!r}: not found on host {h.name!r} (no registry to pull from)")
                progress(0, len(nodes), f"copying image {tag} to host {h.name}")
                t0 = time.monotonic()
                self.runner.pipe(["docker", "save", tag], [*self._docker(h), "load", "-q"], timeout=1800)
                plan.setdefault("images", []).append({"host": h.name, "tag": tag, "seconds": round(time.monotonic() - t0, 1)})
                self._save(spec.name, plan)

    def _create_overlays(self, spec: SwarmSpec, plan: dict, mgr: HostSpec) -> None:
        for which in ("isl", "ground"):
            net = getattr(spec.networks, which)
            name = network_name(spec.name, which)
            self._record(spec.name, plan, {"host": mgr.name, "what": "overlay", "name": name})
            self.runner.run([*self._docker(mgr), "network", "create", "--driver", "overlay", "--attachable", "--internal",
                             "--subnet", net.subnet, "--gateway", gateway_address(net.subnet),
                             "--ip-range", plan["ranges"][which],
                             "--opt", f"com.docker.network.driver.mtu={plan['mtu'][which]['overlay']}",
                             "--label", f"{LABEL_SWARM}={spec.name}", "--label", f"{LABEL_NET}={which}", name], timeout=120)

    def _attach_overlays(self, spec: SwarmSpec, hosts: list[HostSpec], image: str, progress: Progress) -> dict[str, str]:
        """Attach both overlays on each host that runs nodes, one host at a time (the manager first), each
        once the hosts before it see one another as the overlay's gossip peers; {host: anchor container}.

        Why one at a time: when the first containers of a new overlay started on two engines at once, Docker
        20.10 answered "attaching to network failed ... context deadline exceeded" after 20 s on one of them,
        10 s before its log said "Bulk sync to node <the other> timed out" (seen in CI, on the manager and on
        the worker). An engine that joins an overlay synchronises it with the engines already on it; with
        every host attached beforehand, the nodes start on overlays each engine has already joined."""
        anchors: dict[str, str] = {}
        for i, h in enumerate(hosts):
            progress(0, len(hosts), f"attaching the overlays on host {h.name} ({i + 1}/{len(hosts)})")
            anchors[h.name] = self._anchor(spec, h, image)
            if i and not self._wait_overlay_peers(spec.name, hosts[:i + 1]):
                self._check_network_agents(spec.name, hosts[:i + 1])
                progress(0, len(hosts), f"host {h.name}: the overlay's gossip peers did not agree within "
                                        f"{PEER_WAIT_S:.0f} s; going on (readiness judges the nodes)")
        return anchors

    def _check_network_agents(self, swarm: str, hosts: list[HostSpec]) -> None:
        """Raise RuntimeFailure naming each host whose engine lists no gossip peer at all on the ISL overlay,
        not even itself, although a container of ours is attached there: that engine's gossip did not start (seen in
        CI: every node there then failed readiness 62 s later, in four tests in a row), so fail now, naming it."""
        dead = [h.name for h in hosts if self._overlay_peers(swarm, h) == []]
        if dead:
            raise RuntimeFailure(
                f"host {', '.join(dead)}: its Docker engine did not join the overlay's gossip (overlay "
                f"{network_name(swarm, 'isl')} lists no gossip peers, not even the host itself, {PEER_WAIT_S:.0f} s after "
                f"a container attached), so its nodes cannot reach other hosts; that dockerd's log says why (look for "
                f"'agentInit' or 'memberlist': e.g. gossip port 7946 still bound after an earlier `swarm leave`, a leak "
                f"fixed upstream in moby PR 50115); fix that host's engine, then run `up` again")

    def _wait_overlay_peers(self, swarm: str, hosts: list[HostSpec], timeout: float | None = None) -> bool:
        """Wait until each host's engine lists every one of `hosts` as a gossip peer of the ISL overlay;
        False (and go on: readiness then judges the nodes) if that did not happen within `timeout` (PEER_WAIT_S)."""
        deadline = time.monotonic() + (PEER_WAIT_S if timeout is None else timeout)
        while True:
            agree = all(len(self._overlay_peers(swarm, h) or []) >= len(hosts) for h in hosts)
            if agree or time.monotonic() > deadline:
                return agree
            time.sleep(0.5)

    def _overlay_peers(self, swarm: str, host: HostSpec) -> list[str] | None:
        """The addresses the host's engine lists as gossip peers of the swarm's ISL overlay (Docker 20.10's
        `network inspect --verbose` Peers), sorted; None if the engine did not answer."""
        res = self.runner.run([*self._docker(host), "network", "inspect", "--verbose", "--format", "{{json .Peers}}",
                               network_name(swarm, "isl")], check=False, timeout=30)
        if not res.ok:
            return None
        try:
            return sorted(p.get("IP", "?") for p in json.loads(res.stdout or "null") or [])
        except ValueError:
            return []

    def _anchor(self, spec: SwarmSpec, host: HostSpec, image: str) -> str:
        """A container that attaches both overlays on a host: a worker sees a Swarm overlay (and Compose v1
        finds it) only once something on it is attached; see _attach_overlays for why the manager gets one too."""
        d = self._docker(host)
        name = f"{spec.name}-anchor-{host.name}"
        for attempt in range(ATTACH_ATTEMPTS):
            self.runner.run([*d, "rm", "-f", name], check=False, timeout=60)
            try:
                self.runner.run([*d, "run", "-d", "--name", name, "--label", f"{LABEL_SWARM}={spec.name}",
                                 "--label", f"{LABEL_ANCHOR}=1", "--network", network_name(spec.name, "isl"),
                                 "--entrypoint", "sleep", image, "600"], timeout=120)
                self.runner.run([*d, "network", "connect", network_name(spec.name, "ground"), name], timeout=60)
                return name
            except CommandError as exc:
                if attempt + 1 == ATTACH_ATTEMPTS or not any(m in exc.stderr for m in ATTACH_TRANSIENT):
                    raise
                time.sleep(2.0 * (attempt + 1))

    # ----------------------------------------------------------------------------------------- looking
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
        return self.exec_prefix(swarm, node, interactive=True) + [*AGENT_COMMAND[:2], *args]

    def start_daemon(self, swarm: str, node: str, argv: list[str], name: str, at_hop: bool = False) -> None:
        self.runner.run([*self._docker(self._host_of(swarm, node)), "exec", "-d", container_name(swarm, node), *argv], timeout=60)

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
    def down(self, swarm: str) -> list[str]:
        plan = self.plan(swarm)
        if plan is None:
            return []
        hosts = self.hosts(swarm)
        removed: list[str] = []
        remaining: list[str] = []
        reach = {h.name: self._reach(h) for h in hosts}

        def clear(h: HostSpec) -> list[str]:
            return self._compose(swarm, h, plan).remove_containers(swarm)

        live = [h for h in hosts if not reach[h.name]]
        with ThreadPoolExecutor(max(1, min(8, len(live) or 1))) as pool:
            for h, got in zip(live, pool.map(clear, live)):
                removed += [f"{h.name}: {r}" for r in got]
        for h in hosts:
            if reach[h.name]:
                nodes = sorted(n for n, hn in plan["placement"].items() if hn == h.name)
                held = f"containers {nodes[0]}..{nodes[-1]}" if nodes else "no containers"
                remaining.append(f"host {h.name} ({h.endpoint}) unreachable ({reach[h.name]}): still holds {held}")
        mgr = next(h for h in hosts if h.name == plan["manager"])
        if not reach[mgr.name]:
            nets = self.runner.run([*self._docker(mgr), "network", "ls", "-q", "--filter", f"label={LABEL_SWARM}={swarm}"],
                                   timeout=60).stdout.split()
            if nets:
                # Right after the containers go, the Swarm may still hold their attachments for a moment;
                # with a host unreachable its attachments stay, so one try is enough to know.
                attempts = 1 if remaining else 10
                for attempt in range(attempts):
                    res = self.runner.run([*self._docker(mgr), "network", "rm", *nets], check=False, timeout=120)
                    nets = [n for n in nets if self.runner.run([*self._docker(mgr), "network", "inspect", n],
                                                               check=False, timeout=30).ok]
                    if not nets:
                        break
                    time.sleep(0.5 * (attempt + 1))
                if nets:
                    names = self.runner.run([*self._docker(mgr), "network", "inspect", "--format", "{{.Name}}", *nets],
                                            check=False, timeout=30).stdout.split() or nets
                    why = next((ln for ln in (res.stderr or "").splitlines() if "Error" in ln), "still in use")
                    remaining.append(f"host {mgr.name}: overlays {', '.join(names)} kept ({why.strip()[:160]})")
                else:
                    removed.append(f"{mgr.name}: 2 overlay network(s)")
            removed += self._release_swarm(mgr, hosts, reach, plan, remaining)
        else:
            remaining.append(f"host {mgr.name} ({mgr.endpoint}) unreachable ({reach[mgr.name]}): still holds the "
                             f"overlays {network_name(swarm, 'isl')}, {network_name(swarm, 'ground')} and the Swarm")
        if remaining:
            plan["remaining"] = remaining
            self._save(swarm, plan)
            raise RuntimeFailure(f"swarm {swarm!r} partly removed ({'; '.join(removed) or 'nothing'}); "
                                 + "; ".join(remaining) + f"; run `swarm down {swarm}` again when it answers")
        self._plans.pop(swarm, None)
        return removed

    def _release_swarm(self, mgr: HostSpec, hosts: list[HostSpec], reach: dict[str, str], plan: dict,
                       remaining: list[str]) -> list[str]:
        """Undo what the framework did to the Swarm, once no swarm of the framework uses it any more:
        workers it joined leave (and lose the docker_gwbridge joining made), and if it initialised the
        Swarm the manager leaves too. What the framework did is read from the Swarm's node labels."""
        d = self._docker(mgr)
        removed: list[str] = []
        info = self._swarm_info(mgr)
        if info.get("LocalNodeState") != "active" or not info.get("ControlAvailable"):
            return self._finish_rejoins(hosts, reach, plan, removed)
        if self.runner.run([*d, "network", "ls", "-q", "--filter", f"label={LABEL_SWARM}", "--filter", "driver=overlay"],
                           timeout=60).stdout.split():
            return removed  # another swarm of the framework still uses this Swarm
        ids = self.runner.run([*d, "node", "ls", "--format", "{{.ID}}"], timeout=60).stdout.split()
        nodes = json.loads(self.runner.run([*d, "node", "inspect", *ids], timeout=60).stdout or "[]") if ids else []
        self_id = info.get("NodeID")
        ingress = self._ingress_network(mgr)
        # This swarm's own record backs the labels up: an `up` interrupted between `swarm init`/`join` and
        # the label it puts on the node still released what it made.
        records = {(c["host"], c["what"]): c for c in plan.get("created", [])}
        init = records.get((mgr.name, "swarm-init"))
        created_here = init is not None
        gw_here = init is not None and not init.get("gwbridge_before", True)
        handled: set[str] = set()
        retry: list[dict] = []  # workers that did not leave: asked again by the next `down`, not this one
        for node in nodes:
            labels = node.get("Spec", {}).get("Labels", {}) or {}
            if node["ID"] == self_id:
                created_here = created_here or LABEL_CREATED in labels
                gw_here = gw_here or LABEL_GWBRIDGE in labels
                continue
            if LABEL_JOINED not in labels:
                continue
            args = json.loads(labels.get(LABEL_ENDPOINT, "[]"))
            host_name = next((h.name for h in hosts if h.docker_args() == args), node.get("Description", {}).get("Hostname", "?"))
            handled.add(host_name)
            wd = ["docker", *args]
            if host_name in reach and reach[host_name]:
                remaining.append(f"host {host_name}: still a member of the Swarm (it will be asked to leave on the next `down`)")
                plan.setdefault("pending_leave", []).append({"args": args, "gwbridge": LABEL_GWBRIDGE in labels})
            elif (why := self._leave(wd, ingress)):
                remaining.append(f"host {host_name}: did not leave the Swarm ({why}); the next `down` asks it again")
                retry.append({"args": args, "gwbridge": LABEL_GWBRIDGE in labels})
            else:
                removed.append(f"{host_name}: left the Swarm")
                if LABEL_GWBRIDGE in labels and self._remove_gwbridge(wd):
                    removed.append(f"{host_name}: docker_gwbridge")
            self.runner.run([*d, "node", "rm", "--force", node["ID"]], check=False, timeout=60)
        for h in hosts:  # joined by this swarm's `up` but never labelled (interrupted right after the join)
            rec = records.get((h.name, "swarm-join"))
            if rec is None or h.name in handled or reach.get(h.name):
                continue
            wd = self._docker(h)
            node_id = self._swarm_info(h).get("NodeID", "")
            if node_id and (why := self._leave(wd, ingress)):
                remaining.append(f"host {h.name}: did not leave the Swarm ({why})")
            elif node_id:
                removed.append(f"{h.name}: left the Swarm")
                if not rec.get("gwbridge_before", True):
                    self._remove_gwbridge(wd)
                self.runner.run([*d, "node", "rm", "--force", node_id], check=False, timeout=60)
        if created_here:
            if (why := self._leave(d, ingress)):
                remaining.append(f"host {mgr.name}: did not leave the Swarm it initialised ({why})")
            else:
                removed.append(f"{mgr.name}: left the Swarm it initialised")
                if gw_here and self._remove_gwbridge(d):
                    removed.append(f"{mgr.name}: docker_gwbridge")
        removed = self._finish_rejoins(hosts, reach, plan, removed)
        plan["pending_leave"] = plan.get("pending_leave", []) + retry
        return removed

    def _leave(self, docker: list[str], ingress: str = "") -> str:
        """Make the engine leave its Swarm: '' once it says inactive, else why not (one line).

        Docker 20.10's worker sometimes answers `swarm leave --force` with "context deadline exceeded" ("agent
        failed to clean up assignments", seen after an overlay attachment that had timed out) and stays half
        in the Swarm (active, no node ID); asked again it leaves at once. So: asked up to LEAVE_ATTEMPTS times.
        With `ingress` (the Swarm's ingress network) the leave first waits for the engine to finish setting it
        up (see _await_ingress)."""
        if ingress:
            self._await_ingress(docker, ingress)
        why = ""
        for attempt in range(LEAVE_ATTEMPTS):
            res = self.runner.run([*docker, "swarm", "leave", "--force"], check=False, timeout=120)
            state = self.runner.run([*docker, "info", "--format", "{{.Swarm.LocalNodeState}}"],
                                    check=False, timeout=30).stdout.strip()
            if state == "inactive":
                return ""
            why = ((res.stderr or res.stdout).strip().splitlines() or [f"Swarm state {state!r}"])[-1].strip()[:200]
            time.sleep(1.0 * (attempt + 1))
        return why

    def _ingress_network(self, mgr: HostSpec) -> str:
        """The name of the Swarm's ingress network as the manager lists it ('' if the Swarm has none)."""
        d = self._docker(mgr)
        ids = self.runner.run([*d, "network", "ls", "-q", "--filter", "driver=overlay"], check=False, timeout=60).stdout.split()
        if not ids:
            return ""
        res = self.runner.run([*d, "network", "inspect", "--format", "{{if .Ingress}}{{.Name}}{{end}}", *ids],
                              check=False, timeout=60)
        return next((ln.strip() for ln in res.stdout.splitlines() if ln.strip()), "")

    def _await_ingress(self, docker: list[str], ingress: str) -> bool:
        """Wait (at most INGRESS_SETTLE_S) until the engine's ingress sandbox exists; False if it did not appear.

        Seen in CI: an `up` interrupted 0.4 s after `swarm init` left the Swarm while the engine was still
        setting up the ingress network; the setup finished after the leave (docker_gwbridge created 0.14 s
        after it), Docker's own release then timed out ("timeout while waiting for ingress network removal")
        and the engine kept a stale `ingress` network and a docker_gwbridge held by its `ingress-sbox`, which
        no command removes. Leaving only once the sandbox is there lets Docker release it as usual."""
        deadline = time.monotonic() + INGRESS_SETTLE_S
        while True:
            res = self.runner.run([*docker, "network", "inspect", "--format", "{{json .Containers}}", ingress],
                                  check=False, timeout=30)
            if res.ok and "ingress-sbox" in res.stdout:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def _remove_gwbridge(self, docker: list[str]) -> bool:
        """Remove docker_gwbridge (made by joining the Swarm); retried while Docker's ingress sandbox still holds
        it ("has active endpoints") right after a leave; True once it is gone."""
        deadline = time.monotonic() + GWBRIDGE_RM_S
        while True:
            res = self.runner.run([*docker, "network", "rm", "docker_gwbridge"], check=False, timeout=60)
            if res.ok:
                return True
            if "active endpoints" not in (res.stderr or "") or time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    def _finish_rejoins(self, hosts, reach, plan, removed: list[str]) -> list[str]:
        """Hosts that were unreachable at an earlier `down` and still think they are in the Swarm."""
        pending = []
        for item in plan.get("pending_leave", []):
            wd = ["docker", *item["args"]]
            if not self._leave(wd):
                removed.append(f"{' '.join(item['args']) or 'local'}: left the Swarm")
                if item.get("gwbridge"):
                    self._remove_gwbridge(wd)
            else:
                pending.append(item)
        plan["pending_leave"] = pending
        return removed

    def wipe(self) -> list[str]:
        """Every swarm of this backend that has state here, host by host."""
        removed: list[str] = []
        root = self.workdir / ".swarm"
        for path in sorted(root.glob("*/hosts.json")) if root.exists() else []:
            try:
                removed += [f"{path.parent.name}: {r}" for r in self.down(path.parent.name)]
            except RuntimeFailure as exc:
                removed.append(f"{path.parent.name}: {exc}")
        return removed


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

