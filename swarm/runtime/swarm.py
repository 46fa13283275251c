"""The Swarm API: bring a spec up, look at it, run commands in it, take it down.

`with Swarm.from_yaml("my-swarm.yaml") as s: s.exec("sat01", ["ip", "addr"])` brings the swarm up and
tears it down on exit, whatever happens inside. The CLI is a thin layer over this class.

State lives in <workdir>/.swarm/<name>/state.json, written before anything is created, so `down` works
after a crash (swarm.runtime.state); backends can also find what they made from labels and name prefixes alone.
"""
from __future__ import annotations

import ipaddress
import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from swarm.spec.apps import with_backend_defaults
from swarm.runtime.backends import Backend, Progress, get_backend, no_progress, swarm_dir
from swarm.runtime.dtn import DtnAgents
from swarm.runtime.services import dtn_of, links_of, mesh_of
from swarm.errors import NodeFailed, SpecError
from swarm.runtime.mesh import Mesh
from swarm.mesh.implementations import choose_implementation
from swarm.runtime.host import ensure_neighbour_capacity, release_settings
from swarm.runtime.image import ensure_image
from netem.runtime.links import LinkController
from swarm.runtime.locks import host_lock, swarm_operation
from swarm.caps import MULTI_HOST_BACKEND, Capabilities
from swarm.cfs.node import NO_CFS
from swarm.runtime.probe import capabilities
from swarm.runtime.clocks import NodeClocks, node_clocks
from swarm.runtime.addons import ADDONS, AddOn, CfsAddOn, DtnAddOn, LinksAddOn
from swarm.runtime.context import SwarmContext
from swarm.runtime.runner import Result, Runner
from swarm.spec.model import NodePlan, SwarmSpec, load_spec, plan_nodes, spec_from_dict
from swarm.runtime.state import all_states, default_workdir, forget_state, read_state, write_state
from netem.spec.links import links_with_engine
from swarm.observe.events import emit

#: How long a reachability or health probe waits: three echoes at 0, 0.3 and 0.75 s, answers awaited until
#: ~1.4 s. A peer whose ARP cache is empty (a node just restarted) resolves its neighbour before it answers,
#: and Linux asks again only after 1 s; on a lossy link the first ARP frame is lost now and then (seen: one
#: 28-byte frame dropped by a 1 % loss rule), so a probe that gives up at 0.75 s calls a live node unreachable.
FPING_PATIENCE = ("-r", "2", "-t", "300")
#: Readiness pings every ISL address from one node before any link condition applies: 1 ms between targets
#: instead of fping's 10 ms, so 100 nodes take 0.1 s to ask rather than 1 s.
FPING_READY = ("-i", "1")
#: Ready also means every node's process has run this long since `up` started the last one, and still runs:
#: a node whose command fails at once (`exit 3`) must fail `up`, not pass a check that took a few ms.
READY_SETTLE_S = 0.5


@dataclass
class NodeStatus:
    """One row of `swarm status`."""

    name: str
    index: int
    isl_ip: str
    ground_ip: str
    state: str
    health: str
    host: str = ""  # the Docker host running the node (swarm backend); "" on one-host backends


def fping_alive(runner_result: Result) -> set[str]:
    """Addresses `fping -a` reported alive."""
    return {line.strip() for line in runner_result.stdout.splitlines() if line.strip()}



def with_engine(spec: SwarmSpec, engine: str) -> SwarmSpec:
    """`spec` with its impairment engine pinned (`swarm up --engine`); kept in the swarm's state with the spec."""
    return spec.model_copy(update={"links": links_with_engine(spec.links, engine)})


def recorded_caps(state: dict) -> Capabilities | None:
    """The host's capabilities as `up` probed them (its state file), or None (an older state, another shape): a
    running swarm keeps the engines and tools it came up with, and each later command skips the probe's
    seconds of scratch namespaces."""
    doc = state.get("caps")
    names = {f.name for f in dataclasses.fields(Capabilities)}
    if not isinstance(doc, dict) or set(doc) != names:
        return None
    try:
        return Capabilities(**doc)
    except TypeError:
        return None


class Swarm:
    """A swarm described by a spec, on one backend."""

    def __init__(
        self,
        spec: SwarmSpec,
        *,
        backend: str | None = None,
        runner: Runner | None = None,
        caps: Capabilities | None = None,
        workdir: Path | None = None,
        progress: Progress = no_progress,
        keep_on_failure: bool = False,
        message: Callable[[str], None] = lambda _msg: None,
        engine: str | None = None,
        source: str = "",
        owner: str = "",
        before_down: Sequence[Callable[[str], None]] = (),
    ):
        """`owner`: the experiment run's folder that brings the swarm up (kept in its state, see SwarmContext);
        `before_down`: called with the swarm's name before `down` removes anything."""
        if engine is not None:  # `--engine`: pins the impairment engine over the spec's `links.engine`
            spec = with_engine(spec, engine)
        self.spec = spec
        self.source = source  # the spec file, named by errors found after loading (e.g. a link condition)
        self.runner = runner or Runner()
        self.caps = caps or capabilities()
        self.workdir = workdir or default_workdir()
        self.backend: Backend = get_backend(backend or spec.backend or (MULTI_HOST_BACKEND if spec.hosts else None),
                                            self.runner, self.caps, self.workdir)
        self.spec = spec = with_backend_defaults(spec, self.backend.traits)
        self.nodes: list[NodePlan] = plan_nodes(spec)
        self.progress = progress
        self.keep_on_failure = keep_on_failure
        self.claimed = False  # this object's `up` claimed the name and made things: undo_up() removes them
        self.message = message
        self.image = ""
        self.clocks: dict = {}  # {host: ClockOffset} measured at `up` on multi-host backends
        self.owner = owner
        self.before_down = tuple(before_down)
        self.addons: dict[str, AddOn] = {name: cls() for name, cls in ADDONS.items()}  # one each, with its facts
        self._context: SwarmContext | None = None
        self._context_inputs: tuple = ()

    # ----------------------------------------------------------------------------------------- loading
    @classmethod
    def from_yaml(cls, path: str | Path, **kwargs) -> "Swarm":
        """A Swarm for the spec file at `path` (validated; nothing is started)."""
        return cls(load_spec(path), source=str(path), **kwargs)

    @classmethod
    def attach(cls, name: str, *, workdir: Path | None = None, **kwargs) -> "Swarm":
        """The swarm `name` that `up` started earlier (from its state file)."""
        workdir = workdir or default_workdir()
        state = read_state(workdir, name)
        if state is None:
            raise SpecError(f"swarm {name!r}: not up (no state in {swarm_dir(workdir, name)}); see `swarm list`")
        if "caps" not in kwargs and (recorded := recorded_caps(state)) is not None:
            kwargs["caps"] = recorded  # what `up` probed: `exec`, `status`, `impair` do not probe the host again
        swarm = cls(spec_from_dict(state["spec"], f"state of {name}"), backend=state["backend"], workdir=workdir, **kwargs)
        swarm.image = state.get("image", "")
        return swarm

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def context(self) -> SwarmContext:
        """What the swarm's services receive (swarm.runtime.context): a frozen view of this swarm, holding its
        services once built. Made again (with new services) only when something it shows was replaced."""
        inputs = (self.spec, self.nodes, self.backend, self.runner, self.workdir, self.caps, self.message,
                  self.progress, self.before_down, self.owner)
        if self._context is None or any(a is not b for a, b in zip(inputs, self._context_inputs)):
            self._context = SwarmContext(self.name, self.spec, tuple(self.nodes), self.backend, self.runner,
                                         self.workdir, self.caps, self.message, self.progress,
                                         on_node_restart=self._restart_services, before_down=self.before_down,
                                         owner=self.owner)
            self._context_inputs = inputs
        return self._context

    def node(self, name: str) -> NodePlan:
        return self.context.node(name)

    @property
    def mesh(self) -> Mesh:
        """The swarm's mesh (swarm.mesh.Mesh): implementation, routes, convergence. SpecError if this host
        cannot run the implementation the spec pins."""
        return mesh_of(self.context)

    @property
    def dtn(self) -> DtnAgents:
        """The swarm's DTN agents (swarm.dtn): start, stop, status, logs; `enabled` is False without `dtn:`."""
        return dtn_of(self.context)

    @property
    def links(self) -> LinkController:
        """The swarm's link conditions and faults (netem.runtime.links.LinkController): impair, cut, heal, partition,
        node_action, rows (what is set now). The same controller for as long as the swarm's context lives."""
        return links_of(self.context)

    def _restart_services(self, node: str, timeout: float) -> None:
        """A restarted node's processes were all ended: every add-on starts its part there again (the mesh
        daemon, the DTN agent)."""
        ctx = self.context
        for addon in self._active_addons(ctx):
            addon.on_node_restart(ctx, node, timeout)

    # ------------------------------------------------------------------------------------------ up/down
    def up(self, ready_timeout: float | None = None) -> float:
        """Create, start and wait for every node; returns seconds taken. Rolls back on any failure. One
        lifecycle operation per swarm name at a time (swarm.runtime.locks).

        Ordered phases: preflight -> images -> nodes -> add-ons (swarm.runtime.addons) -> ready."""
        self.claimed = False  # set by _up once the name is this `up`'s (a second `up` of this object starts afresh)
        try:
            with swarm_operation(self.name, "up"):
                return self._up(ready_timeout)
        except KeyboardInterrupt:  # landed after _up's own rollback scope (its last event, the lock's release)
            self.undo_up()
            raise

    def undo_up(self) -> None:
        """Remove what this object's `up` made, if it made anything and has not removed it yet: for a Ctrl-C
        that lands once `up` has returned but before the caller has said so (the CLI's summary), so that an
        interrupted `up` is all or nothing. Never touches a swarm another `up` made under the same name."""
        if self.claimed and not self.keep_on_failure:
            self._rollback()

    def _up(self, ready_timeout: float | None) -> float:
        self.preflight()
        ctx = self.context
        active = self._active_addons(ctx)
        started = time.monotonic()
        self.image = self._images(ctx, active)
        previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
        try:  # host settings recorded for this swarm (swarm.runtime.host): given back by the rollback or `down`
            with host_lock():  # checked again and claimed in one step: another `up` may have passed preflight too
                self._check_conflicts()
                self.claimed = True  # set before the write: a Ctrl-C inside it or in the lock's release rolls back
                write_state(self.workdir, self.name, {"name": self.name, "backend": self.backend.name,
                                                   "spec": self.spec.model_dump(mode="json", exclude_none=True),
                                                   "image": self.image, "created": time.time(),
                                                   "caps": dataclasses.asdict(self.caps),
                                                   **({"owner": ctx.owner} if ctx.owner else {}),
                                                   "mesh": choose_implementation(self.spec.mesh, self.caps,
                                                                                 self.backend.traits)})
            ensure_neighbour_capacity(self.runner, len(self.nodes), self.message, self.name)
            self._nodes(ready_timeout)
            for addon in active:  # in registry order: cFS ready, link conditions, mesh, DTN agents
                addon.start(ctx, ready_timeout)
            emit(swarm_dir(self.workdir, self.name), "swarm", state="up", nodes=len(self.nodes),
                 backend=self.backend.traits.name)
        except BaseException:
            self.undo_up()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
        return time.monotonic() - started

    def _active_addons(self, ctx: SwarmContext) -> list[AddOn]:
        return [a for a in self.addons.values() if a.enabled(ctx)]

    def _images(self, ctx: SwarmContext, active: list[AddOn]) -> str:
        """Phase images: the node image (container backends), then what each add-on adds to it, in
        prepare_rank order (the DTN image extends the node image; cFS images extend that)."""
        image = self._ensure_images() if self.backend.traits.containers else ""
        for addon in sorted(active, key=lambda a: a.prepare_rank):
            image = addon.prepare(ctx, image)
        return image

    def _nodes(self, ready_timeout: float | None) -> None:
        """Phase nodes: the backend creates and starts them; every one runs and answers on its ISL address."""
        cfs = self.addons["cfs"]
        self.backend.up(self.spec, self.nodes, self.image, self.progress,
                        cfs=cfs.runtime if isinstance(cfs, CfsAddOn) else NO_CFS)
        self._wait_ready(ready_timeout or 60 + 0.5 * len(self.nodes))
        self.clocks = self.backend.clock_offsets(self.name)  # hosts with a clock of their own (swarm backend)

    def preflight(self) -> None:
        """Everything `up` checks before it creates anything: each add-on's check (cFS trees, the apps' images,
        the link conditions against this host's impairment engine, the mesh implementation), the backend, the
        name and subnets against what is up and the host's interfaces. SpecError (naming `source`) on the
        first problem."""
        ctx = self.context
        try:
            for addon in self._active_addons(ctx):
                addon.check(ctx)
            self.backend.check_available()
            self.backend.check_spec(self.spec, self.nodes)  # on every host it will use, before creating anything
            self._check_conflicts()
        except SpecError as exc:
            raise SpecError(f"{self.source}: {exc}" if self.source and not str(exc).startswith(self.source)
                            else str(exc)) from None

    def check_dtn(self) -> None:
        """The DTN agents' checks that need no build (DtnAddOn.check): SpecError naming the spec file."""
        try:
            if self.dtn.enabled:
                DtnAddOn().check(self.context)
        except SpecError as exc:
            raise SpecError(f"{self.source}: {exc}" if self.source else str(exc)) from None

    def check_links(self) -> None:
        """Every link condition of the spec is possible with this host's impairment engine; SpecError naming
        the spec file otherwise."""
        try:
            LinksAddOn().check(self.context)
        except SpecError as exc:
            raise SpecError(f"{self.source}: {exc}" if self.source else str(exc)) from None

    @property
    def mesh_result(self) -> dict | None:
        """The mesh's convergence after `up` (None without a mesh)."""
        return self.addons["mesh"].facts().get("mesh")  # type: ignore[return-value]

    @property
    def dtn_seconds(self) -> float | None:
        """How long the DTN agents took to be ready after the nodes (None without DTN)."""
        return self.addons["dtn"].facts().get("dtn_seconds")  # type: ignore[return-value]

    def _rollback(self) -> None:
        """Remove what a failed or interrupted `up` made, ignoring further Ctrl-C while doing so."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.message(f"rolling back swarm {self.name!r}")
            self.down()
        finally:
            signal.signal(signal.SIGINT, previous)

    def down(self) -> list[str]:
        """Remove everything of this swarm; an empty list means there was nothing to remove."""
        for hook in self.before_down:  # e.g. an experiment's captures end while the interfaces still exist
            hook(self.name)
        with swarm_operation(self.name, "down", cancel_up=True, message=self.message):
            removed = self.backend.down(self.name)
            removed += release_settings(self.runner, self.name)  # host settings no other swarm needs, said
            if forget_state(self.workdir, self.name):
                removed.append("state")
        self.claimed = False  # nothing of this object's `up` is left for undo_up()
        return removed

    def __enter__(self) -> "Swarm":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self._rollback()

    def _check_conflicts(self) -> None:
        state = read_state(self.workdir, self.name)
        if state is not None or self.backend.node_states(self.name):
            owner = (state or {}).get("owner")
            raise SpecError(f"swarm {self.name!r}: already up" + (f" (started by the run in {owner}: `--resume` it to "
                                                                   "take the swarm over)" if owner else "")
                            + f"; run `swarm down {self.name}` first")
        mine = [ipaddress.IPv4Network(n.subnet) for n in (self.spec.networks.isl, self.spec.networks.ground)]
        for label, net in zip(("isl", "ground"), mine):
            for ifname, theirs in host_networks(self.runner):
                if theirs.overlaps(net):
                    raise SpecError(f"networks.{label}.subnet {str(net)!r}: overlaps {theirs} on host interface "
                                    f"{ifname}; choose another subnet")
        for other, state in all_states(self.workdir):
            spec = spec_from_dict(state["spec"], f"state of {other}")
            for label in ("isl", "ground"):
                theirs = ipaddress.IPv4Network(getattr(spec.networks, label).subnet)
                if any(theirs.overlaps(m) for m in mine):
                    raise SpecError(
                        f"networks: subnets overlap swarm {other!r}'s {label} subnet {theirs}; give this swarm other subnets"
                    )

    def _ensure_images(self) -> str:
        for node in self.nodes:
            if node.spec.image and not self.runner.run(["docker", "image", "inspect", node.spec.image], check=False).ok:
                raise SpecError(f"node {node.name!r}: image {node.spec.image!r} not found locally (no registry to pull from)")
        return ensure_image(self.runner, self.workdir, progress=self.message)

    def _prober(self) -> NodePlan | None:
        """A node that can run fping: any node with netns (host tools), else one on the framework image."""
        if not self.backend.traits.containers:
            return self.nodes[0]
        return next((n for n in self.nodes if not n.spec.image), None)

    def _wait_ready(self, timeout: float) -> None:
        """Wait until every node's process runs and every ISL address answers; raise NodeFailed if not.

        ISL addresses are pinged from one node (the ISL network is internal, the host cannot reach it);
        when every node runs a user image, which may lack fping, readiness is the processes running.
        """
        total = len(self.nodes)
        prober = self._prober()
        if prober is None:
            self.message("no node runs the framework image: ready means every node's process runs")
        began = time.monotonic()
        deadline = began + timeout
        alive: set[str] = set()
        while True:
            states = self.backend.node_states(self.name)
            for node in self.nodes:
                if states.get(node.name) in ("exited", "dead"):
                    raise NodeFailed(node.name, f"its process {states[node.name]}", self.backend.logs(self.name, node.name))
            running = [n for n in self.nodes if states.get(n.name) == "running"]
            self.progress(len(running), total, "nodes running")
            if len(running) == total:
                alive = self._isl_alive_from(prober, fping_extra=FPING_READY) if prober else {n.isl_ip for n in self.nodes}
                if prober:
                    self.progress(len(alive), total, "ISL addresses answering")
                if len(alive) == total:
                    wait = READY_SETTLE_S - (time.monotonic() - began)
                    if wait <= 0:
                        return
                    time.sleep(wait)  # all there, but too soon to tell a node that is about to fail: look again then
                    continue
            if time.monotonic() > deadline:
                late = next(n for n in self.nodes if states.get(n.name) != "running" or n.isl_ip not in alive)
                detail = self.backend.not_ready_detail(self.name, late.name) if states.get(late.name) == "running" else ""
                raise NodeFailed(late.name, f"not ready after {timeout:.0f} s" + (f"; {detail}" if detail else ""),
                                 self.backend.logs(self.name, late.name))
            time.sleep(0.3)

    def _isl_alive_from(self, src: NodePlan, targets: list[NodePlan] | None = None,
                        fping_extra: tuple[str, ...] = ()) -> set[str]:
        ips = [n.isl_ip for n in (targets or self.nodes)]
        res = self.backend.exec(self.name, src.name, ["fping", "-a", *FPING_PATIENCE, *fping_extra, *ips],
                                check=False, timeout=60)
        return fping_alive(res)

    # ------------------------------------------------------------------------------------------ looking
    def status(self, health: bool = True) -> list[NodeStatus]:
        """One row per node: addresses, backend state, and whether its ground address answers the host."""
        states = self.backend.node_states(self.name)
        alive: set[str] = set()
        if health and states:
            ground = [n.ground_ip for n in self.nodes]
            res: Result | None
            if self.backend.host_reaches_ground:
                res = self.runner.run(["fping", "-a", *FPING_PATIENCE, *ground], check=False, timeout=60)
            else:  # the orchestrator is on no overlay: ask a running node (its own address answers too)
                prober = next((n for n in self.nodes if not n.spec.image and states.get(n.name) == "running"), None)
                res = self.backend.exec(self.name, prober.name, ["fping", "-a", *FPING_PATIENCE, *ground],
                                        check=False, timeout=60) if prober else None
            alive = fping_alive(res) if res is not None else set()
        hosts = self.backend.node_hosts(self.name)
        return [
            NodeStatus(n.name, n.index, n.isl_ip, n.ground_ip, states.get(n.name, "missing"),
                       ("ok" if n.ground_ip in alive else "no answer") if health else "-", hosts.get(n.name, ""))
            for n in self.nodes
        ]

    def node_clocks(self) -> NodeClocks:
        """Each node's clock offset against this machine, measured now (multi-host backends; on one host
        every node shares this machine's clock and the offsets are all 0)."""
        self.clocks = self.backend.clock_offsets(self.name)
        return node_clocks(self.clocks, self.backend.node_hosts(self.name))

    def host_facts(self) -> list[dict]:
        """Facts about every host the swarm runs on (multi-host backends); [] on one host."""
        return self.backend.describe_hosts(self.name)

    def backend_facts(self) -> list[str]:
        """Lines about where the swarm runs (multi-host backends: hosts, node MTU, clocks); [] on one host."""
        return self.backend.facts(self.name)

    def exec(self, node: str, argv: list[str], *, check: bool = True, timeout: float | None = None) -> Result:
        """Run `argv` inside one node."""
        self.node(node)
        return self.backend.exec(self.name, node, argv, check=check, timeout=timeout)

    def exec_all(self, argv: list[str], *, timeout: float | None = None, workers: int = 8) -> dict[str, Result]:
        """Run `argv` on every node, a few at a time; results by node name (failures included)."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = pool.map(lambda n: self.backend.exec(self.name, n.name, argv, check=False, timeout=timeout), self.nodes)
            return {n.name: r for n, r in zip(self.nodes, results)}

    def reachability(self) -> dict[str, dict[str, bool]]:
        """All-pairs ISL reachability: matrix[src][dst] is True when dst's ISL address answered src."""
        def row(src: NodePlan) -> tuple[str, set[str]]:
            others = [n for n in self.nodes if n is not src]
            return src.name, self._isl_alive_from(src, others)

        with ThreadPoolExecutor(max_workers=8) as pool:
            alive = dict(pool.map(row, self.nodes))
        return {s.name: {d.name: d.isl_ip in alive[s.name] for d in self.nodes if d is not s} for s in self.nodes}


def host_networks(runner: Runner) -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, network) of every IPv4 address on the host, Docker bridges included."""
    res = runner.run(["ip", "-j", "-4", "addr", "show"], check=False, timeout=30)
    out = []
    for link in json.loads(res.stdout or "[]"):
        for addr in link.get("addr_info", []):
            if addr.get("family") == "inet" and addr.get("scope") != "host":
                out.append((link["ifname"], ipaddress.IPv4Network(f"{addr['local']}/{addr['prefixlen']}", strict=False)))
    return out


def raise_keyboard_interrupt(signum, _frame):
    """Signal handler: turn SIGTERM into KeyboardInterrupt, so a kill rolls back like Ctrl-C."""
    raise KeyboardInterrupt(f"signal {signum}")
