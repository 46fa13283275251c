"""`swarm cfs`: talk to the cFS nodes of a running swarm from the host's side of the ground network.

    swarm cfs tlm my-swarm [sat01 sat03] [--seconds 5] [--json]   # enable TO_LAB output + NOOP, count telemetry
    swarm cfs cmd my-swarm sat02 --mid 0x1880 --cc 0 [--payload 0a0b]  # one command to a node's CI_LAB

Commands go to UDP 1234 at the node's ground address (the cFS image redirects it to the node's CI_LAB
port); TO_LAB sends telemetry to UDP 1235 at the swarm's ground gateway address, which `tlm` listens on.
"""
from __future__ import annotations

import json
import socket
from collections import Counter, defaultdict

import click

from swarm.errors import RuntimeFailure, SpecError
from swarm.cfs.ground import (CFE_EVS_LONG_EVENT_MID, TO_LAB_CMD_MID, TO_LAB_HK_TLM_MID, TO_LAB_NOOP_CC, GroundStation,
                              PacketError, command_packet, parse_event, to_lab_counters)
from swarm.cfs.node import CI_LAB_BASE_PORT, cfs_nodes, node_ids
from swarm.cli.console import out
from swarm.runtime.swarm import Swarm
from swarm.spec.model import gateway_address

@click.group()
def cfs() -> None:
    """Command cFS nodes (CI_LAB) and watch their telemetry (TO_LAB)."""


def _attach(name: str, nodes: tuple[str, ...]):
    swarm = Swarm.attach(name)
    targets = [swarm.node(n) for n in nodes] if nodes else cfs_nodes(swarm.nodes)
    for node in targets:
        if node.spec.cfs is None:
            raise SpecError(f"node {node.name!r}: does not run cFS (no cfs in its spec)")
    if not targets:
        raise SpecError(f"swarm {name!r}: no node runs cFS")
    return swarm, targets


def _station(swarm):
    address = gateway_address(swarm.spec.networks.ground.subnet)
    try:
        return GroundStation(address)
    except OSError as exc:
        raise RuntimeFailure(f"cannot listen on {address}:1235 for telemetry: {exc.strerror}") from None


@cfs.command()
@click.argument("name")
@click.argument("nodes", nargs=-1)
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=5.0, show_default=True, help="How long to listen.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def tlm(name: str, nodes: tuple[str, ...], seconds: float, as_json: bool) -> None:
    """Turn on TO_LAB telemetry of the cFS nodes of swarm NAME (or NODES), send each a NOOP, and show what
    arrives: packets per node, message ids, the IDs its events carry, TO_LAB's command counter."""
    from rich.table import Table

    swarm, targets = _attach(name, nodes)
    packets: dict[str, Counter] = defaultdict(Counter)
    ids: dict[str, tuple[int, int]] = {}
    commands: dict[str, int] = {}
    with _station(swarm) as ground:
        for node in targets:
            ground.enable_telemetry(node.ground_ip)
            ground.send(node.ground_ip, command_packet(TO_LAB_CMD_MID, TO_LAB_NOOP_CC))
        for sender, packet in ground.receive(seconds):
            packets[sender][packet.mid] += 1
            if packet.mid == CFE_EVS_LONG_EVENT_MID:
                event = parse_event(packet)
                ids[sender] = (event["cpu_id"], event["spacecraft_id"])
            elif packet.mid == TO_LAB_HK_TLM_MID:
                commands[sender] = to_lab_counters(packet)["command_count"]
    rows = []
    for node in targets:
        ip = node.ground_ip
        cpu, scid = node_ids(node)
        rows.append({"node": node.name, "ground_ip": ip, "cpu_id": cpu, "spacecraft_id": scid,
                     "event_ids": list(ids[ip]) if ip in ids else None, "packets": sum(packets[ip].values()),
                     "message_ids": {f"0x{m:04x}": c for m, c in sorted(packets[ip].items())},
                     "to_lab_commands": commands.get(ip)})
    if as_json:
        click.echo(json.dumps({"swarm": name, "seconds": seconds, "nodes": rows}, indent=1))
    else:
        table = Table(title=f"cFS telemetry of swarm {name} ({seconds:g} s)")
        for col in ("node", "ground address", "CPU/SCID", "in events", "packets", "ids", "TO_LAB cmds"):
            table.add_column(col)
        for r in rows:
            seen = "/".join(map(str, r["event_ids"])) if r["event_ids"] else "-"
            table.add_row(r["node"], r["ground_ip"], f"{r['cpu_id']}/{r['spacecraft_id']}", seen, str(r["packets"]),
                          str(len(r["message_ids"])), "-" if r["to_lab_commands"] is None else str(r["to_lab_commands"]))
        out.print(table)
    silent = [r["node"] for r in rows if not r["packets"]]
    if silent:
        raise RuntimeFailure(f"no telemetry from {', '.join(silent)} in {seconds:g} s")


def _int(value: str) -> int:
    try:
        return int(value, 0)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected an integer (e.g. 0x1880 or 6144)") from None


@cfs.command()
@click.argument("name")
@click.argument("node")
@click.option("--mid", required=True, help="Command message id, e.g. 0x1880 (TO_LAB).")
@click.option("--cc", default="0", show_default=True, help="Function code.")
@click.option("--payload", default="", help="Payload bytes as hex, in the flight computer's byte order.")
def cmd(name: str, node: str, mid: str, cc: str, payload: str) -> None:
    """Send one command packet to NODE's CI_LAB in swarm NAME."""
    swarm, (target,) = _attach(name, (node,))
    try:
        data = bytes.fromhex(payload)
    except ValueError:
        raise SpecError(f"--payload {payload!r}: not hex bytes") from None
    code = _int(cc)
    if not 0 <= code <= 127:
        raise SpecError(f"--cc {cc!r}: a function code is 0..127")
    try:
        packet = command_packet(_int(mid), code, data)
    except PacketError as exc:
        raise SpecError(f"--mid {mid!r}: {exc}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(packet, (target.ground_ip, CI_LAB_BASE_PORT))
    out.print(f"sent {len(packet)} bytes to {target.name} ({target.ground_ip}:1234): {packet.hex()}")


def register(cli: click.Group) -> None:
    """Add `cfs` to the `swarm` command group."""
    cli.add_command(cfs)
