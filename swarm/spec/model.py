"""Swarm spec: the validated description of a swarm, and its deterministic addressing.

A spec names the swarm, its nodes (a count, explicit nodes, or groups of nodes that may differ in image,
role and environment), its two networks (`ground`: commanding and telemetry, reachable from the host;
`isl`: inter-satellite links, internal) and resource limits. Loading never starts anything; every error
is a `SpecError` whose one line names the field and the value.
"""
from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.caps import BACKEND_TRAITS
from swarm.dtn.agents import check_agent
from swarm.spec.dtn import DtnSpec, check_dtn_nodes
from swarm.spec.apps import AppSettings, app_environment, app_image, check_apps
from swarm.errors import SpecError
from swarm.spec.documents import read_yaml, validate_document
from swarm.spec.validation import Strict
from netem.spec.links import LinksSpec, resolve_links
from netem.spec.orbits import parse_orbits
from swarm.spec.mesh import MeshSpec
from swarm.spec.hosts import HostSpec, PlacementSpec, check_hosts, dynamic_range, place, placeables

#: The most nodes a swarm has: a Linux bridge takes at most 1,023 ports (BR_MAX_PORTS 1,024, port 0 reserved;
#: measured: the 1,024th `ip link set ... master` fails), and a swarm's ground network has one per node plus the
#: host's. Memory is not the bound on this 24 GiB host (~5 MiB a node: 5 GiB at this ceiling).
MAX_NODES = 1022
NODES_LIMIT_WHY = ("a Linux bridge takes at most 1,023 ports, and the ground network has one per node plus the "
                   "host's")
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?\Z")
NAME_RULE = "must match [a-z0-9-]+ (lowercase letters, digits and inner dashes, 1-32 characters)"
if TYPE_CHECKING:
    BackendName = str
else:  # `backend:` takes a name of the backend registry (swarm.caps.BACKEND_TRAITS): one enum in the JSON Schema
    BackendName = Literal[tuple(sorted(BACKEND_TRAITS))]


def check_name(kind: str, value: str) -> str:
    """A name of the spec or of an experiment (`kind` names it in the error): the one naming rule, ValueError
    (for a pydantic validator) otherwise."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValueError(f"{kind} {value!r}: name {NAME_RULE}")
    return value


_check_name = check_name  # the former private name, for code written before it was public


def check_swarm_name(name: str) -> str:
    """A swarm name given on the command line: the spec's rule, before any path or filter is built from it
    (`swarm down ../victim` must not reach the filesystem). SpecError naming the value otherwise."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SpecError(f"swarm {name!r}: name {NAME_RULE}")
    return name


class NetworkSpec(Strict):
    """One bridge network: its IPv4 subnet and MTU."""

    subnet: str
    mtu: int = Field(1500, ge=576, le=9000)

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v, strict=True)
        except ValueError as exc:
            raise ValueError(f"subnet {v!r}: {exc}") from None
        if net.prefixlen > 29:
            raise ValueError(f"subnet {v!r}: prefix /{net.prefixlen} is too small (at most /29)")
        return v


class Networks(Strict):
    """The two networks every swarm has."""

    isl: NetworkSpec = NetworkSpec(subnet="10.77.0.0/16")
    ground: NetworkSpec = NetworkSpec(subnet="10.78.0.0/16")

    @model_validator(mode="after")
    def _disjoint(self) -> "Networks":
        a, b = ipaddress.IPv4Network(self.isl.subnet), ipaddress.IPv4Network(self.ground.subnet)
        if a.overlaps(b):
            raise ValueError(f"networks.ground.subnet {self.ground.subnet!r} overlaps networks.isl.subnet {self.isl.subnet!r}")
        return self


class Resources(Strict):
    """Optional per-node limits (Compose `cpus` and `mem_limit`)."""

    cpus: Optional[float] = Field(None, gt=0, le=1024)
    memory: Optional[str] = None

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.fullmatch(r"[1-9][0-9]*[kmg]?", str(v).lower()):
            raise ValueError(f"memory {v!r}: expected a size like 256m or 1g")
        return v


MAX_CFS_CPU_ID = 65535 - 1234 + 1  # CI_LAB listens on UDP 1234 + CPU ID - 1


class CfsSpec(Strict):
    """A user's natively built cFS install tree (build/exe/cpu1) run on the node (swarm.cfs.node).

    Node i (1-based, swarm-wide) gets CPU ID `cpu_id + i - 1` and spacecraft ID `spacecraft_id + i - 1`.
    `install` is made absolute (relative to the current directory); that it holds core-cpu1 is checked
    when the swarm comes up.
    """

    install: str
    cpu_id: int = Field(1, ge=1, le=MAX_CFS_CPU_ID)
    spacecraft_id: int = Field(0x42, ge=0, le=0xFFFFFFFF)  # 0x42: the cFS sample mission's
    reset: Literal["PO", "PR"] = "PO"  # power-on or processor reset at start

    @field_validator("install")
    @classmethod
    def _install(cls, v: str) -> str:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"install {v!r}: expected the path of a cFS install tree (build/exe/cpu1)")
        return str(Path(os.path.abspath(Path(v).expanduser())))


class NodeTemplate(Strict):
    """What nodes of one group share."""

    image: Optional[str] = None
    role: str = "spacecraft"
    env: dict[str, str] = Field(default_factory=dict)
    command: Optional[list[str]] = None
    resources: Resources = Resources()
    cfs: Optional[CfsSpec] = None  # run a cFS build as the main process (compose backend)
    dtn: Optional[DtnSpec] = None  # a Bundle Protocol agent (dtn7-rs) on the node (swarm.dtn)
    host: Optional[str] = None  # swarm backend: the host (hosts[].name) this node or group is pinned to

    @model_validator(mode="after")
    def _cfs_alone(self) -> "NodeTemplate":
        if self.cfs is not None:
            for other in ("image", "command"):
                if getattr(self, other) is not None:
                    raise ValueError(f"cfs and {other} {getattr(self, other)!r}: a cFS node runs the framework's "
                                     f"cFS image and core-cpu1; give one of them")
            if self.dtn is not None:
                raise ValueError("cfs and dtn: a DTN agent on a cFS node is not supported yet (the cFS image has no dtnd)")
        if self.dtn is not None and self.image is not None:
            raise ValueError(f"dtn and image {self.image!r}: the DTN agent runs on the framework's image "
                             "(swarm-emu/dtn), not on a user's image")
        return self

    @field_validator("role")
    @classmethod
    def _role(cls, v: str) -> str:
        return check_name("role", v)

    @field_validator("image")
    @classmethod
    def _image(cls, v: Optional[str]) -> Optional[str]:
        # an image reference (name[:tag][@digest]); `--help` would reach the Docker CLI as an option
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}", v):
            raise ValueError(f"image {v!r}: expected an image reference like name:tag (letters, digits, . _ / : @ -)")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"env key {key!r}: must be a shell variable name")
        return v


class NodeSpec(NodeTemplate):
    """One explicitly named node."""

    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name("node", v)


class GroupSpec(NodeTemplate):
    """`count` nodes named <prefix>01, <prefix>02, ... sharing one template."""

    prefix: str = "sat"
    count: int = Field(..., ge=1, le=MAX_NODES)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        return check_name("group prefix", v + "0")[:-1]


class SwarmSpec(Strict):
    """A whole swarm. Exactly one of `nodes` (a count), `node_list` or `groups` says which nodes exist."""

    name: str
    nodes: Optional[int] = None
    node_list: Optional[list[NodeSpec]] = None
    groups: Optional[list[GroupSpec]] = None
    defaults: NodeTemplate = NodeTemplate()
    networks: Networks = Networks()
    backend: Optional[BackendName] = None
    hosts: Optional[list[HostSpec]] = None  # swarm backend: the Docker Engines (the first is the Swarm manager)
    placement: PlacementSpec = PlacementSpec()  # swarm backend: spread nodes evenly, or each group on one host
    links: Optional[LinksSpec] = None  # ISL link conditions (netem.spec.links): default + per-link/per-node overrides
    apps: list[str] = Field(default_factory=list)  # apps in every node (swarm.apps): swarm-app, or a user's image
    app: AppSettings = AppSettings()  # their settings: rate_hz, domain_id, targets, window_s
    mesh: MeshSpec = MeshSpec()  # routing on the ISL network (swarm.mesh): `batman` or `none`
    # orbit-driven links (netem/spec/orbits.py): validated here, applied by `swarm orbits apply NAME`
    orbits: Optional[dict[str, Any]] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name("swarm", v)

    @field_validator("apps")
    @classmethod
    def _apps(cls, v: list[str]) -> list[str]:
        return check_apps(v)

    @field_validator("nodes")
    @classmethod
    def _count(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and not 2 <= v <= MAX_NODES:
            raise ValueError(f"nodes {v}: a swarm has 2 to {MAX_NODES} nodes ({NODES_LIMIT_WHY})")
        return v

    @model_validator(mode="after")
    def _membership(self) -> "SwarmSpec":
        given = [k for k in ("nodes", "node_list", "groups") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of nodes, node_list, groups (got {', '.join(given) or 'none'})")
        resolved = self.resolved_nodes()
        if not 2 <= len(resolved) <= MAX_NODES:
            raise ValueError(f"nodes {len(resolved)}: a swarm has 2 to {MAX_NODES} nodes ({NODES_LIMIT_WHY})")
        seen: set[str] = set()
        for node in resolved:
            if node.name in seen:
                raise ValueError(f"node {node.name!r}: duplicate node name")
            seen.add(node.name)
        for label, net in (("isl", self.networks.isl), ("ground", self.networks.ground)):
            room = ipaddress.IPv4Network(net.subnet).num_addresses - 3  # network, gateway, broadcast
            if len(resolved) > room:
                raise ValueError(
                    f"networks.{label}.subnet {net.subnet!r}: too small for {len(resolved)} nodes (room for {room})"
                )
        _check_cfs_ids(resolved)
        _check_dtn(resolved)
        self._check_hosts(len(resolved))
        if self.links is not None:  # node names, profiles and consistency (the engine is checked at `up`)
            try:
                resolve_links(self.links, [n.name for n in resolved])
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        if self.orbits is not None:  # every node the orbits fly must be a node of the swarm
            try:
                flown = parse_orbits(self.orbits, "orbits").node_names()
            except SpecError as exc:
                raise ValueError(str(exc)) from None
            names = {n.name for n in resolved}
            missing = [n for n in flown if n not in names]
            if missing:
                raise ValueError(f"orbits: node {missing[0]!r} is not a node of the swarm")
        return self

    def _check_hosts(self, count: int) -> None:
        """hosts/placement: only with a multi-host backend; names, pins and capacities consistent (pure)."""
        pinned = next((p for p in placeables(self) if p.host is not None), None) if self.hosts is None else None
        if self.hosts is None:
            if pinned is not None:
                raise ValueError(f"{pinned.where} {pinned.host!r}: pins a node to a host, but the spec lists no hosts")
            return
        if self.backend is not None and not BACKEND_TRAITS[self.backend].multi_host:
            multi = " or ".join(repr(n) for n, t in BACKEND_TRAITS.items() if t.multi_host)
            raise ValueError(f"hosts: given with backend {self.backend!r}; hosts are for backend {multi}")
        if not self.hosts:
            raise ValueError("hosts: empty; list at least one Docker host (the first is the Swarm manager)")
        check_hosts(self.hosts)
        try:
            place(placeables(self), self.hosts, self.placement.policy)
            for label in ("isl", "ground"):
                dynamic_range(getattr(self.networks, label).subnet, count, len(self.hosts), label)
        except SpecError as exc:
            raise ValueError(str(exc)) from None

    def resolved_nodes(self) -> list[NodeSpec]:
        """The nodes in index order, with group and default settings applied (and the apps' image and env)."""
        nodes = self._member_nodes()
        if not self.apps:
            return nodes
        isl_ips = [node_address(self.networks.isl.subnet, i) for i in range(1, len(nodes) + 1)]
        env, image = app_environment(self.apps, self.app, [n.name for n in nodes], isl_ips), app_image(self.apps)
        return [n.model_copy(update={"env": {**env, **n.env}, "image": n.image or image}) for n in nodes]

    def _member_nodes(self) -> list[NodeSpec]:
        base = self.defaults.model_dump()
        if self.nodes is not None:
            width = max(2, len(str(self.nodes)))
            return [NodeSpec(name=f"sat{i:0{width}d}", **base) for i in range(1, self.nodes + 1)]
        if self.node_list is not None:
            return [NodeSpec(**_merge(base, n.model_dump(exclude_unset=True))) for n in self.node_list]
        out: list[NodeSpec] = []
        for g in self.groups or []:
            fields = _merge(base, g.model_dump(exclude_unset=True, exclude={"prefix", "count"}))
            width = max(2, len(str(g.count)))
            out += [NodeSpec(name=f"{g.prefix}{i:0{width}d}", **fields) for i in range(1, g.count + 1)]
        return out


def _check_dtn(nodes: list["NodeSpec"]) -> None:
    """Each DTN piece names an agent of the registry that carries its CLA, then the swarm-wide DTN checks."""
    for n in nodes:
        check_agent(n.dtn)
    check_dtn_nodes({n.name: n.dtn for n in nodes})


def _check_cfs_ids(nodes: list["NodeSpec"]) -> None:
    """cFS CPU and spacecraft IDs (base + node index - 1) must fit and differ between nodes."""
    seen: dict[str, dict[int, str]] = {"cpu_id": {}, "spacecraft_id": {}}
    limits = {"cpu_id": MAX_CFS_CPU_ID, "spacecraft_id": 0xFFFFFFFF}
    for index, node in enumerate(nodes, start=1):
        if node.cfs is None:
            continue
        for key, ids in seen.items():
            value = getattr(node.cfs, key) + index - 1
            if value > limits[key]:
                raise ValueError(f"node {node.name!r}: cfs.{key} {getattr(node.cfs, key)} + index {index} - 1 = {value} "
                                 f"is above {limits[key]}")
            if value in ids:
                raise ValueError(f"node {node.name!r}: cfs.{key} {value} is already node {ids[value]!r}'s; "
                                 "give the groups bases that do not overlap")
            ids[value] = node.name


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if key == "env":
            merged["env"] = {**base.get("env", {}), **value}
        else:
            merged[key] = value
    return merged


# ---------------------------------------------------------------------------------------------------
# Addressing (pure): node i (1-based) gets host address network+1+i on each network; the gateway is +1.


def node_address(subnet: str, index: int) -> str:
    """IPv4 address of the node with 1-based `index` on `subnet` (the gateway holds the first host)."""
    net = ipaddress.IPv4Network(subnet)
    return str(net.network_address + 1 + index)


def gateway_address(subnet: str) -> str:
    """The first host address of `subnet`, held by the bridge."""
    return str(ipaddress.IPv4Network(subnet).network_address + 1)


def node_mac(ip: str) -> str:
    """The MAC for an interface holding `ip`: 02:42 then the four address bytes.

    This is the scheme Docker's bridge driver uses for containers, so the compose and netns backends give
    a node the same, locally administered, MAC addresses without setting them explicitly.
    """
    return "02:42:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(ip).packed)


class NodePlan(BaseModel):
    """A resolved node: its index, names and addresses. What backends, status and sweeps work from."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    isl_ip: str
    ground_ip: str
    isl_mac: str
    ground_mac: str
    spec: NodeSpec


def plan_nodes(spec: SwarmSpec) -> list[NodePlan]:
    """Resolve every node of `spec` to its deterministic addresses."""
    return [
        NodePlan(
            index=i,
            name=n.name,
            isl_ip=node_address(spec.networks.isl.subnet, i),
            ground_ip=node_address(spec.networks.ground.subnet, i),
            isl_mac=node_mac(node_address(spec.networks.isl.subnet, i)),
            ground_mac=node_mac(node_address(spec.networks.ground.subnet, i)),
            spec=n,
        )
        for i, n in enumerate(spec.resolved_nodes(), start=1)
    ]


# ---------------------------------------------------------------------------------------------------
# Loading: YAML text -> SwarmSpec (swarm.spec.documents reads and validates), with one-line errors.


def spec_from_dict(data: Any, source: str = "") -> SwarmSpec:
    """Validate a parsed YAML/JSON document into a SwarmSpec, raising SpecError with one line."""
    return validate_document(SwarmSpec, data, source, "spec")


def swarm_from_template(template: dict, experiment: str, name: str, nodes: int, backend: str | None = None,
                        **fields: Any) -> SwarmSpec:
    """The swarm an experiment runs on: its `swarm:` template, then name, node count, `fields` and the
    experiment's backend (if it pins one); validated, errors naming the experiment."""
    data = {**template, "name": name, "nodes": nodes, **fields}
    if backend:
        data["backend"] = backend
    return spec_from_dict(data, f"{experiment}: swarm")


def load_spec(path: str | Path) -> SwarmSpec:
    """Read and validate a swarm spec file."""
    return spec_from_dict(read_yaml(path, "spec"), str(path))


def json_schema() -> dict[str, Any]:
    """JSON Schema of the spec, for editors."""
    schema = SwarmSpec.model_json_schema()
    schema["title"] = "swarm-emu swarm spec"
    return schema
