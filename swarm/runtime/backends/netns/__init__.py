"""The netns backend (its implementation: backend.py)."""
from swarm.runtime.backends.netns.backend import NetnsBackend

__all__ = ["NetnsBackend"]
