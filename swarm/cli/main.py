"""`swarm` command line: a thin layer over the Swarm facade (swarm.runtime.swarm) and the experiment registry.

The commands live in one module per topic (lifecycle, nodes, host, experiments, links, cfs, mesh, orbits, dtn,
observe), each adding its commands to the group here with `register`.

One top-level handler turns every framework error into one line on stderr and an exit code: 2 for bad
input (nothing was started), 1 for a failure while running, 130 after Ctrl-C. `--debug` shows tracebacks
and every command the runner executes.
"""
from __future__ import annotations

import logging
import sys

import click

from swarm import __version__
from swarm.cli import cfs, dtn, experiments, host, lifecycle, links, mesh, nodes, observe, orbits
from swarm.cli.console import err
from swarm.errors import NodeFailed, SwarmError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and every command run.")
@click.version_option(__version__, prog_name="swarm")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Containerized spacecraft-swarm emulation: spec -> compose -> running swarm -> sweeps -> reports."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(name)s: %(message)s")


# each topic's commands, in its own module: init/up/down/wipe/list; status/exec/ping; probe/schema;
# sweep/run/report; impair/fault; cfs; mesh; orbits; dtn; capture/events/view
for _commands in (lifecycle, nodes, host, experiments, links, cfs, mesh, orbits, dtn, observe):
    _commands.register(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI with the one top-level error handler."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="swarm", standalone_mode=False)
    except NodeFailed as exc:
        err.print(f"[bold]--- logs of {exc.node}:[/]")
        err.print(exc.logs or "(no output)", markup=False, highlight=False)
        _fail(exc, exc.exit_code, debug)
    except SwarmError as exc:
        _fail(exc, exc.exit_code, debug)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except click.exceptions.Abort:
        err.print("interrupted")
        sys.exit(130)
    except KeyboardInterrupt:
        err.print("interrupted; everything this run created was removed")
        sys.exit(130)


def _fail(exc: Exception, code: int, debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc()
    click.echo(f"error: {exc}", err=True)
    sys.exit(code)
