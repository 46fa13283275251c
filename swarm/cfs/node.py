"""A user's cFS build on every node: spec checks, per-node IDs, the cFS image and its Compose settings.

A node whose spec has `cfs: {install: <path to build/exe/cpu1>}` runs that install tree's `core-cpu1`
(the pc-linux PSP) as its main process, in an image built FROM the framework's node image (so iperf3,
nft and the agent stay available). Node i (1-based) gets CPU ID `cpu_id + i - 1` and spacecraft ID
`spacecraft_id + i - 1`, passed with the PSP's `--cpuid/--scid/--cpuname` options. CI_LAB listens on
UDP `1234 + CPU ID - 1` (its own rule: CI_LAB_BASE_UDP_PORT + CFE_PSP_GetProcessorId() - 1); TO_LAB
sends telemetry to UDP 1235 of the address named in its "enable output" command (swarm.cfs_ground).
Each node redirects its UDP 1234 to its CI_LAB port (images/cfs/cfs-entry.sh), so a ground tool sends
every node's commands to <node ground address>:1234.

Only the compose backend runs cFS. netns nodes share the host's filesystem and IPC namespace: the
pc-linux PSP keys its System V shared memory (reset area, CDS) with ftok() on files in its working
directory, so instances sharing one tree would share those segments, and the segments would outlive the
swarm in the host's namespace; fs.mqueue.msg_max could only be raised host-wide.
"""
from __future__ import annotations

import resource
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from swarm.caps import BackendTraits
from swarm.errors import SpecError
from swarm.spec.model import NodePlan, SwarmSpec

CFS_IMAGE_REPO = "swarm-emu/cfs"
CFS_DOCKERFILE = "images/cfs/Dockerfile"
CFS_ENTRY = "images/cfs/cfs-entry.sh"  # redirects UDP 1234 to CI_LAB's port, then runs core-cpu1
CORE_EXE = "core-cpu1"
STARTUP_SCRIPT = "cf/cfe_es_startup.scr"
CFS_DIR_IN_IMAGE = "/opt/cfs/cpu1"
OPERATIONAL_LINE = "CFE_ES_Main entering OPERATIONAL state"
CI_LAB_BASE_PORT = 1234  # CI_LAB_BASE_UDP_PORT of ci_lab's default interface config
TO_LAB_PORT = 1235  # TO_LAB_TLM_PORT of to_lab's default interface config
#: Files the pc-linux PSP writes into its working directory at run time: neither copied nor hashed, so
#: a build that was also run natively in place gives the same image.
RUNTIME_FILES = {"EEPROM.DAT", ".cdskeyfile", ".resetkeyfile", ".reservedkeyfile"}
#: Per IPC namespace (so per container): SB pipes are POSIX queues up to CFE_PLATFORM_SB_MAX_PIPE_DEPTH
#: (256) deep. With the default msg_max of 10, mq_open refuses deeper queues to a process without
#: CAP_SYS_RESOURCE (root in a container): seen here, cFE's EVS pipe fails and core-cpu1 gives up.
CFS_SYSCTLS = {"fs.mqueue.msg_max": "256"}
#: Wanted resource limits: real-time priorities for OSAL's task priorities, and room for the queues
#: (RLIMIT_MSGQUEUE is charged per user, and every container's root is the same user). -1: unlimited.
WANTED_ULIMITS = {"rtprio": 99, "msgqueue": -1}
_RLIMITS = {"rtprio": resource.RLIMIT_RTPRIO, "msgqueue": resource.RLIMIT_MSGQUEUE}
_CAP_SYS_RESOURCE = 24
_BUILD_TIMEOUT = 1800.0


def cfs_nodes(nodes: Sequence[NodePlan]) -> list[NodePlan]:
    """The nodes that run cFS."""
    return [n for n in nodes if n.spec.cfs is not None]


def node_ids(node: NodePlan) -> tuple[int, int]:
    """(CPU ID, spacecraft ID) of a cFS node: the group's bases plus the node's index - 1."""
    cfs = node.spec.cfs
    assert cfs is not None
    return cfs.cpu_id + node.index - 1, cfs.spacecraft_id + node.index - 1


def ci_lab_port(cpu_id: int) -> int:
    """UDP port CI_LAB listens on for commands on the node with this CPU ID."""
    return CI_LAB_BASE_PORT + cpu_id - 1


def core_command(node: NodePlan) -> list[str]:
    """The node's main process: the entry script, then core-cpu1 with its CPU ID, spacecraft ID, CPU name
    and reset type."""
    cpu_id, scid = node_ids(node)
    cfs = node.spec.cfs
    assert cfs is not None
    return ["swarm-cfs-entry", f"./{CORE_EXE}", "--cpuid", str(cpu_id), "--scid", str(scid), "--cpuname", node.name,
            "--reset", cfs.reset]


def check_cfs(spec: SwarmSpec, nodes: list[NodePlan], backend: BackendTraits) -> None:
    """Refuse, with one line naming the field and value, what cannot run: cFS on the netns backend, an
    install path without core-cpu1 or without cf/cfe_es_startup.scr. Reads the install paths only."""
    todo = cfs_nodes(nodes)
    if not todo:
        return
    if not backend.runs_cfs:
        raise SpecError(f"node {todo[0].name!r}: cfs runs only on the compose backend (netns nodes share the "
                        f"host's files and IPC namespace, so cFS instances would share their shared-memory "
                        f"segments); got backend {backend.name!r}")
    checked: set[str] = set()
    for node in todo:
        assert node.spec.cfs is not None  # todo holds the nodes with a cfs section
        install = node.spec.cfs.install
        if install in checked:
            continue
        path = Path(install)
        if not (path / CORE_EXE).is_file():
            raise SpecError(f"node {node.name!r}: cfs.install {install!r}: no {CORE_EXE} in it "
                            "(expected a cFS install tree such as <cFS>/build/exe/cpu1)")
        if not (path / STARTUP_SCRIPT).is_file():
            raise SpecError(f"node {node.name!r}: cfs.install {install!r}: no {STARTUP_SCRIPT} in it "
                            "(expected a cFS install tree such as <cFS>/build/exe/cpu1)")
        checked.add(install)


# ------------------------------------------------------------------------------------------- limits
def clamp_ulimits(wanted: dict[str, int], can_raise: bool, hard: dict[str, int]) -> tuple[dict[str, int], list[str]]:
    """The ulimits a container can get, and notes on those lowered (pure).

    Without CAP_SYS_RESOURCE the runtime cannot raise a hard limit, so each wanted value is capped at
    the host's current hard limit (-1 there means unlimited); a limit of 0 is left out.
    """
    if can_raise:
        return dict(wanted), []
    out: dict[str, int] = {}
    notes: list[str] = []
    for name, value in wanted.items():
        limit = hard.get(name, -1)
        if limit == -1 or (value != -1 and value <= limit):
            out[name] = value
            continue
        notes.append(f"{name} {'unlimited' if value == -1 else value} -> {limit}")
        if limit > 0:
            out[name] = limit
    return out, notes


@dataclass(frozen=True)
class CfsRuntime:
    """What `up` found out for cFS nodes: the image of each install path and the container ulimits."""

    images: dict[str, str] = field(default_factory=dict)
    ulimits: dict[str, int] = field(default_factory=dict)


#: A swarm without cFS nodes (or before their images are built): no images, no ulimits.
NO_CFS = CfsRuntime()


def cfs_service(node: NodePlan, runtime: CfsRuntime) -> dict:
    """Compose service fields of a cFS node (merged over the ordinary node service; pure)."""
    cfs = node.spec.cfs
    assert cfs is not None
    cpu_id, scid = node_ids(node)
    return {
        "image": runtime.images.get(cfs.install, f"{CFS_IMAGE_REPO}:unbuilt"),
        "working_dir": CFS_DIR_IN_IMAGE,
        "command": core_command(node),
        "sysctls": dict(CFS_SYSCTLS),
        "ulimits": dict(runtime.ulimits),
        "environment": {"SWARM_CFS_CPU_ID": str(cpu_id), "SWARM_CFS_SPACECRAFT_ID": str(scid),
                        "SWARM_CFS_CI_PORT": str(ci_lab_port(cpu_id)), "SWARM_CFS_TO_PORT": str(TO_LAB_PORT)},
    }
