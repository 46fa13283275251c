#!/usr/bin/env python3
"""In-node agent: the main process of every spacecraft node (container or namespace).

`agent.py run` is the node's long-running process: it reports the node's identity, then waits for
SIGTERM/SIGINT and exits 0. It uses only the Python standard library, because it runs both inside the
node image and, with the netns backend, on the host.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys


def cmd_run(_args: argparse.Namespace) -> int:
    """Run until told to stop."""
    stop = False

    def on_signal(signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node = os.environ.get("SWARM_NODE", "?")
    print(f"agent: node {node} (index {os.environ.get('SWARM_INDEX', '?')}) "
          f"isl {os.environ.get('SWARM_ISL_IP', '?')} ground {os.environ.get('SWARM_GROUND_IP', '?')} up", flush=True)
    while not stop:
        signal.pause()
    print(f"agent: node {node} stopping", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="the node's main process").set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
