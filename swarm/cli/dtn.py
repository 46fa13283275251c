"""`swarm dtn`: the Bundle Protocol agents of a running swarm (swarm.dtn).

    swarm dtn my-swarm [--json]                      # per node: endpoint, convergence layers, peers, bundles stored,
                                                     #   delivered, forwarded; cla ltp: LTP sessions open,
                                                     #   segments retransmitted, sessions cancelled
    swarm dtn send my-swarm sat01 ground "hello"     # one bundle from sat01's agent to dtn://ground/in (or --file F;
                                                     #   eid ipn: ipn:<number>.1; DST may be an endpoint ID)
    swarm dtn recv my-swarm ground [--timeout 10]    # the next bundle delivered to dtn://ground/in (ipn:N.1), as JSON
    swarm dtn log my-swarm sat02 [--tail 50]         # the agent's own log
    swarm dtn config my-swarm sat02                  # what the framework generated for the node's agent: its
                                                     #   command and files (ION: ionconfig, rc files, start.sh)

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


def status_table(name: str, rows, width: int) -> Table:
    """The status table, readable at `width` columns (at 80 columns a plain table cut every cell to one letter and
    "…"): below 120 columns the endpoint (dtn://<node>/) is dropped, a CLA or routing every node shares goes
    to the title, counts get short headers, the LTP counters share one column, and a cell that still does not
    fit wraps; node and peer names are never cut (peers one per line)."""
    narrow = width < 120
    ltp = any(r.ltp is not None for r in rows)
    cols, title = _status_columns(name, rows, narrow, ltp)
    short = {"delivered": "deliv", "forwarded": "fwd", "received": "recv", "ltp sessions": "ltp"} if narrow else {}
    longest = max(map(len, [r.node for r in rows] + [p for r in rows for p in r.peers]), default=4)
    table = Table(title=title, caption="ltp: sessions open/segments retransmitted/cancels" if narrow and ltp else None)
    for col in cols:
        table.add_column(short.get(col, col), overflow="fold", no_wrap=col == "node",
                         min_width=longest if col in ("node", "peers") else None,
                         justify="right" if col in STATUS_COUNTS else "left")
    for r in rows:
        cells = _status_cells(r)
        table.add_row(*(cells[c] for c in cols))
    return table


STATUS_COUNTS = ("stored", "delivered", "forwarded", "received", "failed", "ltp sessions", "rtx", "cancels", "ltp")


def _status_columns(name: str, rows, narrow: bool, ltp: bool) -> tuple[list[str], str]:
    """The columns shown and the table's title (which takes a CLA or routing every node shares when narrow)."""
    cols = ["node", "endpoint", "cla", "routing", "peers", "stored", "delivered", "forwarded", "received", "failed",
            *(["ltp sessions", "rtx", "cancels"] if ltp else []), "state"]
    titles = sorted({r.agent_title for r in rows if r.agent_title})
    title = f"DTN agents of {name}" + (f" ({', '.join(titles)})" if titles else "")
    if not narrow:
        return cols, title
    cols.remove("endpoint")
    for col in ("cla", "routing"):
        values = {getattr(r, col) for r in rows}
        if len(values) == 1:
            cols.remove(col)
            title += f", {col} {values.pop()}"
    if ltp:  # the three LTP counters share one column, "open/rtx/cancels", so names keep their width
        cols[cols.index("ltp sessions"):cols.index("cancels") + 1] = ["ltp"]
    return cols, title


def _status_cells(r) -> dict[str, str]:
    """Every cell of one agent's row, by column."""
    peers = "\n".join(r.peers) if len(r.peers) <= 6 else f"{len(r.peers)} peers"
    clas = ",".join(r.clas) if r.clas and r.clas != [r.cla] else r.cla  # what dtnd reaches its peers by
    lt = r.ltp or {}
    counters = [str(lt.get(k, "-")) for k in ("sessions_open", "retransmitted_segments", "cancels")]
    return {"node": r.node, "endpoint": r.eid, "cla": clas, "routing": r.routing, "peers": peers,
            "ltp sessions": counters[0], "rtx": counters[1], "cancels": counters[2], "ltp": "/".join(counters),
            "stored": str(r.stored), "delivered": str(r.delivered), "forwarded": str(r.forwarded),
            "received": str(r.received), "failed": str(r.failed),
            "state": "[green]ok[/]" if r.state == "ok" else f"[red]{r.state}[/]"}


@dtn.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str, as_json: bool) -> None:
    """Per DTN node: endpoint, convergence layers, routing, peers, bundles stored, delivered, forwarded, received,
    failed; with cla ltp also LTP sessions open, segments retransmitted and sessions cancelled (swarm-ltpcla's
    counters; --json: every counter)."""
    rows = _agents(name).status()
    ok = all(r.state == "ok" for r in rows)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=1))
        sys.exit(0 if ok else 1)
    out.print(status_table(name, rows, out.width))
    sys.exit(0 if ok else 1)


@dtn.command()
@click.argument("name")
@click.argument("src")
@click.argument("dst")
@click.argument("text", required=False)
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False), help="Send this file's bytes.")
@click.option("--lifetime", type=float, default=3600.0, show_default=True, help="Bundle lifetime, seconds.")
def send(name: str, src: str, dst: str, text: str | None, path: str | None, lifetime: float) -> None:
    """Send one bundle from SRC's agent to DST's applications (dtn://DST/in, or ipn:<number>.1 with
    `dtn.eid: ipn`), or to DST given as an endpoint ID (e.g. ipn:77.1, a node outside the swarm) (TEXT, or
    --file)."""
    if (text is None) == (path is None):
        raise SpecError("dtn send: give the payload as TEXT or --file (one of them)")
    payload = Path(path).read_bytes() if path else (text or "").encode()
    agents = _agents(name)
    bid = agents.send(src, dst, payload, lifetime)
    out.print(f"sent {len(payload)} bytes from {src} to {agents.destination(dst)}: bundle {bid}")


@dtn.command()
@click.argument("name")
@click.argument("node")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for a bundle.")
def recv(name: str, node: str, timeout: float) -> None:
    """Take the next bundle delivered to NODE's applications (dtn://NODE/in or ipn:<number>.1) as JSON."""
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


@dtn.command()
@click.argument("name")
@click.argument("node")
def config(name: str, node: str) -> None:
    """What the framework generated for NODE's agent: its command, then each file it was given."""
    agents = _agents(name)
    if node not in agents.by_name:
        raise SpecError(f"node {node!r}: no DTN agent in swarm {name!r} (DTN nodes: {', '.join(agents.by_name)})")
    plan = next(p for p in agents.plans() if p.node == node)
    click.echo(config_text(plan))


def config_text(plan) -> str:
    """A plan as text (pure): `# command`, the argv, then `# <work folder>/<file>` and each file's text."""
    parts = [f"# command ({plan.agent or 'agent'} of {plan.node})", " ".join(plan.argv)]
    if plan.ltp_argv:
        parts += ["# swarm-ltpcla", " ".join(plan.ltp_argv)]
    for fname, text in plan.files.items():
        parts += [f"# {plan.workdir.rstrip('/')}/{fname}", text.rstrip("\n")]
    return "\n".join(parts)
