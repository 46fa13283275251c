"""The `swarm` program's entry point, kept free of imports: a Ctrl-C while the CLI's modules load (about a
second on a small host) or while an error is being reported ends in one line and exit 130, never in a
KeyboardInterrupt traceback. Nothing has been started while the modules load.

The SIGINT handler (swarm.interrupt.on_interrupt) is installed by the package's own __init__ when the program
starts, before this module loads, so a Ctrl-C in the imports before here is not dropped either; main() installs
it for callers that import this module without the program's start (tests)."""
from __future__ import annotations

import sys

from swarm.interrupt import DEFER_S, install, on_interrupt  # noqa: F401  (on_interrupt, DEFER_S: for the tests)


def main(argv: list[str] | None = None) -> None:
    """Load the CLI (swarm.cli.main) and run it; a Ctrl-C the CLI's own handler did not see is one line."""
    install()  # not where a caller chose to ignore SIGINT
    try:
        from swarm.cli.main import main as cli_main

        cli_main(argv)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
