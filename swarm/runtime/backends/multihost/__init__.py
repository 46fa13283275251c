"""The multi-host backend (Docker Swarm mode: several Docker Engines, overlay networks; implementation: backend.py).

Named multihost so that "swarm" means one thing in this project: the emulated spacecraft swarm."""
from swarm.runtime.backends.multihost.backend import SwarmBackend

__all__ = ["SwarmBackend"]
