"""The `swarm` program's entry point, kept free of imports: a Ctrl-C while the CLI's modules load (about a
second on a small host) or while an error is being reported ends in one line and exit 130, never in a
KeyboardInterrupt traceback. Nothing has been started while the modules load.

A Ctrl-C is never lost. Python runs a signal handler between any two bytecodes, including those of code whose
exceptions it prints as "Exception ignored in ..." and drops: finalizers (`__del__`, such as Popen's) and weakref
callbacks (importlib's module-lock clean-up, `weakref.finalize`). Seen in CI both ways: the interrupted `up` then
went on and left the swarm up. The handler below therefore raises KeyboardInterrupt only when no frame of the
interrupted stack is such code, and otherwise defers it by a few milliseconds (SIGALRM), to the code after it."""
from __future__ import annotations

import signal
import sys

DEFER_S = 0.005  # how soon a Ctrl-C that landed where it would be dropped is raised again, in the code after it


def _where_dropped(frame) -> bool:
    """`frame` or a caller of it is code whose exceptions Python drops: a finalizer (`__del__`), importlib's own
    code (its module-lock weakref callback), or weakref.py's (`finalize` callbacks)."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name == "__del__" or code.co_filename.startswith("<frozen importlib")
                or code.co_filename.endswith("/weakref.py")):
            return True
        frame = frame.f_back
    return False


def on_interrupt(signum, frame) -> None:
    """SIGINT (and the deferral's SIGALRM): KeyboardInterrupt, unless the interrupted stack is in code where it
    would be dropped; then once more in DEFER_S."""
    if _where_dropped(frame):
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
