"""The multi-host piece of the spec (`hosts:` and `placement:`) and node placement, all pure.

A swarm on the `swarm` backend runs on several Docker Engines joined in one Docker Swarm:

```yaml
backend: swarm
hosts:
  - {name: main, endpoint: local, advertise_addr: 192.0.2.10}        # the first host is the Swarm manager
  - {name: lab2, endpoint: "ssh://ops@lab2", capacity: 16, labels: {rack: b}}
  - {name: lab3, endpoint: "tcp://lab3:2376", tls: {ca: ca.pem, cert: cert.pem, key: key.pem}}
placement: {policy: spread}            # or `group`; a node or group with `host: lab2` is pinned there
```

`place` decides which host runs each node: pinned nodes (a `host:` on the node, its group or the
defaults) first, then the rest, either spread evenly (contiguous blocks in node order, as even as the
capacities allow) or, with `policy: group`, each group whole on the least loaded host with room. Every
problem is one line naming the host or node and the field.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Sequence

from pydantic import Field, field_validator, model_validator

from swarm.errors import SpecError
from swarm.spec.validation import Strict

HOST_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?\Z")
ENDPOINT_SCHEMES = ("unix", "ssh", "tcp")
#: Bytes a VXLAN overlay adds to every frame (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8): Docker
#: gives a container on an overlay the network's MTU less this.
VXLAN_OVERHEAD = 50


class TlsSpec(Strict):
    """Client certificate and the CA that signed the daemon's, for a tcp:// endpoint (paths)."""

    ca: str
    cert: str
    key: str

    @field_validator("ca", "cert", "key")
    @classmethod
    def _path(cls, v: str) -> str:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{v!r}: expected a file path")
        return str(Path(os.path.abspath(Path(v).expanduser())))


class HostSpec(Strict):
    """One Docker Engine the swarm may use."""

    name: str
    endpoint: str = "local"  # local (this machine's default), unix:///path, ssh://user@host[:port], tcp://host:port
    tls: Optional[TlsSpec] = None  # required with tcp://
    capacity: Optional[int] = Field(None, ge=1, le=100_000)  # at most this many nodes
    labels: dict[str, str] = Field(default_factory=dict)  # Swarm node labels (and shown by status)
    advertise_addr: Optional[str] = None  # IPv4 the other hosts reach this one at (Swarm control and VXLAN)
    underlay_mtu: int = Field(1500, ge=1280, le=9216)  # MTU of the path VXLAN packets take between hosts

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not isinstance(v, str) or not HOST_NAME_RE.fullmatch(v):
            raise ValueError(f"host {v!r}: name must match [a-z0-9-]+ (1-32 characters)")
        return v

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if v == "local":
            return v
        scheme, sep, rest = v.partition("://")
        if not sep or scheme not in ENDPOINT_SCHEMES or not rest.strip("/"):
            raise ValueError(f"endpoint {v!r}: expected local, unix:///path, ssh://user@host or tcp://host:port")
        if scheme == "tcp" and ":" not in rest:
            raise ValueError(f"endpoint {v!r}: tcp:// needs a port (the TLS port is 2376)")
        return v

    @field_validator("advertise_addr")
    @classmethod
    def _addr(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            try:
                ipaddress.IPv4Address(v)
            except ValueError:
                raise ValueError(f"advertise_addr {v!r}: expected an IPv4 address") from None
        return v

    @model_validator(mode="after")
    def _tls(self) -> "HostSpec":
        if self.endpoint.startswith("tcp://") and self.tls is None:
            raise ValueError(f"host {self.name!r}: tls: endpoint {self.endpoint!r} is tcp://, which needs tls "
                             "(ca, cert, key): a Docker socket on the network without TLS is root for anyone")
        if self.tls is not None and not self.endpoint.startswith("tcp://"):
            raise ValueError(f"host {self.name!r}: tls is only for tcp:// endpoints (got {self.endpoint!r})")
        return self

    def docker_args(self) -> list[str]:
        """Global `docker` options that address this host ([] for the local default)."""
        if self.endpoint == "local":
            return []
        args = ["-H", self.endpoint]
        if self.tls is not None:
            args += ["--tlsverify", "--tlscacert", self.tls.ca, "--tlscert", self.tls.cert, "--tlskey", self.tls.key]
        return args


class PlacementSpec(Strict):
    """How nodes without a `host:` are placed: `spread` evenly, or each `group` whole on one host."""

    policy: Literal["spread", "group"] = "spread"


def check_hosts(hosts: Sequence[HostSpec]) -> None:
    """Unique names and endpoints (a ValueError naming the field otherwise)."""
    seen: dict[str, int] = {}
    endpoints: dict[str, int] = {}
    for i, h in enumerate(hosts):
        if h.name in seen:
            raise ValueError(f"hosts[{i}] ({h.name!r}).name: duplicate of hosts[{seen[h.name]}]")
        seen[h.name] = i
        if h.endpoint in endpoints:
            raise ValueError(f"hosts[{i}] ({h.name!r}).endpoint {h.endpoint!r}: duplicate of hosts[{endpoints[h.endpoint]}]")
        endpoints[h.endpoint] = i


# ---------------------------------------------------------------------------------------------------
# Placement (pure)


@dataclass(frozen=True)
class Placeable:
    """What placement needs of a node: its name, its group (for `policy: group`) and where it is pinned."""

    name: str
    group: str
    host: Optional[str] = None
    where: str = ""  # the spec field that pinned it, for messages (e.g. "groups[1] ('relay').host")


def placeables(spec) -> list[Placeable]:
    """The spec's nodes (in index order) as placement sees them: the group is the group's prefix (one
    group for `nodes: N`, the role for `node_list`), the host the node's own `host:`, its group's or the
    defaults', with the field that set it named for messages."""
    resolved = spec.resolved_nodes()
    where_default = "defaults.host"
    out: list[Placeable] = []
    if spec.groups:
        i = 0
        for gi, g in enumerate(spec.groups):
            where = f"groups[{gi}] ({g.prefix!r}).host" if g.host is not None else where_default
            for _ in range(g.count):
                n = resolved[i]
                out.append(Placeable(n.name, g.prefix, n.host, where))
                i += 1
    elif spec.node_list:
        for ni, (raw, n) in enumerate(zip(spec.node_list, resolved)):
            where = f"node_list[{ni}] ({n.name!r}).host" if raw.host is not None else where_default
            out.append(Placeable(n.name, n.role, n.host, where))
    else:
        out = [Placeable(n.name, "sat", n.host, where_default) for n in resolved]
    return out


def place(nodes: Sequence[Placeable], hosts: Sequence[HostSpec], policy: str = "spread") -> dict[str, str]:
    """{node name: host name} for every node. Raises SpecError (one line naming host/node and field)."""
    if not hosts:
        raise SpecError("hosts: the swarm backend needs at least one host")
    out, load = _place_pinned(nodes, hosts)
    names = [h.name for h in hosts]
    index = {h.name: i for i, h in enumerate(hosts)}
    free = [n for n in nodes if n.host is None]
    room = {h.name: (None if h.capacity is None else h.capacity - load[h.name]) for h in hosts}
    if all(r is not None for r in room.values()) and len(free) > sum(room.values()):  # type: ignore[arg-type]
        total = sum(h.capacity or 0 for h in hosts)
        raise SpecError(f"hosts: {len(nodes)} nodes exceed the hosts' total capacity {total}")
    if policy == "group":
        out.update(_place_groups(free, names, index, load, room))
    elif policy == "spread":
        out.update(_place_spread(free, names, index, load, room))
    else:
        raise SpecError(f"placement.policy {policy!r}: expected spread or group")
    return {n.name: out[n.name] for n in nodes}


def _place_pinned(nodes: Sequence[Placeable], hosts: Sequence[HostSpec]) -> tuple[dict[str, str], dict[str, int]]:
    """The nodes with a `host:` of their own, checked against the hosts and their capacity: (placed, load)."""
    names = [h.name for h in hosts]
    load = {h.name: 0 for h in hosts}
    out: dict[str, str] = {}
    pinned_to: dict[str, list[str]] = {h.name: [] for h in hosts}
    for n in nodes:
        if n.host is None:
            continue
        if n.host not in load:
            raise SpecError(f"{n.where or f'node {n.name!r}.host'} {n.host!r}: no such host (hosts: {', '.join(names)})")
        out[n.name] = n.host
        load[n.host] += 1
        pinned_to[n.host].append(n.name)
    for i, h in enumerate(hosts):
        if h.capacity is not None and load[h.name] > h.capacity:
            who = pinned_to[h.name]
            raise SpecError(f"hosts[{i}] ({h.name!r}).capacity: {load[h.name]} nodes pinned to it "
                            f"({who[0]}..{who[-1]}) exceed its capacity {h.capacity}")
    return out, load


def _place_groups(free: list[Placeable], names: list[str], index: dict[str, int], load: dict[str, int],
                  room: dict[str, int | None]) -> dict[str, str]:
    """Policy `group`: each group's free nodes together on the least loaded host that has room for all of them."""
    groups: dict[str, list[Placeable]] = {}
    for n in free:
        groups.setdefault(n.group, []).append(n)
    out: dict[str, str] = {}
    for group, members in groups.items():
        fits = [h for h in names if (r := room[h]) is None or r >= len(members)]
        if not fits:
            raise SpecError(f"placement.policy group: group {group!r} ({len(members)} nodes) fits on no host "
                            f"(room: {', '.join(f'{h} {room[h]}' for h in names)})")
        target = min(fits, key=lambda h: (load[h], index[h]))
        for n in members:
            out[n.name] = target
        load[target] += len(members)
        if (r := room[target]) is not None:
            room[target] = r - len(members)
    return out


def _place_spread(free: list[Placeable], names: list[str], index: dict[str, int], load: dict[str, int],
                  room: dict[str, int | None]) -> dict[str, str]:
    """Policy `spread`. Water-fill: each free node goes to the least loaded host with room; then hand the counts
    out as contiguous blocks in node order, so sat01..sat08 share a host and status reads naturally."""
    share = {h: 0 for h in names}
    for _ in free:
        target = min((h for h in names if (r := room[h]) is None or r > 0), key=lambda h: (load[h], index[h]))
        share[target] += 1
        load[target] += 1
        if (r := room[target]) is not None:
            room[target] = r - 1
    it = iter(free)
    return {next(it).name: h for h in names for _ in range(share[h])}


# ---------------------------------------------------------------------------------------------------
# Overlay networks (pure)


def node_mtu(spec_mtu: int, hosts: Sequence[HostSpec]) -> int:
    """What a node sees on an overlay: the spec's MTU, unless the hosts' underlay cannot carry it plus
    VXLAN's 50 bytes, then the underlay's MTU less 50."""
    return min(spec_mtu, min(h.underlay_mtu for h in hosts) - VXLAN_OVERHEAD)


def overlay_driver_mtu(spec_mtu: int, hosts: Sequence[HostSpec]) -> int:
    """The `com.docker.network.driver.mtu` to ask for, so that nodes see `node_mtu` (Docker subtracts 50)."""
    return node_mtu(spec_mtu, hosts) + VXLAN_OVERHEAD


def dynamic_range(subnet: str, nodes: int, hosts: int, label: str = "isl") -> str:
    """The block at the top of `subnet` kept for addresses the Swarm hands out itself.

    On an attachable overlay every host that attaches a container gets a load-balancer endpoint with an
    address from the network's pool, and attaching a worker to the overlay takes one more for a moment.
    Left to the pool those would be the lowest free addresses, which are nodes' addresses; created with
    `--ip-range <this block>` they come from here. The block holds at least 2 per host plus 2, at least 8.
    """
    net = ipaddress.IPv4Network(subnet)
    need = max(8, 2 * hosts + 2)
    size = 1
    while size < need:
        size *= 2
    if size > net.num_addresses // 2:
        raise SpecError(f"networks.{label}.subnet {subnet!r}: too small to keep {need} addresses for the Swarm's "
                        f"own endpoints on {hosts} hosts next to {nodes} nodes")
    block = ipaddress.IPv4Network(f"{net.broadcast_address + 1 - size}/{32 - (size.bit_length() - 1)}")
    last_node = net.network_address + 1 + nodes
    if last_node >= block.network_address:
        raise SpecError(f"networks.{label}.subnet {subnet!r}: too small for {nodes} nodes plus the {size} addresses "
                        f"({block}) the Swarm's own endpoints need on {hosts} hosts; give a larger subnet")
    return str(block)
