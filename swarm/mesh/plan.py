"""B.A.T.M.A.N. mesh on the ISL network (pure): plans, route parsing and convergence. The spec piece is
swarm/spec/mesh.py, the code that runs it in a swarm swarm/runtime/mesh.py.

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

import ipaddress
import json
from collections import deque
from dataclasses import dataclass, field

from swarm.spec.mesh import MeshSpec

BATMAND_HOST_TABLE = 66  # batmand's rt_table_hosts (`batmand -i`): one route per originator
BATADV_OVERHEAD = 32  # bytes batman-adv adds to every frame on the hard interface
BATADV_IF = "bat0"
STABLE_S = 2.0  # routes must stay converged and unchanged this long before `up`, `fault` and `mesh --wait` say so
POLL_S = 0.5  # route snapshot period; a figure's resolution is about this plus one snapshot (kept as resolution_s)
MESH_COLUMNS = ["run_id", "test_id", "size", "implementation", "event", "args", "event_ts", "converged_ts",
                "converge_s", "resolution_s", "converged", "polls"]


# ------------------------------------------------------------------------------------------ plans (pure)
def batmand_argv(mesh: MeshSpec, iface: str) -> list[str]:
    """The batmand command of one node: in the foreground (its process is the node's, removed with it)."""
    purge = ["--purge-timeout", str(mesh.purge_timeout)] if mesh.purge_timeout is not None else []
    return ["batmand", "--no-detach", "-o", str(mesh.ogm_interval), *purge, iface]


def batmand_query_argv(level: int = 1) -> list[str]:
    """batmand's client mode: one snapshot of its originator table (level 1) over the control socket."""
    return ["batmand", "-c", "-b", "-d", str(level)]


def plan_batman_adv(mesh: MeshSpec, iface: str, ip: str, prefixlen: int, mtu: int) -> list[list[str]]:
    """Commands that put one node's ISL interface under batman-adv: bat0 over it, the address on bat0.

    Bridge loop avoidance (BLA) is switched off before bat0 comes up. BLA guards against loops when bat0 is
    bridged with a LAN that also reaches other mesh nodes; a swarm node's bat0 is bridged to nothing. With BLA
    on, batman-adv drops every broadcast arriving from the mesh while its backbone-gateway requests are in
    flight (batadv_bla_rx: "don't allow broadcasts while requests are in flight"; the first ~30 s, three BLA
    periods of 10 s), ARP requests included, so IP over bat0 did not work for ~30 s after start. Measured in
    the kernel lab (Debian 6.1, batman-adv 2022.3, 4 nodes): first ping over bat0 after ~30 s with BLA on,
    ~2 s with it off."""
    return [
        ["ip", "link", "add", BATADV_IF, "type", "batadv"],
        ["ip", "link", "set", "dev", iface, "master", BATADV_IF],
        ["ip", "link", "set", "dev", BATADV_IF, "mtu", str(mtu - BATADV_OVERHEAD)],
        ["batctl", "meshif", BATADV_IF, "bridge_loop_avoidance", "0"],
        ["batctl", "meshif", BATADV_IF, "orig_interval", str(mesh.ogm_interval)],
        ["ip", "addr", "del", f"{ip}/{prefixlen}", "dev", iface],
        ["ip", "addr", "add", f"{ip}/{prefixlen}", "brd", "+", "dev", BATADV_IF],
        ["ip", "link", "set", "dev", BATADV_IF, "up"],
    ]


def batadv_originators_argv() -> list[str]:
    """batman-adv's originator table over netlink, as JSON (batctl >= 2021.1)."""
    return ["batctl", "meshif", BATADV_IF, "originators_json"]


def batadv_neighbours_argv() -> list[str]:
    """batman-adv's neighbour table (nodes heard directly) over netlink, as JSON."""
    return ["batctl", "meshif", BATADV_IF, "neighbors_json"]


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


def parse_batadv_originators(text: str) -> list[Originator]:
    """`batctl meshif bat0 originators_json` -> originators (addresses: MACs of the nodes' ISL interfaces,
    lowercase): the next hop flagged `best` and every candidate next hop with its TQ. An originator with no
    best entry (being purged) has no route and is left out."""
    best: dict[str, tuple[str, int]] = {}
    candidates: dict[str, dict[str, int]] = {}
    for entry in json.loads(text or "[]"):
        orig, neigh = str(entry.get("orig_address", "")).lower(), str(entry.get("neigh_address", "")).lower()
        if not orig or not neigh:
            continue
        tq = int(entry.get("tq", 0))
        candidates.setdefault(orig, {})[neigh] = tq
        if entry.get("best"):
            best[orig] = (neigh, tq)
    return [Originator(orig, best[orig][1], best[orig][0], candidates[orig]) for orig in candidates if orig in best]


def parse_batadv_neighbours(text: str) -> dict[str, float]:
    """`batctl meshif bat0 neighbors_json` -> {neighbour MAC: seconds since last heard}."""
    return {str(e["neigh_address"]).lower(): int(e.get("last_seen_msecs", 0)) / 1000
            for e in json.loads(text or "[]") if e.get("neigh_address")}


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

