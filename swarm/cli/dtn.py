"""`swarm dtn`: the Bundle Protocol agents of a running swarm (swarm.dtn).

    swarm dtn my-swarm [--json]                      # per node: endpoint, peers, bundles stored, delivered, forwarded
    swarm dtn send my-swarm sat01 ground "hello"     # one bundle from sat01's agent to dtn://ground/in (or --file F)
    swarm dtn recv my-swarm ground [--timeout 10]    # the next bundle delivered to dtn://ground/in, as JSON
    swarm dtn log my-swarm sat02 [--tail 50]         # the agent's own log

Exit codes: 0 ok; 1 an agent does not answer / nothing received in time; 2 bad input (no such node, no agents).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from swarm.cli.console import out
from swarm.errors import SpecError
from swarm.runtime.swarm import Swarm


def register(cli: click.Group) -> None:
    """Add `dtn` to the `swarm` command group."""
    cli.add_command(dtn)


class _DefaultStatus(click.Group):
    """`swarm dtn NAME` is `swarm dtn status NAME`."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["status", *args]
        return super().resolve_command(ctx, args)


def _agents(name: str):
    swarm = Swarm.attach(name)
    agents = swarm.dtn
    if not agents.enabled:
        raise SpecError(f"swarm {name!r}: has no DTN agents (give nodes a `dtn:` piece, e.g. defaults: {{dtn: {{}}}})")
    return agents


@click.group(cls=_DefaultStatus)
def dtn() -> None:
    """DTN agents of a swarm: status (`swarm dtn NAME`), send, recv, log."""


@dtn.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str, as_json: bool) -> None:
    """Per DTN node: endpoint, CLA, routing, peers, bundles stored, delivered, forwarded, received, failed."""
    rows = _agents(name).status()
    ok = all(r.state == "ok" for r in rows)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=1))
        sys.exit(0 if ok else 1)
    table = Table(title=f"DTN agents of {name} (dtn7-rs)")
    for col in ("node", "endpoint", "cla", "routing", "peers", "stored", "delivered", "forwarded", "received", "failed", "state"):
        table.add_column(col, justify="right" if col in ("stored", "delivered", "forwarded", "received", "failed") else "left")
    for r in rows:
        peers = " ".join(r.peers) if len(r.peers) <= 6 else f"{len(r.peers)} peers"
        table.add_row(r.node, r.eid, r.cla, r.routing, peers, str(r.stored), str(r.delivered), str(r.forwarded),
                      str(r.received), str(r.failed), "[green]ok[/]" if r.state == "ok" else f"[red]{r.state}[/]")
    out.print(table)
    sys.exit(0 if ok else 1)


@dtn.command()
@click.argument("name")
@click.argument("src")
@click.argument("dst")
@click.argument("text", required=False)
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False), help="Send this file's bytes.")
@click.option("--lifetime", type=float, default=3600.0, show_default=True, help="Bundle lifetime, seconds.")
def send(name: str, src: str, dst: str, text: str | None, path: str | None, lifetime: float) -> None:
    """Send one bundle from SRC's agent to DST's endpoint dtn://DST/in (TEXT, or --file)."""
    if (text is None) == (path is None):
        raise SpecError("dtn send: give the payload as TEXT or --file (one of them)")
    payload = Path(path).read_bytes() if path else text.encode()
    bid = _agents(name).send(src, dst, payload, lifetime)
    out.print(f"sent {len(payload)} bytes from {src} to dtn://{dst}/in: bundle {bid}")


@dtn.command()
@click.argument("name")
@click.argument("node")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for a bundle.")
def recv(name: str, node: str, timeout: float) -> None:
    """Take the next bundle delivered to dtn://NODE/in and print it as JSON."""
    got = _agents(name).recv(node, timeout)
    click.echo(json.dumps(got))
    sys.exit(0 if "error" not in got else 1)


@dtn.command()
@click.argument("name")
@click.argument("node")
@click.option("--tail", type=int, default=50, show_default=True, help="Last lines (0: all).")
def log(name: str, node: str, tail: int) -> None:
    """The agent's own log on NODE."""
    agents = _agents(name)
    if node not in agents.by_name:
        raise SpecError(f"node {node!r}: no DTN agent in swarm {name!r}")
    click.echo(agents.log(node, tail))
