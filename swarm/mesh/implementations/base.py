"""What every mesh implementation gives the framework: one interface for choosing, starting and reading a
B.A.T.M.A.N. mesh, whichever program runs it (pure: it plans commands and parses their output; the live
service, swarm/runtime/mesh.py, runs them). Nothing outside swarm/mesh/implementations/ compares an
implementation's name (tests/unit/test_layering.py holds the rule)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from swarm.caps import BackendTraits, Capabilities
from swarm.mesh.plan import Originator
from swarm.spec.mesh import MeshSpec


@dataclass(frozen=True)
class MeshStart:
    """How one node joins the mesh: a daemon to start in it (its argv, or None) and commands to run in it first."""

    daemon: Optional[list[str]] = None
    commands: list[list[str]] = field(default_factory=list)


class MeshImplementation(ABC):
    """One implementation of the mesh (the spec's `mesh.implementation`)."""

    name: ClassVar[str]
    how: ClassVar[str]  # what `swarm mesh` and `up` say it is
    #: its originator table is read through the node's private /run on the host (a control socket at a fixed
    #: path, Backend.private_run_prefix) rather than by a command run in the node
    originators_in_private_run: ClassVar[bool] = False
    explains_tq: ClassVar[bool] = False  # `swarm mesh` explains the link qualities (TQ) it shows

    @abstractmethod
    def unavailable(self, caps: Capabilities, backend: BackendTraits) -> str:
        """Why this host cannot run it (one line naming `mesh.implementation`), "" when it can."""

    @abstractmethod
    def start_plan(self, mesh: MeshSpec, iface: str, ip: str, prefixlen: int, mtu: int) -> MeshStart:
        """How one node (its ISL interface, address, prefix length and MTU) joins the mesh."""

    @abstractmethod
    def routes_argv(self) -> list[str]:
        """The command, run in a node, that prints its mesh routes."""

    @abstractmethod
    def parse_routes(self, text: str) -> dict[str, str]:
        """That command's output -> {destination address: next-hop address} (a neighbour is its own)."""

    @abstractmethod
    def originators_argv(self) -> list[str]:
        """The command that prints a node's originator table (every candidate next hop with its TQ)."""

    @abstractmethod
    def parse_originators(self, text: str) -> list[Originator]:
        """That command's output -> originators."""
