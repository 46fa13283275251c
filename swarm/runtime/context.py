"""What a service of a running swarm receives: a frozen SwarmContext, not the `Swarm` facade.

The link controller, the userspace engine's driver, the mesh and the DTN agents need the swarm's name, spec,
node plans, backend, runner, workdir, this host's capabilities and where to say what they do; nothing more.
Giving them this instead of the `Swarm` object keeps them from calling back into it (the cycle runtime.swarm ->
links -> runtime.swarm is gone) and lets a test build one from plain values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from swarm.caps import Capabilities
from swarm.errors import SpecError
from swarm.runtime.backends.base import Backend, Progress, no_progress, swarm_dir
from swarm.runtime.runner import Runner
from swarm.spec.model import NodePlan, SwarmSpec


def _quiet(_message: str) -> None:
    """A message sink that says nothing (the library default; the CLI prints)."""


@dataclass(frozen=True)
class SwarmContext:
    """One swarm as its services see it (immutable; `Swarm.context` makes one)."""

    name: str
    spec: SwarmSpec
    nodes: tuple[NodePlan, ...]
    backend: Backend
    runner: Runner
    workdir: Path
    caps: Capabilities
    message: Callable[[str], None] = field(default=_quiet, compare=False)
    progress: Progress = field(default=no_progress, compare=False)

    @property
    def dir(self) -> Path:
        """The swarm's state folder, <workdir>/.swarm/<name>/."""
        return swarm_dir(self.workdir, self.name)

    def node(self, name: str) -> NodePlan:
        """The plan of node `name`; SpecError naming the swarm's nodes when there is none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise SpecError(f"node {name!r}: no such node in swarm {self.name!r} "
                        f"(nodes: {self.nodes[0].name}..{self.nodes[-1].name})")
