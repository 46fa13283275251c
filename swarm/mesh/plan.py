"""B.A.T.M.A.N. mesh on the ISL network: spec, implementation choice, plans, route parsing and convergence.

Spec key (swarm spec, validated; an unknown value is one line, exit 2, nothing started):

    mesh: batman            # or none (the default)
    mesh:
      protocol: batman
      implementation: auto  # auto (default) | batmand | batman-adv
      ogm_interval: 1000ms  # how often every node announces itself (OGM); convergence scales with it
      purge_timeout: 10s    # batmand: forget a node not heard for this long (batmand's own default, 200 s,
                            # would keep a partitioned node's stale route for minutes); null: batmand's default
      converge_timeout: 60s # how long `up` and `swarm fault` wait for the routes to settle

`auto` takes the kernel's batman-adv where the capability probe finds the module, else the userspace
`batmand` (this machine). Which one ran is stored with the swarm and shown by `swarm status`, `swarm probe`
and `swarm mesh`.

- batmand (layer 3): one `batmand --no-detach -o <ogm ms> <ISL interface>` per node. Its control socket path
  is fixed (/var/run/batmand.socket), so netns nodes run it with a /run of their own (Backend.
  private_run_prefix). Measured here: it adds policy-routing rules `6600: to <ISL subnet> lookup 66`,
  `6699: lookup 65`, `6700: to <ISL subnet> lookup 67` and puts one host route per originator in table 66:
  `D dev eth1 scope link` for a neighbour heard directly, `D via N dev eth1` for a multi-hop route; table
  67 holds `unreachable default`, so ISL traffic to a node without a mesh route is refused, never sent on
  the kernel's on-link route. Routes to a node no longer heard at all stay until batmand's purge timeout
  (`--purge-timeout`, in milliseconds: measured here, 5 made routes flap, 5000 purged a partitioned node's
  routes in ~6.5 s; batmand's default is 200 s, ours 10 s).
- batman-adv (layer 2): bat0 over the ISL interface, the ISL address moved to bat0, bat0's MTU the ISL
  MTU less batman-adv's 32-byte header (the bridge's MTU cannot grow, so no fragmentation is needed). Only
  planned here (golden-tested): this kernel lacks the module, so it never ran on this project's machines.

Convergence: a node has converged when it has a mesh route to every node it can reach through links that
are up both ways (cuts and partitions from swarm.runtime.links; stopped nodes excluded), through a next hop it
hears directly, and no route to a node it cannot reach. The swarm has converged when every running node has.
"""
from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.caps import Capabilities

if TYPE_CHECKING:
    from swarm.runtime.swarm import Swarm

BATMAND_HOST_TABLE = 66  # batmand's rt_table_hosts (`batmand -i`): one route per originator
BATADV_OVERHEAD = 32  # bytes batman-adv adds to every frame on the hard interface
BATADV_IF = "bat0"
POLL_S = 0.5  # route snapshot period; a figure's resolution is about this plus one snapshot (kept as resolution_s)
MESH_COLUMNS = ["run_id", "test_id", "size", "implementation", "event", "args", "event_ts", "converged_ts",
                "converge_s", "resolution_s", "converged", "polls"]


class MeshSpec(BaseModel):
    """`mesh:` of a swarm spec (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Literal["batman", "none"] = "none"
    implementation: Literal["auto", "batmand", "batman-adv"] = "auto"
    ogm_interval: int = Field(1000, ge=50, le=60_000)  # ms
    purge_timeout: Optional[int] = Field(10_000, ge=100, le=3_600_000)  # ms: batmand forgets a node unheard this long
    converge_timeout: float = Field(60.0, gt=0, le=3600)  # s

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, str) or v is None:
            return {"protocol": "none" if v is None else v}
        return v

    @field_validator("ogm_interval", "purge_timeout", mode="before")
    @classmethod
    def _ms(cls, v: Any, info) -> int | None:
        from swarm.units import parse_time_ms

        return None if v is None else int(round(parse_time_ms(v, info.field_name)))

    @field_validator("converge_timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        from swarm.units import parse_time_ms

        return parse_time_ms(v if not isinstance(v, (int, float)) or isinstance(v, bool) else f"{v}s",
                             "converge_timeout") / 1000

    @property
    def enabled(self) -> bool:
        return self.protocol != "none"


def choose_implementation(mesh: MeshSpec, caps: Capabilities, backend: str) -> str | None:
    """'batman-adv', 'batmand' or None (no mesh) for this host; a pinned one this host cannot run is a SpecError."""
    if not mesh.enabled:
        return None
    impl = mesh.implementation
    if impl == "auto":
        impl = "batman-adv" if caps.batman_adv else "batmand"
    if impl == "batman-adv" and not caps.batman_adv:
        raise SpecError("mesh.implementation 'batman-adv': this kernel lacks the batman-adv module "
                        "(use batmand or auto)")
    if impl == "batmand" and backend == "netns" and not caps.batmand:
        raise SpecError("mesh.implementation 'batmand': batmand is not installed on this host "
                        "(the netns backend runs the host's; apt-get install batmand)")
    return impl


# ------------------------------------------------------------------------------------------ plans (pure)
def batmand_argv(mesh: MeshSpec, iface: str) -> list[str]:
    """The batmand command of one node: in the foreground (its process is the node's, removed with it)."""
    purge = ["--purge-timeout", str(mesh.purge_timeout)] if mesh.purge_timeout is not None else []
    return ["batmand", "--no-detach", "-o", str(mesh.ogm_interval), *purge, iface]


def batmand_query_argv(level: int = 1) -> list[str]:
    """batmand's client mode: one snapshot of its originator table (level 1) over the control socket."""
    return ["batmand", "-c", "-b", "-d", str(level)]


def plan_batman_adv(mesh: MeshSpec, iface: str, ip: str, prefixlen: int, mtu: int) -> list[list[str]]:
    """Commands that put one node's ISL interface under batman-adv: bat0 over it, the address on bat0."""
    return [
        ["ip", "link", "add", BATADV_IF, "type", "batadv"],
        ["ip", "link", "set", "dev", iface, "master", BATADV_IF],
        ["ip", "link", "set", "dev", BATADV_IF, "mtu", str(mtu - BATADV_OVERHEAD)],
        ["ip", "addr", "del", f"{ip}/{prefixlen}", "dev", iface],
        ["ip", "addr", "add", f"{ip}/{prefixlen}", "brd", "+", "dev", BATADV_IF],
        ["ip", "link", "set", "dev", BATADV_IF, "up"],
        ["batctl", "meshif", BATADV_IF, "orig_interval", str(mesh.ogm_interval)],
    ]


# --------------------------------------------------------------------------------------- parsing (pure)
def parse_route_table(text: str) -> dict[str, str]:
    """`ip -j route show table 66` -> {destination address: next-hop address} (a neighbour is its own)."""
    routes = {}
    for entry in json.loads(text or "[]"):
        dst = entry.get("dst", "")
        if entry.get("type", "unicast") != "unicast" or not dst or "/" in dst and not dst.endswith("/32"):
            continue
        dst = dst.removesuffix("/32")
        routes[dst] = entry.get("gateway", dst)
    return routes


def enslaved_interfaces(text: str) -> list[str]:
    """`ip -o link show master DEV` -> the names of the interfaces under DEV (e.g. the ISL interface under bat0)."""
    names = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0].strip().isdigit():
            names.append(parts[1].strip().split("@")[0])
    return names


@dataclass(frozen=True)
class Originator:
    """One row of batmand's originator table: the best next hop and every candidate with its TQ (0-255)."""

    address: str
    tq: int
    next_hop: str
    candidates: dict[str, int]


def parse_batmand_originators(text: str) -> list[Originator]:
    """`batmand -c -b -d 1` output -> originators (the header line and anything unparsable skipped)."""
    out = []
    for line in text.splitlines():
        head, sep, rest = line.partition("]:")
        if not sep:
            continue
        fields = head.replace("(", " ").replace(")", " ").replace("[", " ").split()
        try:
            address, tq, next_hop = str(ipaddress.IPv4Address(fields[0])), int(fields[1]), fields[2]
        except (ValueError, IndexError):
            continue
        cand = rest.replace("(", " ").replace(")", " ").split()
        candidates = {cand[i]: int(cand[i + 1]) for i in range(0, len(cand) - 1, 2) if cand[i + 1].isdigit()}
        out.append(Originator(address, tq, next_hop, candidates))
    return out


# ------------------------------------------------------------------------------------ convergence (pure)
def usable_neighbours(names: list[str], down: set[tuple[str, str]], stopped: set[str]) -> dict[str, set[str]]:
    """Who hears whom: nodes both running, the link up in both directions (B.A.T.M.A.N. needs both)."""
    alive = [n for n in names if n not in stopped]
    return {a: {b for b in alive if b != a and (a, b) not in down and (b, a) not in down} for a in alive}


def reachable(adj: dict[str, set[str]]) -> dict[str, set[str]]:
    """Every node's set of nodes reachable over usable links (itself excluded)."""
    out = {}
    for start in adj:
        seen, todo = {start}, deque([start])
        while todo:
            for nxt in adj[todo.popleft()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        out[start] = seen - {start}
    return out


def node_problems(node: str, routes: dict[str, str], adj: dict[str, set[str]], reach: dict[str, set[str]],
                  names: list[str], direct: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    """What keeps one node from having converged (`routes`: destination name -> next-hop name); [] if nothing.
    `direct`: (node, dst) pairs whose link was just healed, whose route must be direct again."""
    problems = []
    for dst in names:
        if dst == node or dst not in adj:
            continue
        hop = routes.get(dst)
        if dst in reach[node]:
            if hop is None:
                problems.append(f"no route to {dst}")
            elif hop not in adj[node]:
                problems.append(f"route to {dst} via {hop}, which it does not hear")
            elif (node, dst) in direct and hop != dst and dst in adj[node]:
                problems.append(f"route to {dst} still via {hop}, not over the healed link")
        elif hop is not None:
            problems.append(f"stale route to unreachable {dst} via {hop}")
    return problems


@dataclass
class MeshSnapshot:
    """Routes of every running node at one instant, and what the link state says they should reach."""

    taken_ts: float
    routes: dict[str, dict[str, str]]  # node -> destination node -> next-hop node
    problems: dict[str, list[str]]
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def converged(self) -> bool:
        return not self.errors and not any(self.problems.values())


def evaluate(names: list[str], routes: dict[str, dict[str, str]], down: set[tuple[str, str]],
             stopped: set[str], taken_ts: float = 0.0, errors: dict[str, str] | None = None,
             direct: frozenset[tuple[str, str]] = frozenset()) -> MeshSnapshot:
    """Judge a set of routing tables against the link state (`direct`: see node_problems)."""
    adj = usable_neighbours(names, down, stopped)
    reach = reachable(adj)
    problems = {n: node_problems(n, routes.get(n, {}), adj, reach, names, direct) for n in adj}
    return MeshSnapshot(taken_ts, routes, problems, dict(errors or {}))


# ------------------------------------------------------------------------------------------ the runtime
class Mesh:
    """The mesh of one running swarm: start it, read its routes, wait for convergence."""

    def __init__(self, swarm: "Swarm"):
        self.swarm = swarm
        self.spec: MeshSpec = swarm.spec.mesh
        self.implementation = choose_implementation(self.spec, swarm.caps, swarm.backend.name)
        self.names = [n.name for n in swarm.nodes]
        self.by_ip = {n.isl_ip: n.name for n in swarm.nodes}

    @property
    def enabled(self) -> bool:
        return self.implementation is not None

    def describe(self) -> str:
        if not self.enabled:
            return "none"
        how = "kernel module" if self.implementation == "batman-adv" else "userspace daemon, no batman-adv module here"
        return f"{self.implementation} ({how}; OGM every {self.spec.ogm_interval} ms)"

    # ---------------------------------------------------------------------------------------- starting
    def start(self, nodes: list[str] | None = None) -> None:
        """Start the mesh on every (or the given) node."""
        todo = [n for n in self.swarm.nodes if nodes is None or n.name in nodes]
        ctl = self.swarm.links
        with ThreadPoolExecutor(max(1, min(8, len(todo)))) as pool:
            list(pool.map(lambda node: self._start_node(node, ctl.isl_iface(node)), todo))

    def _start_node(self, node, iface: str) -> None:
        backend, name = self.swarm.backend, self.swarm.name
        if self.implementation == "batmand":
            backend.start_daemon(name, node.name, batmand_argv(self.spec, iface), "batmand")
            return
        net = ipaddress.IPv4Network(self.swarm.spec.networks.isl.subnet)
        for argv in plan_batman_adv(self.spec, iface, node.isl_ip, net.prefixlen, self.swarm.spec.networks.isl.mtu):
            backend.exec(name, node.name, argv, timeout=30)

    # ----------------------------------------------------------------------------------------- reading
    def node_routes(self, node: str) -> dict[str, str]:
        """One node's mesh routes: destination node -> next-hop node."""
        if self.implementation != "batmand":
            raise RuntimeFailure("mesh: reading batman-adv's originator table is not implemented yet "
                                 "(no machine of this project has the module to record its output)")
        res = self.swarm.backend.exec(self.swarm.name, node, ["ip", "-j", "route", "show", "table",
                                                              str(BATMAND_HOST_TABLE)], timeout=30)
        return {self.by_ip.get(d, d): self.by_ip.get(h, h) for d, h in parse_route_table(res.stdout).items()}

    def originators(self, node: str) -> list[Originator]:
        """batmand's originator table of one node (link quality of every candidate next hop)."""
        backend = self.swarm.backend
        argv = backend.private_run_prefix(self.swarm.name, node) + batmand_query_argv(1)
        res = self.swarm.runner.run(argv, check=False, timeout=30)
        return parse_batmand_originators(res.stdout) if res.ok else []

    def link_state(self) -> tuple[set[tuple[str, str]], set[str]]:
        """Directed links that are down (cuts, partitions, `up: false`) and nodes stopped by faults."""
        state = self.swarm.links.load()
        down = {pair for pair, imp in state.effective().items() if imp.effective().down}
        stopped = {n for n, f in state.node_faults.items() if f in ("stop", "kill", "pause")}
        return down, stopped

    def snapshot(self, direct: frozenset[tuple[str, str]] = frozenset()) -> MeshSnapshot:
        """Every running node's routes now, judged against the current link state."""
        down, stopped = self.link_state()
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
                       direct: frozenset[tuple[str, str]] = frozenset()) -> dict:
        """Poll every POLL_S until the mesh has converged (or `timeout` s pass); `direct`: pairs just healed,
        whose routes must be direct again. Returns MESH_COLUMNS' timing part: converged (bool), converged_ts
        (when the first converged snapshot was complete), converge_s (from `since`), resolution_s (from the start
        of the last snapshot that saw it unconverged to converged_ts: the mesh converged within that span;
        about POLL_S plus one snapshot's duration on an idle host), polls."""
        if self.implementation != "batmand":  # nothing to poll: say so at once rather than time out
            return {"event_ts": round(since, 6), "converged": False, "polls": 0,
                    "problem": f"convergence is measured for batmand only, not {self.implementation}"}
        timeout = self.spec.converge_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        polls = 0
        last_unconverged = since  # when the last snapshot that saw the mesh unconverged began reading
        while True:
            snap = self.snapshot(direct)
            polls += 1
            done_ts = time.time()
            good = sum(1 for p in snap.problems.values() if not p)
            if progress:
                progress(good, len(snap.problems), "mesh nodes converged")
            if snap.converged:  # it converged after last_unconverged and before done_ts: that is the resolution
                return {"event_ts": round(since, 6), "converged_ts": round(done_ts, 6),
                        "converge_s": round(done_ts - since, 3), "resolution_s": round(done_ts - last_unconverged, 3),
                        "converged": True, "polls": polls}
            last_unconverged = snap.taken_ts
            if time.monotonic() > deadline:
                return {"event_ts": round(since, 6), "converged_ts": "", "converge_s": "", "converged": False,
                        "polls": polls, "problem": _first_problem(snap)}
            time.sleep(max(0.0, POLL_S - (time.time() - snap.taken_ts)))

    def report(self) -> dict:
        """What `swarm mesh` shows: per node its neighbours (with batmand's TQ), next hop to every other
        node, converged yes/no and why not."""
        snap = self.snapshot()
        adj = usable_neighbours(self.names, *self.link_state())
        nodes = []
        for name in self.names:
            if name not in snap.problems:
                nodes.append({"node": name, "running": False, "neighbours": {}, "next_hop": {}, "converged": None,
                              "problems": []})
                continue
            quality: dict[str, int] = {}
            if self.implementation == "batmand":
                for orig in self.originators(name):
                    dst = self.by_ip.get(orig.address, orig.address)
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


def healed_pairs(before: set[tuple[str, str]], after: set[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """Directed pairs cut before a heal and not after it: their routes must become direct again."""
    return frozenset(before - after)


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

    def event(self, kind: str, args: str, applied_ts: float, direct: frozenset[tuple[str, str]] = frozenset()) -> None:
        """Start measuring the convergence after an event applied at `applied_ts`."""
        thread = threading.Thread(target=self._measure, args=(kind, args, applied_ts, direct), daemon=True,
                                  name=f"mesh-{kind}")
        self._threads.append(thread)
        thread.start()

    def _measure(self, kind, args, applied_ts, direct) -> None:
        try:
            timing = self.mesh.wait_converged(applied_ts, direct=direct)
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


def mesh_row(run_id: str, test_id: str, size: int | str, implementation: str, event: str, args: str,
             timing: dict) -> dict:
    """One mesh.csv row."""
    row = {"run_id": run_id, "test_id": test_id, "size": size, "implementation": implementation, "event": event,
           "args": args}
    row.update({k: timing.get(k, "") for k in ("event_ts", "converged_ts", "converge_s", "resolution_s", "converged",
                                                "polls")})
    return row

