"""What every DTN agent adapter gives the framework: one interface for planning, installing, starting,
readying and using a Bundle Protocol agent, whatever program it is.

An adapter (one package under swarm/dtn/agents/) turns a node's `dtn:` piece into the agent's command and
files (pure, golden-tested), names what must be installed (a build script and the programs it leaves, and the
convergence layers the agent carries), and answers the framework's questions about a running agent through a
`NodeShell`: a function that runs an argv inside one node (handed in by the runtime, so adapters import
nothing of it). The `swarm dtn` CLI, the `dtn` experiment type, `swarm view` and the traffic program use this
interface only; nothing outside the adapters' packages compares an agent's name.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Protocol

from swarm.dtn.contacts import ContactPlan
from swarm.spec.dtn import DtnSpec, endpoint, node_key


@dataclass(frozen=True)
class Peer:
    """Another node's agent as seen from one node: its name and ISL address."""

    name: str
    isl_ip: str
    index: int = 0  # the node's LTP engine ID (default: its index in the swarm)
    node_id: str = ""  # its endpoint ID, dtn://<name>/ or ipn:<number>.0 ("": dtn://<name>/)
    agent: str = ""  # the registry name of its agent (an adapter may reach its own kind differently: HDTN's router)

    @property
    def eid(self) -> str:
        return self.node_id or endpoint(self.name)

    @property
    def key(self) -> str:
        """The node part of its node ID, as agents list their peers: its name (dtn) or number (ipn)."""
        return node_key(self.eid)


@dataclass(frozen=True)
class LinkView:
    """What the framework knows of the directed link toward a peer: one-way delay (s) and rate (bit/s, 0 or
    None: unlimited)."""

    delay: float = 0.0
    rate: Optional[int] = None


@dataclass(frozen=True)
class AgentPlan:
    """One node's agent: the command, the files it needs in its work folder, and what readiness expects."""

    node: str
    argv: list[str]
    workdir: str
    node_id: str = ""  # the endpoint ID the agent must answer with ("": dtn://<node>/)
    files: dict[str, str] = field(default_factory=dict)  # name in workdir -> text
    web_port: int = 3000
    expected_peers: tuple[str, ...] = ()  # peers (Peer.key: name, or ipn number) it must list to count as ready
    route_attrs: tuple[str, ...] = ()  # attributes for the node's ISL subnet route (see route_attributes)
    ltp_argv: Optional[list[str]] = None  # cla: ltp: swarm-ltpcla's command, started beside the agent
    agent: str = ""  # the registry name of the adapter that planned it


@dataclass(frozen=True)
class Install:
    """What an agent needs on the host: a build script that prints the folder holding its programs (last line
    of stdout; exit 2 = bad input), the programs it must leave there, the cache folder it builds into
    (~/.cache/swarm-emu/<cache>, or $<cache_env>), the image recipe that layers them on the node image, and
    how long the first build takes (told to the user before it starts)."""

    script: str
    programs: tuple[str, ...]
    cache: str
    cache_env: str
    dockerfile: str
    image_repo: str
    first_build: str
    #: an agent the user builds (like cFS): no script; `cache_env` names the variable holding the install prefix
    #: (default for `dtn.install`), whose bin/ must hold `programs` and lib/ `libraries`; the image copies it
    user_tree: bool = False
    libraries: tuple[str, ...] = ()
    #: more the adapter needs of a user's tree: globs under the prefix (e.g. a Python package's folder), each of
    #: which must match; the image takes every file under what they match
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContactLoad:
    """A run's contact plan as its agents are given it: the plan (swarm node names, times in s from `release`,
    Unix s), the swarm's ipn node numbers, what the run does with pairs in no contact (`others`: 'down' or
    'keep', as swarm.dtn.contacts.link_schedule), each directed link's one-way delay (s) from the spec, and
    each node's agent."""

    plan: ContactPlan
    release: float
    numbers: dict[str, int]
    others: str = "down"
    owlt: Callable[[str, str], float] = lambda a, b: 0.0
    #: each DTN node's agent (node name -> its registry name): a plan names nodes, an HDTN router routes by hops
    agents: dict[str, str] = field(default_factory=dict)


class AgentFailed(RuntimeError):
    """A started agent that will not become ready (it said why, e.g. a configuration line it rejected): the
    framework stops waiting at once."""


@dataclass
class Counters:
    """What an agent says about itself (one row of `swarm dtn NAME`)."""

    eid: str
    peers: list[str]
    stored: int
    delivered: int
    forwarded: int
    received: int
    failed: int
    clas: list[str] = field(default_factory=list)  # the convergence layers the agent reaches its peers by


class ShellResult(Protocol):
    ok: bool
    returncode: int
    stdout: str
    stderr: str


#: Runs an argv inside one node: (argv, input text or None, timeout s, check) -> its result.
NodeShell = Callable[[list[str], Optional[str], float, bool], ShellResult]


@dataclass(frozen=True)
class UserConfigError(ValueError):
    """A line of the user's own `dtn.config` file the agent cannot take (file, line, why): one line."""

    source: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"dtn.config {self.source}: line {self.line}: {self.why}"


def script_ready(shell: NodeShell, argv: list[str]) -> tuple[Optional[str], str]:
    """Runs a readiness script in the node for an agent the user built (ION, µD3TN): exit 3 means the agent failed
    (its first line says why: AgentFailed), another non-zero exit is not ready yet (what it said, as the reason),
    exit 0 gives its output to the adapter's own judge: (reason or None, stdout)."""
    res = shell(argv, None, 30, False)
    if res.returncode == 3:
        raise AgentFailed(res.stdout.strip().splitlines()[0])
    if not res.ok:
        return (res.stdout or res.stderr).strip()[-120:] or f"exit {res.returncode}", ""
    return None, res.stdout


def script_output(shell: NodeShell, argv: list[str]) -> str:
    """A counters script's output in the node, or OSError with what it said."""
    res = shell(argv, None, 30, False)
    if not res.ok:
        raise OSError((res.stderr or res.stdout).strip()[-200:] or f"exit {res.returncode}")
    return res.stdout


class Agent(ABC):
    """One kind of DTN agent (see the module text). Instances hold no state: one per registry entry."""

    name: ClassVar[str]  # the registry key, as `dtn.agent` names it
    title: ClassVar[str]  # what it is, for people: "dtn7-rs"
    clas: ClassVar[tuple[str, ...]]  # the `dtn.cla` values it carries
    install: ClassVar[Install]
    daemon: ClassVar[str]  # the name its process runs under (pid and log files: <daemon>.pid, <daemon>.log)
    needs_containers: ClassVar[Optional[str]] = None  # why it runs on container backends only (None: runs anywhere)
    ltp_by_ltpcla: ClassVar[bool] = True  # cla ltp runs through swarm-ltpcla beside it (False: its own LTP engine)

    # ------------------------------------------------------------------------------- planning (pure)
    @abstractmethod
    def plan(self, node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             isl_subnet: str, rtt: float, link_of: Callable[[str, str], LinkView]) -> AgentPlan:
        """The agent of `node`; ValueError (one line naming the field) for a piece it cannot run."""

    def install_tree(self, piece: DtnSpec) -> Optional[str]:
        """An agent the user builds (Install.user_tree): the install prefix for `piece` (`dtn.install`, else the
        Install's variable, read when asked like SWARM_CFS_INSTALL); None when neither is set. Others: None."""
        if not self.install.user_tree:
            return None
        return piece.install or os.environ.get(self.install.cache_env) or None

    def config_text(self, piece: DtnSpec) -> str:
        """The user's file (`dtn.config`) appended to the generated configuration, '' without one; ValueError
        naming the field when it cannot be read."""
        if piece.config is None:
            return ""
        try:
            with open(piece.config, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"dtn.config {piece.config!r}: cannot read it ({exc.__class__.__name__})") from None

    @abstractmethod
    def guard(self, piece: DtnSpec, isl_subnet: str) -> str:
        """nft script that keeps the agent's ports to the swarm's ISL (applied in the node's namespace)."""

    # ------------------------------------------------------------------------ a running agent (via shell)
    @abstractmethod
    def ready(self, shell: NodeShell, plan: AgentPlan) -> Optional[str]:
        """None when the agent of `plan` is ready, else why not, in a few words."""

    @abstractmethod
    def counters(self, shell: NodeShell, node: str, piece: DtnSpec) -> Counters:
        """Its endpoint, peers and bundle counters; OSError or ValueError when it does not answer."""

    @abstractmethod
    def store(self, shell: NodeShell, piece: DtnSpec, timeout: float) -> list[str]:
        """The entries of its bundle store, one text per bundle ending in its constraints in braces, e.g.
        "dtn://sat01/in-... {ForwardPending}" (swarm.observe.view.store_counts counts them)."""

    @abstractmethod
    def send(self, shell: NodeShell, programs: dict[str, str], piece: DtnSpec, dst_eid: str, payload: bytes,
             lifetime: float) -> str:
        """Send one bundle to `dst_eid` from this agent; its bundle ID. `programs`: name -> path as the node
        sees it (Install.programs)."""

    @abstractmethod
    def log_events(self, log: str) -> list[dict]:
        """Its log as events {"t": epoch s, "kind", "bid", ...}: created, received, forwarded (to, cla, took),
        failed, delivered, removed, expired (pure)."""

    def failure_lines(self, log: str) -> list[tuple[Optional[float], str]]:
        """The lines of its log that say something went wrong, with their time (epoch s, None when the line has
        none), in log order (pure): what an interop matrix shows beside a cell that did not deliver. The default:
        lines naming ERROR or WARN."""
        return [(None, line.strip()) for line in log.splitlines() if " ERROR " in line or " WARN " in line]

    @abstractmethod
    def handovers(self, log: str, cla: str) -> int:
        """Bundles its log says it handed to the external CLA module `cla` (pure)."""

    def host_notes(self, piece: DtnSpec, fastest_bps: int, udp_rcvbuf: int) -> list[str]:
        """What the user should set on the host before this agent runs at the node's fastest link rate (bit/s, 0:
        none), given the host's default UDP receive buffer (bytes, net.core.rmem_default), one line each (pure).
        Default: nothing."""
        return []

    def load_contacts(self, shell: NodeShell, plan: AgentPlan, load: ContactLoad) -> Optional[list[str]]:
        """Give the running agent of `plan` the run's contact plan. None: this agent routes without one (it meets
        the plan as links the emulator cuts and restores: dtn7, Hardy); else what of the plan it would not take,
        one line each (the rest is loaded). OSError when the agent refuses the load."""
        return None

    @abstractmethod
    def client(self, piece: DtnSpec) -> dict[str, Any]:
        """How the traffic program (flightsw/dtn_traffic.py) talks to this agent: its `client` name and
        options, merged into the traffic plan (and given as --key value to recv-once)."""
