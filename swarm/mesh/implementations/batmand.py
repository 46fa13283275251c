"""batmand, the userspace B.A.T.M.A.N. daemon (layer 3): one `batmand --no-detach -o <ogm ms> <ISL interface>` per
node; its routes are host routes in policy-routing table 66, its originator table is read over its control
socket (whose path is fixed, /var/run/batmand.socket, hence the node's private /run). See swarm/mesh/plan.py for
what was measured."""
from __future__ import annotations

import ipaddress
import json

from swarm.caps import BackendTraits, Capabilities
from swarm.mesh.implementations.base import MeshImplementation, MeshStart
from swarm.mesh.plan import Originator
from swarm.spec.mesh import MeshSpec

BATMAND_HOST_TABLE = 66  # batmand's rt_table_hosts (`batmand -i`): one route per originator


class Batmand(MeshImplementation):
    name = "batmand"
    how = "userspace daemon, no batman-adv module here"
    originators_in_private_run = True
    explains_tq = True

    def unavailable(self, caps: Capabilities, backend: BackendTraits) -> str:
        if not backend.containers and not caps.batmand:  # the host's batmand, not the image's
            return ("mesh.implementation 'batmand': batmand is not installed on this host "
                    "(the netns backend runs the host's; apt-get install batmand)")
        return ""

    def start_plan(self, mesh: MeshSpec, iface: str, ip: str, prefixlen: int, mtu: int) -> MeshStart:
        return MeshStart(daemon=batmand_argv(mesh, iface))

    def routes_argv(self) -> list[str]:
        return ["ip", "-j", "route", "show", "table", str(BATMAND_HOST_TABLE)]

    def parse_routes(self, text: str) -> dict[str, str]:
        return parse_route_table(text)

    def originators_argv(self) -> list[str]:
        return batmand_query_argv(1)

    def parse_originators(self, text: str) -> list[Originator]:
        return parse_batmand_originators(text)


def batmand_argv(mesh: MeshSpec, iface: str) -> list[str]:
    """The batmand command of one node: in the foreground (its process is the node's, removed with it)."""
    purge = ["--purge-timeout", str(mesh.purge_timeout)] if mesh.purge_timeout is not None else []
    return ["batmand", "--no-detach", "-o", str(mesh.ogm_interval), *purge, iface]


def batmand_query_argv(level: int = 1) -> list[str]:
    """batmand's client mode: one snapshot of its originator table (level 1) over the control socket."""
    return ["batmand", "-c", "-b", "-d", str(level)]


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
