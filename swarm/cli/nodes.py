"""`swarm status`, `exec`, `ping`: looking at a running swarm's nodes and running commands in them."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click
from rich.table import Table

from swarm.cli.common import SwarmErrorExit
from swarm.cli.console import out
from swarm.runtime.swarm import Swarm


def register(cli: click.Group) -> None:
    """Add status, exec and ping to the `swarm` command group."""
    for command in (status, exec_, ping):
        cli.add_command(command)


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str, as_json: bool) -> None:
    """Show every node of swarm NAME: addresses, state, health."""
    swarm = Swarm.attach(name)
    rows = swarm.status()
    engine = swarm.links.engine
    if as_json:
        click.echo(json.dumps({"swarm": name, "backend": swarm.backend.name, "impairment_engine": engine.name,
                               "userspace_engine": swarm.links.placement(),
                               "mesh": swarm.mesh.implementation, "nodes": [asdict(r) for r in rows]}, indent=1))
        return
    table = Table(title=f"swarm {name} ({swarm.backend.name})")
    multi = any(r.host for r in rows)
    for col in ("node", *(["host"] if multi else []), "ISL address", "ground address", "state", "health"):
        table.add_column(col)
    for r in rows:
        style = "green" if r.state == "running" and r.health == "ok" else "red"
        table.add_row(r.name, *([r.host] if multi else []), r.isl_ip, r.ground_ip,
                      f"[{style}]{r.state}[/]", f"[{style}]{r.health}[/]")
    out.print(table)
    for line in swarm.backend_facts():
        out.print(line)
    out.print(f"impairment engine: {engine.describe()}; `swarm impair {name} --show` for the link conditions")
    if swarm.links.placement():
        out.print(f"userspace engine: {swarm.links.placement()}")
    out.print(f"mesh: {swarm.mesh.describe()}" + (f"; `swarm mesh {name}` for its routes" if swarm.spec.mesh.enabled else ""))


@click.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("node", required=False)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--all", "all_nodes", is_flag=True, help="Run on every node.")
def exec_(name: str, node: str | None, command: tuple[str, ...], all_nodes: bool) -> None:
    """Run COMMAND inside NODE of swarm NAME (or on every node with --all)."""
    swarm = Swarm.attach(name)
    if all_nodes:
        argv = ([node] if node else []) + list(command)
        if not argv:
            raise SwarmErrorExit("exec: give a COMMAND to run on every node", 2)
        failed = 0
        for n, res in swarm.exec_all(argv).items():
            out.print(f"[bold]--- {n} (exit {res.returncode})[/]")
            click.echo((res.stdout + res.stderr).rstrip())
            failed += not res.ok
        sys.exit(1 if failed else 0)
    if node is None or not command:
        raise SwarmErrorExit("exec: give NODE and COMMAND (or --all and COMMAND)", 2)
    res = swarm.exec(node, list(command), check=False)
    click.echo(res.stdout, nl=False)
    click.echo(res.stderr, nl=False, err=True)
    sys.exit(res.returncode)


@click.command()
@click.argument("name")
def ping(name: str) -> None:
    """All-pairs ISL reachability matrix of swarm NAME (exit 1 if any pair fails)."""
    swarm = Swarm.attach(name)
    matrix = swarm.reachability()
    names = [n.name for n in swarm.nodes]
    table = Table(title=f"ISL reachability, {name}: row pings column")
    table.add_column("")
    for n in names:
        table.add_column(n, justify="center")
    for src in names:
        table.add_row(src, *("·" if src == dst else ("[green]✓[/]" if matrix[src][dst] else "[red]✗[/]") for dst in names))
    pairs = sum(len(row) for row in matrix.values())
    ok = sum(v for row in matrix.values() for v in row.values())
    if len(names) <= 20:
        out.print(table)
    out.print(f"{ok}/{pairs} directed ISL pairs reachable")
    sys.exit(0 if ok == pairs else 1)
