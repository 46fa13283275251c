"""`swarm mesh`: the B.A.T.M.A.N. mesh of a running swarm, and the mesh lines of `up`, `fault` and `status`.

    swarm mesh my-swarm            # per node: neighbours (TQ, 0-255: batmand's or batman-adv's), next hop to every other node, converged?
    swarm mesh my-swarm --json
    swarm mesh my-swarm --wait     # first wait until the mesh has converged (up to the spec's converge_timeout)

Exit code 0 when every running node has converged, 1 when not, 2 for bad input (e.g. a swarm without a mesh).
"""
from __future__ import annotations

import json
import sys
import time

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from swarm.errors import SpecError

from swarm.cli.console import err, out
from swarm.mesh.plan import STABLE_S, healed_pairs
from swarm.runtime.swarm import Swarm

def register(cli: click.Group) -> None:
    """Add `mesh` to the `swarm` command group."""
    cli.add_command(mesh)


def convergence_line(what: str, timing: dict, implementation: str) -> str:
    """One line for `swarm up` / `swarm fault`: how long the mesh took to settle after `what`."""
    if timing.get("converged"):
        return (f"mesh {implementation}: converged {timing['converge_s']:.1f} s after {what} "
                f"(within the last {timing['resolution_s']:.1f} s)")
    return f"mesh {implementation}: NOT converged after {what} ({timing.get('problem', '')})"


TQ_NOTE = ("TQ: B.A.T.M.A.N.'s transmit quality of the link to a neighbour, 0-255 (255: every originator message "
           "arrived; each node forwards through the neighbour with the best TQ, so low values mean lossy links and "
           "relays that may change)")


def wait_after_fault(swarm, what: str, applied_ts: float, cuts_before: set, cuts_after: set) -> None:
    """After a fault on a meshed swarm, wait for the routes to settle (healed links carrying their direct route
    again, routes unchanged for STABLE_S) with progress on stderr, and print how long that took. Ctrl-C stops
    the wait, not the fault: it says so and exits 130."""
    if not swarm.spec.mesh.enabled:
        return
    m = swarm.mesh
    err.print(f"waiting for the mesh to reconverge (up to {m.spec.converge_timeout:g} s; Ctrl-C stops waiting, "
              "the fault stays applied)")
    bar = Progress(TextColumn("[bold]mesh[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err)
    try:
        with bar:
            task = bar.add_task("reading routes", total=len(swarm.nodes))
            timing = m.wait_converged(applied_ts, direct=healed_pairs(cuts_before, cuts_after), stable_s=STABLE_S,
                                      progress=lambda d, t, w: bar.update(task, completed=d, total=t, description=w))
    except KeyboardInterrupt:
        err.print(f"interrupted after {time.time() - applied_ts:.0f} s: the fault ({what}) stays applied and the mesh "
                  f"was not yet seen converged; `swarm mesh {swarm.name} --wait` waits again")
        raise click.exceptions.Exit(130) from None
    out.print(convergence_line(what, timing, m.implementation))


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--wait", is_flag=True, help="Wait until the mesh has converged before showing it.")
def mesh(name: str, as_json: bool, wait: bool) -> None:
    """Show the mesh of swarm NAME: per node its neighbours, next hops and whether it has converged."""
    swarm = Swarm.attach(name)
    if not swarm.spec.mesh.enabled:
        raise SpecError(f"swarm {name!r}: has no mesh (its spec says mesh: none; set `mesh: batman`)")
    m = swarm.mesh
    if wait:
        m.wait_converged(time.time(), stable_s=STABLE_S)
    report = m.report()
    if as_json:
        click.echo(json.dumps(report, indent=1))
        sys.exit(0 if report["converged"] else 1)

    table = Table(title=f"mesh of {name}: {report['description']}")
    for col in ("node", "neighbours (TQ)", "next hop per destination", "converged"):
        table.add_column(col)
    for row in report["nodes"]:
        if not row["running"]:
            table.add_row(row["node"], "", "", "[dim]not running[/]")
            continue
        neighbours = " ".join(f"{n}({q})" if q is not None else n for n, q in row["neighbours"].items())
        hops = " ".join(f"{d}:{'direct' if h == d else (h or '-')}" for d, h in row["next_hop"].items())
        conv = "[green]yes[/]" if row["converged"] else f"[red]no[/] {'; '.join(row['problems'][:2])}"
        table.add_row(row["node"], neighbours, hops, conv)
    out.print(table)
    if m.enabled and m.impl.explains_tq:
        out.print(TQ_NOTE)
    out.print("converged" if report["converged"] else "not converged")
    sys.exit(0 if report["converged"] else 1)
