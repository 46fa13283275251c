"""The `swarm` program's entry point, kept free of imports: a Ctrl-C while the CLI's modules load (about a
second on a small host) or while an error is being reported ends in one line and exit 130, never in a
KeyboardInterrupt traceback. Nothing has been started while the modules load.

A Ctrl-C is never lost. Python runs a signal handler between any two bytecodes, including those of the
import system's own clean-up callbacks (importlib's module-lock weakref callback), where an exception is
printed as "Exception ignored in ..." and dropped: seen in CI, the interrupted `up` then went on and left the
swarm up. The handler below therefore raises KeyboardInterrupt only outside the import machinery, and
defers it by a few milliseconds (SIGALRM) while the interrupted frame is importlib's."""
from __future__ import annotations

import signal
import sys

DEFER_S = 0.005  # how soon a Ctrl-C that landed inside importlib is raised again, in the importing code


def _in_import_machinery(frame) -> bool:
    return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")


def on_interrupt(signum, frame) -> None:
    """SIGINT (and the deferral's SIGALRM): KeyboardInterrupt, unless `frame` is importlib's own code, where it
    would be swallowed; then once more in DEFER_S."""
    if _in_import_machinery(frame):
        signal.signal(signal.SIGALRM, on_interrupt)
        signal.setitimer(signal.ITIMER_REAL, DEFER_S)
        return
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Load the CLI (swarm.cli.main) and run it; a Ctrl-C the CLI's own handler did not see is one line."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where a caller chose to ignore it
        signal.signal(signal.SIGINT, on_interrupt)
    try:
        from swarm.cli.main import main as cli_main

        cli_main(argv)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
