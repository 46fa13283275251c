"""swarm-emu: containerized distributed-spacecraft swarm emulation.

`Swarm` (in swarm.core) is the Python API; `swarm` (swarm.cli) is the command line.
"""
__version__ = "0.1.0"

from .core import Swarm  # noqa: E402

__all__ = ["Swarm", "__version__"]
