"""`swarm capture`, `swarm events`, `swarm view`: looking inside a running swarm (swarm.observe).

    swarm capture my-swarm --link sat01 sat02 --duration 10 -o l12.pcapng   # both ends of sat01 -> sat02
    swarm capture my-swarm --node sat03 --iface ground -o sat03.pcapng      # until Ctrl-C
    swarm events my-swarm [--json] [--no-follow]                            # what happens, as it happens
    swarm view my-swarm [--port 8765] [--host 127.0.0.1]                    # the live web page
"""
from __future__ import annotations

from pathlib import Path

import json
import sys
from typing import Callable

import click

from swarm.cli.console import err, out
from swarm.errors import SpecError
from swarm.observe.events import LogWatch, NodeWatch, follow as follow_events, format_event
from swarm.runtime.backends import swarm_dir
from swarm.observe.view import LiveState, bind, is_loopback
from swarm.observe.capture import IFACES, capture as run_capture, check_duration, check_output, link_ends, node_end
from swarm.runtime.swarm import Swarm


def register(cli: click.Group) -> None:
    """Add `capture`, `events` and `view` to the `swarm` command group."""
    cli.add_command(capture)
    cli.add_command(events)
    cli.add_command(view)


@click.command()
@click.argument("name")
@click.option("--node", "node", metavar="N", help="Capture every packet of node N's interface (see --iface).")
@click.option("--iface", default="isl", show_default=True, help=f"With --node: {' or '.join(IFACES)}.")
@click.option("--link", "link", nargs=2, metavar="A B", help="The directed link A -> B, at A's egress and B's ingress.")
@click.option("--duration", type=float, help="Seconds to capture (default: until Ctrl-C).")
@click.option("--snaplen", type=int, default=0, help="Bytes kept per packet (default: all).")
@click.option("-o", "--output", required=True, type=click.Path(), help="The pcapng file to write (a new name).")
@click.option("--force", is_flag=True, help="Replace -o if it exists (a link there is replaced, not followed).")
def capture(name, node, iface, link, duration, snaplen, output, force) -> None:
    """Capture packets of running swarm NAME into a pcapng, from the host inside the nodes' network namespaces
    (no tools needed in the node image). A link is taken at both ends: interface 0 of the file is the sender's
    egress, interface 1 the receiver's ingress."""
    if (node is None) == (link is None):
        raise SpecError("capture: give exactly one of --node N or --link A B")
    check_duration(duration)
    if snaplen < 0:
        raise SpecError(f"--snaplen {snaplen}: must be >= 0")
    path = Path(output)
    check_output(path, force)  # before attaching: bad input is one line whatever the swarm
    swarm = Swarm.attach(name)
    ends = link_ends(swarm.node(link[0]), swarm.node(link[1])) if link else [node_end(swarm.node(node), iface)]

    def started(running) -> None:
        what = ", ".join(f"{r.end.node} {r.iface}" for r in running)
        err.print(f"capturing on {what} " + (f"for {duration:g} s" if duration else "until Ctrl-C"))

    counts, fate = run_capture(swarm, ends, path, duration=duration, snaplen=snaplen, started=started, force=force)
    out.print(f"wrote {path}: " + "; ".join(f"{label}: {n if n is not None else '?'} packets" for label, n in counts))
    if fate:
        out.print(f"{link[0]} -> {link[1]}: {fate['sent']} frames sent, {fate['arrived']} arrived, {fate['lost']} lost, "
                  f"{fate['duplicated']} duplicated, {fate['unmatched']} changed on the way; each frame's comment says "
                  "which (Wireshark: frame.comment)")


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, as kept in the event log.")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="Keep following (like tail -f) until the swarm goes down or Ctrl-C.")
@click.option("--history/--no-history", default=True, show_default=True, help="Start with what already happened.")
def events(name, as_json, follow, history) -> None:
    """Stream the events of running swarm NAME: link changes and who caused them (a command, the fault
    timeline, the orbit schedule), faults, node state changes, engine restarts. Kept in
    .swarm/NAME/events.jsonl."""
    swarm = Swarm.attach(name)
    state_dir = swarm_dir(swarm.workdir, name)
    if not as_json:
        click.echo(f"{'time':<12}  {'type':<6}  {'what':<44}  cause")
    watches: list[Callable[[], list[dict]]] = [LogWatch(state_dir), NodeWatch(lambda: swarm.backend.node_states(name), every=5.0)]
    stream = follow_events(state_dir, history=history, extra=lambda: [e for w in watches for e in w()],
                           once=not follow)
    try:
        for ev in stream:
            click.echo(json.dumps(ev) if as_json else format_event(ev))
            sys.stdout.flush()
    except KeyboardInterrupt:
        return


@click.command()
@click.argument("name")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="TCP port (0: any free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (127.0.0.1: this machine only; any other is warned about: no login).")
def view(name, port, host) -> None:
    """Serve a live web page of running swarm NAME: its topology with link states and conditions, per-node ISL
    throughput, and the event stream. Until Ctrl-C (the page says DOWN once the swarm is gone)."""
    swarm = Swarm.attach(name)
    state = LiveState(swarm)
    server = bind(host, port, state)  # a port in use: one line, exit 2, nothing started
    state.start()
    address, bound_port = server.server_address[:2]
    address = address.decode() if isinstance(address, bytes) else address
    click.echo(f"swarm {name!r}: live view at http://{address}:{bound_port}/  (Ctrl-C to stop)", err=True)
    if not is_loopback(str(address)):
        click.echo(f"warning: {address}:{bound_port} is not loopback: anyone who can reach it sees swarm {name!r}'s "
                   "topology, addresses, link conditions and every event with its command line (read-only, no "
                   "login); --host 127.0.0.1 keeps it to this machine", err=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        state.stop.set()
        server.server_close()
