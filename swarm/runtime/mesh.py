"""The mesh of a running swarm: start the chosen implementation (swarm/mesh/implementations/) in every node, read
every node's routes, wait for convergence (Mesh), and watch convergence after each fault of an experiment
(MeshWatcher)."""
from __future__ import annotations

import ipaddress
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from swarm.observe.events import emit
from swarm.errors import CommandError, RuntimeFailure
from swarm.mesh.implementations import MeshImplementation, choose_implementation, get_implementation
from swarm.mesh.plan import POLL_S, MeshSnapshot, Originator, evaluate, mesh_row, usable_neighbours
from swarm.spec.mesh import MeshSpec

if TYPE_CHECKING:
    from netem.runtime.links import LinkController
    from netem.state import LinkState
    from swarm.runtime.context import SwarmContext


class Mesh:
    """The mesh of one running swarm: start it, read its routes, wait for convergence."""

    def __init__(self, swarm: "SwarmContext", links: "LinkController"):
        self.swarm = swarm  # the context, not the Swarm facade
        self.links = links  # the ISL interface of each node, the link state (cuts, stopped nodes)
        self.spec: MeshSpec = swarm.spec.mesh
        self.implementation = choose_implementation(self.spec, swarm.caps, swarm.backend.traits)
        self.names = [n.name for n in swarm.nodes]
        # originators are named by ISL address (batmand) or by the ISL interface's MAC (batman-adv)
        self.by_addr = {n.isl_ip: n.name for n in swarm.nodes} | {n.isl_mac.lower(): n.name for n in swarm.nodes}

    @property
    def enabled(self) -> bool:
        return self.implementation is not None

    @property
    def impl(self) -> MeshImplementation:
        """The implementation that runs the mesh (only while `enabled`)."""
        if self.implementation is None:
            raise RuntimeFailure("the swarm has no mesh")
        return get_implementation(self.implementation)

    def describe(self) -> str:
        if not self.enabled:
            return "none"
        return f"{self.implementation} ({self.impl.how}; OGM every {self.spec.ogm_interval} ms)"

    # ---------------------------------------------------------------------------------------- starting
    def start(self, nodes: list[str] | None = None) -> None:
        """Start the mesh on every (or the given) node."""
        todo = [n for n in self.swarm.nodes if nodes is None or n.name in nodes]
        ctl = self.links
        with ThreadPoolExecutor(max(1, min(8, len(todo)))) as pool:
            list(pool.map(lambda node: self._start_node(node, ctl.isl_iface(node)), todo))

    def _start_node(self, node, iface: str) -> None:
        backend, name = self.swarm.backend, self.swarm.name
        net = ipaddress.IPv4Network(self.swarm.spec.networks.isl.subnet)
        plan = self.impl.start_plan(self.spec, iface, node.isl_ip, net.prefixlen, self.swarm.spec.networks.isl.mtu)
        for argv in plan.commands:
            backend.exec(name, node.name, argv, timeout=30)
        if plan.daemon:
            backend.start_daemon(name, node.name, plan.daemon, self.impl.name)

    # ----------------------------------------------------------------------------------------- reading
    def node_routes(self, node: str) -> dict[str, str]:
        """One node's mesh routes: destination node -> next-hop node (batmand: its host routes in table 66;
        batman-adv: the best next hop of every originator in the kernel's originator table)."""
        res = self.swarm.backend.exec(self.swarm.name, node, self.impl.routes_argv(), timeout=30)
        return {self._node_of(d): self._node_of(h) for d, h in self.impl.parse_routes(res.stdout).items()}

    def _node_of(self, addr: str) -> str:
        """The node an originator's address (ISL address or ISL MAC) names; the address itself if none."""
        return self.by_addr.get(addr, addr)

    def originators(self, node: str) -> list[Originator]:
        """The originator table of one node (link quality, TQ 0-255, of every candidate next hop); [] when the
        node does not answer within 30 s (the qualities are then unknown; the routes are read elsewhere).
        batmand's client waits on its daemon, which a saturated host (seen in the kernel lab under TCG) can
        keep busy for that long."""
        backend, impl = self.swarm.backend, self.impl
        try:
            if impl.originators_in_private_run:
                argv = backend.private_run_prefix(self.swarm.name, node) + impl.originators_argv()
                res = self.swarm.runner.run(argv, check=False, timeout=30)
            else:
                res = backend.exec(self.swarm.name, node, impl.originators_argv(), check=False, timeout=30)
        except CommandError:
            return []
        return impl.parse_originators(res.stdout) if res.ok else []

    def link_state(self, state: "LinkState | None" = None) -> tuple[set[tuple[str, str]], set[str]]:
        """Directed links that are down (cuts, partitions, `up: false`) and nodes stopped by faults, in `state`
        (default: the swarm's saved link state now)."""
        state = self.links.load() if state is None else state
        down = {pair for pair, imp in state.effective().items() if imp.effective().down}
        stopped = {n for n, f in state.node_faults.items() if f in ("stop", "kill", "pause")}
        return down, stopped

    def snapshot(self, direct: frozenset[tuple[str, str]] = frozenset(),
                 state: "LinkState | None" = None) -> MeshSnapshot:
        """Every running node's routes now, judged against `state` (default: the current saved link state)."""
        down, stopped = self.link_state(state)
        taken = time.time()
        alive = [n for n in self.names if n not in stopped]
        routes: dict[str, dict[str, str]] = {}
        errors: dict[str, str] = {}

        def one(node: str):
            try:
                return node, self.node_routes(node), ""
            except (CommandError, RuntimeFailure) as exc:
                return node, {}, str(exc).splitlines()[0] if str(exc) else type(exc).__name__

        with ThreadPoolExecutor(max(1, min(8, len(alive)))) as pool:
            for node, r, e in pool.map(one, alive):
                routes[node] = r
                if e:
                    errors[node] = e
        return evaluate(self.names, routes, down, stopped, taken, errors, direct)

    def wait_converged(self, since: float, timeout: float | None = None,
                       progress: Callable[[int, int, str], None] | None = None,
                       direct: frozenset[tuple[str, str]] = frozenset(), stable_s: float = 0.0,
                       state: "LinkState | None" = None) -> dict:
        """Poll every POLL_S until the mesh has converged (or `timeout` s pass); `direct`: pairs just healed,
        whose routes must be direct again; `state`: the link state to converge to (default: the saved one, read
        at every poll; a timeline the userspace engine runs saves its state only at the end, so it passes each
        event's). With `stable_s`, converged means converged with the same routes for
        that long (right after convergence batmand still changes relays from one reading to the next); the
        figures are those of the first snapshot of that stable run. Returns MESH_COLUMNS' timing part:
        converged (bool), converged_ts (when the first converged snapshot was complete), converge_s (from
        `since`), resolution_s (from the start of the last snapshot that saw it unconverged to converged_ts:
        the mesh converged within that span; about POLL_S plus one snapshot's duration on an idle host), polls."""
        timeout = self.spec.converge_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        polls = 0
        last_unconverged = since  # when the last snapshot that saw the mesh unconverged began reading
        stable_from: tuple[float, dict, float] | None = None  # (done_ts, routes, last_unconverged) of the stable run
        while True:
            snap = self.snapshot(direct, state)
            polls += 1
            done_ts = time.time()
            good = sum(1 for p in snap.problems.values() if not p)
            if snap.converged:
                if stable_from is None or stable_from[1] != snap.routes:
                    stable_from = (done_ts, snap.routes, last_unconverged)
                held = done_ts - stable_from[0]
                if progress:
                    progress(good, len(snap.problems), "mesh nodes converged" if held >= stable_s else
                             f"mesh converged, routes stable {held:.1f}/{stable_s:g} s")
                if held >= stable_s:  # converged after last_unconverged and before converged_ts: the resolution
                    first, _, before = stable_from
                    return self._logged({"event_ts": round(since, 6), "converged_ts": round(first, 6),
                                         "converge_s": round(first - since, 3), "resolution_s": round(first - before, 3),
                                         "converged": True, "polls": polls})
            else:
                stable_from = None
                last_unconverged = snap.taken_ts
                if progress:
                    progress(good, len(snap.problems), "mesh nodes converged")
            if time.monotonic() > deadline:
                problem = _first_problem(snap) if not snap.converged else f"routes still changing after {timeout:g} s"
                return self._logged({"event_ts": round(since, 6), "converged_ts": "", "converge_s": "",
                                     "converged": False, "polls": polls, "problem": problem})
            time.sleep(max(0.0, POLL_S - (time.time() - snap.taken_ts)))

    def _logged(self, result: dict) -> dict:
        """A convergence wait's outcome into the swarm's event log (swarm.observe.events: type mesh); a Mesh
        without a link controller (made bare, in tests) has no log."""
        state_dir = getattr(getattr(self, "links", None), "dir", None)
        if state_dir is not None:
            emit(state_dir, "mesh", state="converged" if result["converged"] else "not converged",
                 converge_s=result["converge_s"], **({"problem": result["problem"]} if "problem" in result else {}))
        return result

    def _originators_or_none(self, node: str) -> list[Originator]:
        try:
            return self.originators(node)
        except (CommandError, RuntimeFailure):
            return []  # the snapshot already reports this node's error

    def report(self) -> dict:
        """What `swarm mesh` shows: per node its neighbours (with batmand's TQ), next hop to every other
        node, converged yes/no and why not."""
        snap = self.snapshot()
        adj = usable_neighbours(self.names, *self.link_state())
        nodes = []
        tables: dict[str, list[Originator]] = {}
        running = [n for n in self.names if n in snap.problems]
        if self.implementation and running:  # every node's table at once, not one after another
            with ThreadPoolExecutor(max(1, min(8, len(running)))) as pool:
                tables = dict(zip(running, pool.map(self._originators_or_none, running)))
        for name in self.names:
            if name not in snap.problems:
                nodes.append({"node": name, "running": False, "neighbours": {}, "next_hop": {}, "converged": None,
                              "problems": []})
                continue
            quality: dict[str, int] = {}
            if self.implementation:
                for orig in tables.get(name) or []:
                    dst = self.by_addr.get(orig.address, orig.address)
                    if orig.address in orig.candidates and orig.candidates[orig.address] > 0:
                        quality[dst] = orig.candidates[orig.address]
            routes = snap.routes.get(name, {})
            heard = {d for d, h in routes.items() if d == h}
            order = {n: i for i, n in enumerate(self.names)}
            neighbours = {d: quality.get(d) for d in sorted(heard | set(quality), key=lambda d: order.get(d, len(order)))}
            nodes.append({"node": name, "running": True, "neighbours": neighbours,
                          "next_hop": {d: routes.get(d) for d in self.names if d != name},
                          "links_up": sorted(adj.get(name, set()), key=self.names.index),
                          "converged": not snap.problems[name] and name not in snap.errors,
                          "problems": snap.problems[name] + ([snap.errors[name]] if name in snap.errors else [])})
        return {"swarm": self.swarm.name, "implementation": self.implementation, "description": self.describe(),
                "converged": snap.converged, "taken_ts": round(snap.taken_ts, 3), "nodes": nodes}


class MeshWatcher:
    """Measures, for each event handed to it (a fault of a timeline), how long the mesh took to converge after
    it: one polling thread per event, each row handed to `sink` (e.g. ResultsStore.append_mesh) as it is
    known. Events close together are each measured to the state the mesh had to reach at the time."""

    def __init__(self, mesh: Mesh, sink: Callable[[dict], None], run_id: str = "", test_id: str = "",
                 size: int | str = ""):
        self.mesh, self.sink = mesh, sink
        self.run_id, self.test_id, self.size = run_id, test_id, size
        self.rows: list[dict] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def event(self, kind: str, args: str, applied_ts: float, direct: frozenset[tuple[str, str]] = frozenset(),
              state: "LinkState | None" = None) -> None:
        """Start measuring the convergence after an event applied at `applied_ts`; `state`: the link state the
        event left (default: the swarm's saved state, read at every poll)."""
        thread = threading.Thread(target=self._measure, args=(kind, args, applied_ts, direct, state), daemon=True,
                                  name=f"mesh-{kind}")
        self._threads.append(thread)
        thread.start()

    def _measure(self, kind, args, applied_ts, direct, state) -> None:
        try:
            timing = self.mesh.wait_converged(applied_ts, direct=direct, state=state)
        except Exception as exc:  # recorded, the test goes on
            timing = {"event_ts": round(applied_ts, 6), "converged": False, "problem": str(exc)[:200]}
        row = mesh_row(self.run_id, self.test_id, self.size, self.mesh.implementation or "", kind, args, timing)
        with self._lock:
            self.rows.append(row)
            self.sink(row)

    def finish(self) -> list[dict]:
        """Wait for every measurement (each ends within the mesh's converge_timeout)."""
        for thread in self._threads:
            thread.join()
        return list(self.rows)


def _first_problem(snap: MeshSnapshot) -> str:
    for node, err in snap.errors.items():
        return f"{node}: {err}"
    for node, problems in snap.problems.items():
        if problems:
            return f"{node}: {problems[0]}"
    return ""
