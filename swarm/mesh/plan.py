"""B.A.T.M.A.N. mesh on the ISL network (pure): what the implementations share (originators, convergence, the
mesh.csv row). Each implementation's plans and parsers are in swarm/mesh/implementations/ (batmand.py,
batman_adv.py); the spec piece is swarm/spec/mesh.py, the code that runs it in a swarm swarm/runtime/mesh.py.

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
  MTU less batman-adv's 32-byte header (the bridge's MTU cannot grow, so no fragmentation is needed), bridge
  loop avoidance off (see plan_batman_adv). Its routes are read from the kernel over netlink with
  `batctl meshif bat0 originators_json`: per originator (the MAC of a node's ISL interface) every candidate
  next hop with its TQ, the one in use flagged `best`. This host's kernel lacks the module; the kernel lab
  (tests/kernel_lab/, Debian's kernel under qemu) runs it for real, and the recorded output is in
  tests/fixtures/mesh/batadv_*.json. batman-adv forgets a node it no longer hears after its own fixed purge
  timeout (200 s, BATADV_PURGE_TIMEOUT); `purge_timeout` is batmand's only.

Convergence: a node has converged when it has a mesh route to every node it can reach through links that
are up both ways (cuts and partitions from netem.runtime.links; stopped nodes excluded), through a next hop it
hears directly, and no route to a node it cannot reach. The swarm has converged when every running node has.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

BATADV_IF = "bat0"  # batman-adv's mesh interface (the link controller and capture find the ISL interface under it)
STABLE_S = 2.0  # routes must stay converged and unchanged this long before `up`, `fault` and `mesh --wait` say so
POLL_S = 0.5  # route snapshot period; a figure's resolution is about this plus one snapshot (kept as resolution_s)
MESH_COLUMNS = ["run_id", "test_id", "size", "implementation", "event", "args", "event_ts", "converged_ts",
                "converge_s", "resolution_s", "converged", "polls"]


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
def healed_pairs(before: set[tuple[str, str]], after: set[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """Directed pairs cut before a heal and not after it: their routes must become direct again."""
    return frozenset(before - after)


def mesh_row(run_id: str, test_id: str, size: int | str, implementation: str, event: str, args: str,
             timing: dict) -> dict:
    """One mesh.csv row."""
    row = {"run_id": run_id, "test_id": test_id, "size": size, "implementation": implementation, "event": event,
           "args": args}
    row.update({k: timing.get(k, "") for k in ("event_ts", "converged_ts", "converge_s", "resolution_s", "converged",
                                                "polls")})
    return row

