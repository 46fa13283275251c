"""The compose backend (its implementation: backend.py)."""
from swarm.runtime.backends.compose.backend import ComposeBackend

__all__ = ["ComposeBackend"]
