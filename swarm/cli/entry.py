"""The `swarm` program's entry point, kept free of imports: a Ctrl-C while the CLI's modules load (about a
second on a small host) or while an error is being reported ends in one line and exit 130, never in a
KeyboardInterrupt traceback (issue 29, defect 6). Nothing has been started while the modules load."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Load the CLI (swarm.cli.main) and run it; a Ctrl-C the CLI's own handler did not see is one line."""
    try:
        from swarm.cli.main import main as cli_main

        cli_main(argv)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
