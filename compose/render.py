"""Compose rendering (pure): a SwarmSpec becomes a Compose file a person can read and run by hand.

The file uses the 2.4 format, which both `docker-compose` (v1) and `docker compose` (v2) accept and
which keeps `cpus`, `mem_limit`, `init` and `sysctls` at service level. Everything carries the labels
`io.swarm-emu.swarm=<name>` so that `down` and `wipe` find exactly what the framework made.
"""
from __future__ import annotations

import ipaddress
from typing import Any

import yaml

from swarm.cfs.node import CfsRuntime, cfs_service
from swarm.spec.model import NodePlan, SwarmSpec, gateway_address, plan_nodes

LABEL_SWARM = "io.swarm-emu.swarm"
LABEL_NODE = "io.swarm-emu.node"
LABEL_INDEX = "io.swarm-emu.index"
LABEL_ROLE = "io.swarm-emu.role"
LABEL_NET = "io.swarm-emu.network"

# Only what the node software needs: NET_ADMIN for addresses, routes, qdiscs, nftables and the mesh;
# NET_RAW for ping, fping, traceroute and raw sockets; SYS_NICE for real-time scheduling (flight
# software uses it, and the traffic engine starts its flows as a SCHED_FIFO task so that a loaded host
# cannot delay the start). Never `privileged`.
NODE_CAPABILITIES = ["NET_ADMIN", "NET_RAW", "SYS_NICE"]

# Per-container kernel settings: a spacecraft node forwards for the mesh and must not drop
# asymmetrically routed mesh traffic; IPv6 is off so the only traffic is what the tests send.
NODE_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv6.conf.all.disable_ipv6": "1",
}

AGENT_COMMAND = ["python3", "/opt/swarm/flightsw/agent.py", "run"]


def project_name(swarm: str) -> str:
    """Compose project name of a swarm (also the container and network name prefix)."""
    return swarm


def container_name(swarm: str, node: str) -> str:
    return f"{swarm}-{node}"


def network_name(swarm: str, network: str) -> str:
    return f"{swarm}-{network}"


def node_environment(spec: SwarmSpec, node: NodePlan) -> dict[str, str]:
    """Environment every node gets (the same in every backend), then the user's own variables."""
    isl = ipaddress.IPv4Network(spec.networks.isl.subnet)
    ground = ipaddress.IPv4Network(spec.networks.ground.subnet)
    return {
        "SWARM_NAME": spec.name,
        "SWARM_NODE": node.name,
        "SWARM_INDEX": str(node.index),
        "SWARM_ROLE": node.spec.role,
        "SWARM_ISL_IP": node.isl_ip,
        "SWARM_ISL_PREFIX": str(isl.prefixlen),
        "SWARM_GROUND_IP": node.ground_ip,
        "SWARM_GROUND_PREFIX": str(ground.prefixlen),
        **node.spec.env,
    }


def _service(spec: SwarmSpec, node: NodePlan, image: str, cfs: CfsRuntime | None = None) -> dict[str, Any]:
    svc: dict[str, Any] = {
        "image": node.spec.image or image,
        "container_name": container_name(spec.name, node.name),
        "hostname": node.name,
        "init": True,
        "cap_add": list(NODE_CAPABILITIES),
        "sysctls": dict(NODE_SYSCTLS),
        "labels": {
            LABEL_SWARM: spec.name,
            LABEL_NODE: node.name,
            LABEL_INDEX: str(node.index),
            LABEL_ROLE: node.spec.role,
        },
        "environment": node_environment(spec, node),
        "networks": {
            "isl": {"ipv4_address": node.isl_ip},
            "ground": {"ipv4_address": node.ground_ip},
        },
        "stop_grace_period": "2s",
    }
    if node.spec.command:
        svc["command"] = list(node.spec.command)
    elif not node.spec.image:
        svc["command"] = list(AGENT_COMMAND)
    if node.spec.resources.cpus is not None:
        svc["cpus"] = node.spec.resources.cpus
    if node.spec.resources.memory is not None:
        svc["mem_limit"] = node.spec.resources.memory
    if node.spec.cfs is not None:
        extra = cfs_service(node, cfs or CfsRuntime())
        svc.update(image=extra["image"], working_dir=extra["working_dir"], command=extra["command"])
        svc["sysctls"].update(extra["sysctls"])
        svc["environment"].update(extra["environment"])
        if extra["ulimits"]:
            svc["ulimits"] = extra["ulimits"]
    return svc


def _network(spec: SwarmSpec, which: str) -> dict[str, Any]:
    net = getattr(spec.networks, which)
    return {
        "name": network_name(spec.name, which),
        "driver": "bridge",
        "internal": which == "isl",
        "driver_opts": {"com.docker.network.driver.mtu": str(net.mtu)},
        "ipam": {"config": [{"subnet": net.subnet, "gateway": gateway_address(net.subnet)}]},
        "labels": {LABEL_SWARM: spec.name, LABEL_NET: which},
    }


def escape_interpolation(value: Any) -> Any:
    """Every `$` in every string doubled: Compose reads `$$` as a literal `$`, so what the spec says (an
    environment value `$HOME`, a command `echo $(id)`) is what the node gets, as on the netns backend,
    instead of the host's value or an 'Invalid interpolation format' at `up`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: escape_interpolation(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_interpolation(v) for v in value]
    return value


def render_compose(spec: SwarmSpec, image: str, cfs: CfsRuntime | None = None) -> dict[str, Any]:
    """The Compose document for `spec`, with `image` for nodes that name none; cFS nodes get the image
    and ulimits in `cfs` (swarm.cfs.node). Strings are escaped for Compose's interpolation."""
    return escape_interpolation({
        "version": "2.4",
        "services": {n.name: _service(spec, n, image, cfs) for n in plan_nodes(spec)},
        "networks": {"isl": _network(spec, "isl"), "ground": _network(spec, "ground")},
    })


def compose_yaml(doc: dict[str, Any], source: str = "") -> str:
    """The Compose document as YAML with a header saying where it came from."""
    header = "# Generated by swarm-emu" + (f" from {source}" if source else "") + ". Edit the spec, not this file.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
