"""batman-adv, the kernel's B.A.T.M.A.N. (layer 2): bat0 over the ISL interface, the ISL address moved to bat0;
routes and link qualities read from the kernel's originator table over netlink (`batctl meshif bat0
originators_json`). See swarm/mesh/plan.py for what was measured (in the kernel lab: our VMs lack the module)."""
from __future__ import annotations

import json

from swarm.caps import BackendTraits, Capabilities
from swarm.mesh.implementations.base import MeshImplementation, MeshStart
from swarm.mesh.plan import BATADV_IF, Originator
from swarm.spec.mesh import MeshSpec

BATADV_OVERHEAD = 32  # bytes batman-adv adds to every frame on the hard interface


class BatmanAdv(MeshImplementation):
    name = "batman-adv"
    how = "kernel module"
    originators_in_private_run = False
    explains_tq = False

    def unavailable(self, caps: Capabilities, backend: BackendTraits) -> str:
        if not caps.batman_adv:
            return "mesh.implementation 'batman-adv': this kernel lacks the batman-adv module (use batmand or auto)"
        return ""

    def start_plan(self, mesh: MeshSpec, iface: str, ip: str, prefixlen: int, mtu: int) -> MeshStart:
        return MeshStart(commands=plan_batman_adv(mesh, iface, ip, prefixlen, mtu))

    def routes_argv(self) -> list[str]:
        return batadv_originators_argv()

    def parse_routes(self, text: str) -> dict[str, str]:
        return {o.address: o.next_hop for o in parse_batadv_originators(text)}

    def originators_argv(self) -> list[str]:
        return batadv_originators_argv()

    def parse_originators(self, text: str) -> list[Originator]:
        return parse_batadv_originators(text)


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
