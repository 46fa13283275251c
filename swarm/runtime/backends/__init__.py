"""Runtime backends behind one interface, looked up in an explicit registry."""
from __future__ import annotations

from pathlib import Path

from swarm.errors import SpecError
from swarm.caps import Capabilities
from swarm.runtime.runner import Runner
from swarm.runtime.backends.base import Backend, Progress, no_progress, swarm_dir
from swarm.runtime.backends.compose.backend import ComposeBackend
from swarm.runtime.backends.netns.backend import NetnsBackend
from swarm.runtime.backends.multihost.backend import SwarmBackend

# `wipe` visits them in this order: swarm first, so a multi-host swarm is taken down host by host (its
# overlays released by the manager) before the compose backend sweeps this engine's labelled leftovers.
REGISTRY: dict[str, type[Backend]] = {
    SwarmBackend.name: SwarmBackend,
    ComposeBackend.name: ComposeBackend,
    NetnsBackend.name: NetnsBackend,
}
#: What each backend is (swarm.caps.BackendTraits), by name.
TRAITS = {name: cls.traits for name, cls in REGISTRY.items()}


def default_backend_name(caps: Capabilities) -> str:
    """compose where a Docker daemon answers, else netns."""
    return "compose" if caps.docker and caps.compose else "netns"


def get_backend(name: str | None, runner: Runner, caps: Capabilities, workdir: Path) -> Backend:
    """The backend called `name` (None: the default for this host); unknown names are a SpecError."""
    name = name or default_backend_name(caps)
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise SpecError(f"backend {name!r}: unknown backend (known: {', '.join(sorted(REGISTRY))})") from None
    return cls(runner, caps, workdir)


__all__ = ["Backend", "Progress", "REGISTRY", "TRAITS", "get_backend", "default_backend_name", "no_progress", "swarm_dir"]
