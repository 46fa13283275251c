"""swarm-emu: containerized distributed-spacecraft swarm emulation.

`Swarm` (swarm.runtime.swarm) is the Python API; `swarm` (swarm.cli.main) is the command line.
`Swarm` is resolved on first use (PEP 562) so that importing a low layer (swarm.errors, swarm.units from
netem/ or analysis/) does not pull in the whole runtime. When the `swarm` program starts, the package installs its Ctrl-C handler
(swarm.interrupt) before anything else loads.
"""
import sys as _sys
import _signal  # built in and loaded already: no import work before the first handler (signal.py takes ms to load)

# The `swarm` program (`python -m swarm`, or the console script) catches Ctrl-C from this line on: until the real
# handler is in place a Ctrl-C is only noted (a stress run of CI caught one in `import signal` below), then it
# ends the program with the handler's one line, as nothing has started yet. A program importing the package keeps
# its own handler (`python -m swarm`: argv[0] is '-m' while runpy imports the package; the console script: its path).
_early_interrupts: list = []
if (_sys.argv[:1] == ["-m"] or (bool(_sys.argv) and _sys.argv[0].rsplit("/", 1)[-1] == "swarm")) and \
        _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, lambda signum, frame: _early_interrupts.append(signum))
    from swarm.interrupt import install as _install

    _install(replacing=_signal.getsignal(_signal.SIGINT))
    if _early_interrupts:
        _sys.stderr.write("interrupted\n")
        raise SystemExit(130)

__version__ = "0.1.0"

__all__ = ["Swarm", "__version__"]


def __getattr__(name: str):
    if name == "Swarm":
        from swarm.runtime.swarm import Swarm

        return Swarm
    raise AttributeError(f"module 'swarm' has no attribute {name!r}")
