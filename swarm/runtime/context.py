"""What a service of a running swarm receives: a frozen SwarmContext, not the `Swarm` facade.

The link controller, the userspace engine's driver, the mesh and the DTN agents need the swarm's name, spec,
node plans, backend, runner, workdir, this host's capabilities and where to say what they do; nothing more.
Giving them this instead of the `Swarm` object keeps them from calling back into it (the cycle runtime.swarm ->
links -> runtime.swarm is gone) and lets a test build one from plain values.

The context also holds the swarm's services once built (`service`): `up` checks the links, applies them and
starts the mesh with one link controller, and every later `swarm.links` is that controller. What the swarm's
owner wants done around its life (a node restarted, the swarm about to go down) and who owns it are given to
the context as plain arguments, not set in process-wide variables.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from swarm.caps import Capabilities
from swarm.errors import SpecError
from swarm.runtime.backends.base import Backend, Progress, no_progress, swarm_dir
from swarm.runtime.runner import Runner
from swarm.spec.model import NodePlan, SwarmSpec


def _quiet(_message: str) -> None:
    """A message sink that says nothing (the library default; the CLI prints)."""


def _nothing_to_restart(_node: str, _timeout: float) -> None:
    """No service to start again on a restarted node (a context built without add-ons)."""


S = TypeVar("S")


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
    #: A fault restarted a node (all its processes ended): start the add-ons' parts there again (Swarm's add-ons).
    on_node_restart: Callable[[str, float], None] = field(default=_nothing_to_restart, compare=False)
    #: Called with the swarm's name before `down` removes anything (an experiment's captures close their files
    #: while the interfaces still exist). A hook must not raise.
    before_down: tuple[Callable[[str], None], ...] = field(default=(), compare=False)
    #: The folder of the experiment run that brings this swarm up ("" outside one), recorded in its state so
    #: that `--resume` of that run knows a swarm its crash left up as its own.
    owner: str = ""
    _services: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    _services_lock: threading.RLock = field(default_factory=threading.RLock, init=False, compare=False, repr=False)

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

    def service(self, key: str, build: Callable[[], S]) -> S:
        """The swarm's service `key` (swarm.runtime.services): built by `build` the first time, then the same
        object for as long as this context lives (a new context, e.g. another spec, builds its own)."""
        with self._services_lock:
            if key not in self._services:
                self._services[key] = build()
            return self._services[key]
