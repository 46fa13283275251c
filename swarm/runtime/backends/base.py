"""The small interface every runtime backend implements.

A backend turns a validated spec into running nodes and back. It must be able to remove a swarm knowing
only its name (after a crash the state file may be gone), and `wipe` must find everything the framework
made from labels or name prefixes alone. A future multi-host `stack` backend (Docker Swarm) implements
the same methods.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, ClassVar

from swarm.caps import BackendTraits, Capabilities
from swarm.cfs.node import NO_CFS, CfsRuntime
from swarm.runtime.runner import Result, Runner
from swarm.errors import SpecError
from swarm.spec.model import NodePlan, SwarmSpec, check_swarm_name

Progress = Callable[[int, int, str], None]  # (done, total, what is happening)
NODE_ACTIONS = ("stop", "kill", "pause", "unpause", "restart")  # faults on one node (experiments.timeline)


def swarm_dir(workdir: Path, swarm: str) -> Path:
    """Where the framework keeps a swarm's state, logs and pid files: <workdir>/.swarm/<swarm>/.

    The name must follow the spec's rule and the resolved path must lie under <workdir>/.swarm: a name
    from the command line never reaches the filesystem otherwise (SpecError)."""
    root = (Path(workdir) / ".swarm").resolve()
    path = (root / check_swarm_name(swarm)).resolve()
    if path.parent != root:
        raise SpecError(f"swarm {swarm!r}: state path {path} is not under {root}")
    return path


def no_progress(done: int, total: int, what: str) -> None:
    """A progress callback that shows nothing (the library default; the CLI passes a bar)."""


class ForwardingHop:
    """A namespace the framework owns that every frame between a swarm's nodes crosses after the sender let go of
    it (the netns switch namespace; the compose host at the swarm's ISL bridge). A link engine holding packets
    there leaves the sender's socket buffers and the receiver's kernel timestamps (ping's RTT) as a real long
    link would. A backend that has one returns it from Backend.hop(); the userspace engine's driver
    (netem.engines.drivers.linkd) uses it. The defaults below suit a hop whose namespace is the swarm's own."""

    #: where the swarm's userspace link engine runs at this hop (for the probe, `status` and host.json)
    placement: str = ""

    def port(self, swarm: str, node_index: int, iface: str) -> tuple[list[str], str] | None:
        """(argv prefix that runs a command in the hop's namespace, the bridge port towards the node's `iface`),
        or None (a node that is not running has no port)."""
        return None

    def hold(self, swarm: str, node_index: int, nodes: int) -> tuple[str, int] | None:
        """(iptables chain, NFQUEUE number) for the node's packets at the hop; None: the hop's namespace is the
        swarm's own, so the defaults (netem.engines.hold.LinkdHold.at_hop) apply."""
        return None

    def comment(self, swarm: str) -> str | None:
        """A comment on the hop's jump rules naming the swarm (where the hop is shared, as the host is)."""
        return None

    def prepare(self, swarm: str) -> None:
        """Make bridged IPv4 go through iptables at the hop (net.bridge.bridge-nf-call-iptables=1)."""
        return None

    def release(self, swarm: str) -> None:
        """The framework just removed rules of its own at the hop: undo what the hop holds only for them."""
        return None

    def notes(self, swarm: str) -> list[str]:
        """What the backend changed at the hop that a user should know (shown by `impair --show`)."""
        return []

    def start_daemon(self, swarm: str, argv: list[str], name: str) -> bool:
        """Start one long-running process for the whole swarm at the hop (with the host's /run; its output in the
        swarm's logs as `hop.<name>.log`); False where it cannot."""
        return False

    def stop_daemon(self, swarm: str, name: str) -> None:
        """End the swarm's process at the hop (to start it anew, e.g. when a node's port changed)."""
        return None


class Backend(ABC):
    """Runtime backend: creates, inspects, enters and removes the nodes of swarms."""

    name: ClassVar[str]
    #: What this backend is (containers, multi_host, runs_cfs, isl_multicast): asked instead of its name.
    traits: ClassVar[BackendTraits]

    def __init__(self, runner: Runner, caps: Capabilities, workdir: Path):
        self.runner = runner
        self.caps = caps
        self.workdir = workdir

    #: Whether this machine reaches the nodes' ground addresses itself (false for overlays on other hosts).
    host_reaches_ground: ClassVar[bool] = True
    #: `down NAME --keep-compose`: the compose backend keeps the generated compose file; the others ignore it.
    keep_compose: bool = False

    @abstractmethod
    def check_available(self) -> None:
        """Raise SpecError naming what is missing if this backend cannot run on this host."""

    def check_spec(self, spec: SwarmSpec, nodes: list[NodePlan]) -> object:
        """Raise SpecError (naming host and field) for what this spec cannot do on the backend's hosts;
        creates nothing. One-host backends have nothing to check beyond check_available."""
        return None

    def node_hosts(self, swarm: str) -> dict[str, str]:
        """{node: host name} for backends that spread nodes over hosts; empty on one host."""
        return {}

    def clock_offsets(self, swarm: str) -> dict:
        """{host name: swarm.runtime.clocks.ClockOffset} of each host other than this machine's kernel
        clock; empty when every node shares this machine's clock."""
        return {}

    @abstractmethod
    def up(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, progress: Progress,
           cfs: CfsRuntime = NO_CFS) -> None:
        """Create and start every node (`cfs`: the images and ulimits of cFS nodes, on backends that run them).
        Raises on failure; the caller rolls back with `down`."""

    @abstractmethod
    def down(self, swarm: str) -> list[str]:
        """Remove everything this backend made for `swarm`; return what was removed (empty: nothing)."""

    @abstractmethod
    def node_states(self, swarm: str) -> dict[str, str]:
        """State of each node that exists: running, exited, paused, created, ..."""

    def isl_iface(self, swarm: str, node: str) -> str | None:
        """The interface a node's ISL links are impaired on, where the backend names it itself (pure; None: the
        link controller looks inside the node for the one holding its ISL address)."""
        return None

    @abstractmethod
    def exec_prefix(self, swarm: str, node: str, interactive: bool = False) -> list[str]:
        """argv prefix that runs a command inside `node` (pure: no I/O); `interactive` keeps stdin open."""

    @abstractmethod
    def agent_argv(self, swarm: str, node: str, *args: str) -> list[str]:
        """argv that runs `flightsw/agent.py <args>` inside `node`, with stdin open (pure: no I/O)."""

    @abstractmethod
    def logs(self, swarm: str, node: str, tail: int = 50) -> str:
        """The last lines the node's main process wrote."""

    def not_ready_detail(self, swarm: str, node: str) -> str:
        """What the backend can tell about a node that runs but does not answer (one line; '' if nothing)."""
        return ""

    @abstractmethod
    def node_action(self, swarm: str, node: str, action: str) -> None:
        """Fault on one node, one of NODE_ACTIONS: stop (graceful), kill, pause, unpause, restart (the node
        comes back with its addresses and main process; link conditions are re-applied by netem.runtime.links)."""

    @abstractmethod
    def wipe(self) -> list[str]:
        """Remove everything carrying the framework's label or prefix, of every swarm."""

    def leftovers(self, swarm: str | None = None) -> list[tuple[str, str]]:
        """(swarm, what) of everything `down(swarm)` (or, for None, `wipe`) would remove; `wipe --dry-run`
        lists it and the confirmation counts its swarms. A backend that cannot tell lists nothing."""
        return []

    @abstractmethod
    def netns_ids(self, swarm: str) -> set[str]:
        """The network-namespace ids ('net:[inode]') of the swarm's nodes, as /proc/<pid>/ns/net shows them."""

    def private_run_prefix(self, swarm: str, node: str) -> list[str]:
        """argv prefix that runs a command inside `node` with a /run of the node's own, for daemons whose socket
        path is fixed (batmand's /var/run/batmand.socket). A container has its own already."""
        return self.exec_prefix(swarm, node)

    def run_path_on_host(self, swarm: str, node: str, path: str) -> Path | None:
        """The host's name for `path` under the node's private /run (e.g. a daemon's control socket), where the
        node's /run is a host folder; None where it is not (a container's)."""
        return None

    def hop(self) -> ForwardingHop | None:
        """The backend's forwarding hop on this host (see ForwardingHop), or None where it has none."""
        return None

    @abstractmethod
    def start_daemon(self, swarm: str, node: str, argv: list[str], name: str, at_hop: bool = False) -> None:
        """Start a long-running process (e.g. the mesh daemon) in `node`, with private_run_prefix's /run; it
        is removed with the node and its output goes to the node's logs. `at_hop`: at the node's forwarding
        hop instead (only where hop() has one)."""

    def node_binary(self, host_path: str) -> str:
        """Where a host binary installed with install_binary is found inside a node: at its host path where the
        node sees the host's files."""
        return host_path

    def install_binary(self, swarm: str, node: str, host_path: str) -> str:
        """Make a host binary runnable inside `node`; returns its path there (node_binary)."""
        return self.node_binary(host_path)

    def describe_hosts(self, swarm: str) -> list[dict]:
        """Facts about every host the swarm runs on (multi-host backends); [] on one host."""
        return []

    def facts(self, swarm: str) -> list[str]:
        """Lines about where the swarm runs (multi-host backends: hosts, node MTU, clocks); [] on one host."""
        return []

    def exec(self, swarm: str, node: str, argv: list[str], *, check: bool = True, timeout: float | None = None) -> Result:
        """Run `argv` inside `node` and return its result."""
        return self.runner.run(self.exec_prefix(swarm, node) + list(argv), check=check, timeout=timeout)
