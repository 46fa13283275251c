"""swarm-emu: containerized distributed-spacecraft swarm emulation.

`Swarm` (swarm.runtime.swarm) is the Python API; `swarm` (swarm.cli.main) is the command line.
`Swarm` is resolved on first use (PEP 562) so that importing a low layer (swarm.errors, swarm.units from
netem/ or analysis/) does not pull in the whole runtime. When the `swarm` program starts, the package installs its Ctrl-C handler
(swarm.interrupt) before anything else loads.
"""
import sys as _sys

from swarm.interrupt import install as _install, is_program as _is_program

if _is_program(_sys.argv):  # first, before any other import; a program that imports the package keeps its handler
    _install()

__version__ = "0.1.0"

__all__ = ["Swarm", "__version__"]


def __getattr__(name: str):
    if name == "Swarm":
        from swarm.runtime.swarm import Swarm

        return Swarm
    raise AttributeError(f"module 'swarm' has no attribute {name!r}")
