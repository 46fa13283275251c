"""`swarm capture`, `swarm events`, `swarm view`: looking inside a running swarm (swarm.observe).

    swarm capture my-swarm --link sat01 sat02 --duration 10 -o l12.pcapng   # both ends of sat01 -> sat02
    swarm capture my-swarm --node sat03 --iface ground -o sat03.pcapng      # until Ctrl-C
"""
from __future__ import annotations

from pathlib import Path

import click

from swarm.cli.console import err, out
from swarm.errors import SpecError
from swarm.observe.capture import IFACES, capture as run_capture, link_ends, node_end
from swarm.runtime.swarm import Swarm


def register(cli: click.Group) -> None:
    """Add `capture` to the `swarm` command group."""
    cli.add_command(capture)


@click.command()
@click.argument("name")
@click.option("--node", "node", metavar="N", help="Capture every packet of node N's interface (see --iface).")
@click.option("--iface", default="isl", show_default=True, help=f"With --node: {' or '.join(IFACES)}.")
@click.option("--link", "link", nargs=2, metavar="A B", help="The directed link A -> B, at A's egress and B's ingress.")
@click.option("--duration", type=float, help="Seconds to capture (default: until Ctrl-C).")
@click.option("--snaplen", type=int, default=0, help="Bytes kept per packet (default: all).")
@click.option("-o", "--output", required=True, type=click.Path(), help="The pcapng file to write.")
def capture(name, node, iface, link, duration, snaplen, output) -> None:
    """Capture packets of running swarm NAME into a pcapng, from the host inside the nodes' network namespaces
    (no tools needed in the node image). A link is taken at both ends: interface 0 of the file is the sender's
    egress, interface 1 the receiver's ingress."""
    if (node is None) == (link is None):
        raise SpecError("capture: give exactly one of --node N or --link A B")
    if duration is not None and duration <= 0:
        raise SpecError(f"--duration {duration:g}: must be > 0 seconds")
    if snaplen < 0:
        raise SpecError(f"--snaplen {snaplen}: must be >= 0")
    swarm = Swarm.attach(name)
    ends = link_ends(swarm.node(link[0]), swarm.node(link[1])) if link else [node_end(swarm.node(node), iface)]
    path = Path(output)

    def started(running) -> None:
        what = ", ".join(f"{r.end.node} {r.iface}" for r in running)
        err.print(f"capturing on {what} " + (f"for {duration:g} s" if duration else "until Ctrl-C"))

    counts = run_capture(swarm, ends, path, duration=duration, snaplen=snaplen, started=started)
    out.print(f"wrote {path}: " + "; ".join(f"{label}: {n if n is not None else '?'} packets" for label, n in counts))
