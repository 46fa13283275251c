"""`swarm impair` and `swarm fault`: link conditions and faults of a running swarm, from the command line.

    swarm impair my-swarm --between sat01 sat02 --delay 100ms --loss 2%   # change at run time (others kept)
    swarm impair my-swarm --node sat03 --direction out --rate 5Mbit       # all that sat03 sends
    swarm impair my-swarm --all --profile jaxa-loss5                       # every link
    swarm impair my-swarm --show [--all] [--json]                          # current conditions (--all: every link)
    swarm impair my-swarm --clear [--between A B | --node N]               # back to no conditions
    swarm fault my-swarm cut sat01 sat03
    swarm fault my-swarm heal [sat01 sat03]                                # no pair: heal every cut and partition
    swarm fault my-swarm partition sat01,sat02 sat03,sat04
    swarm fault my-swarm node sat02 stop|kill|pause|unpause|restart

Errors are SpecError (bad input, exit 2, nothing applied) or RuntimeFailure (exit 1), printed as one line by
the top-level handler in swarm.cli.main.
"""
from __future__ import annotations

import json
import time

import click
from rich.table import Table

from swarm.errors import SpecError
from netem.spec.links import LinkValues, _validate
from swarm.cli.console import out
from swarm.cli.mesh import wait_after_fault
from swarm.runtime.swarm import Swarm

#: links above which `impair --show` prints one line per condition rather than per link (--all: every link)
SHOW_LINES = 200


def register(cli: click.Group) -> None:
    """Add `impair` and `fault` to the `swarm` command group."""
    cli.add_command(impair)
    cli.add_command(fault)


@click.command()
@click.argument("name")
@click.option("--between", nargs=2, metavar="A B", help="The link between nodes A and B.")
@click.option("--node", "node", metavar="N", help="Every link of node N (see --direction).")
@click.option("--all", "all_links", is_flag=True, help="Every link of the swarm.")
@click.option("--direction", default="both", show_default=True,
              help="both, a->b or b->a (with --between); both, out or in (with --node).")
@click.option("--profile", help="Start from a profile of netem/profiles/ (its values; the options below go on top).")
@click.option("--delay", help="One-way delay, e.g. 100ms or 1.3s (0: none).")
@click.option("--jitter", help="Delay variation, e.g. 10ms.")
@click.option("--jitter-distribution", "jitter_distribution", type=click.Choice(["uniform", "normal", "pareto", "paretonormal"]))
@click.option("--jitter-correlation", "jitter_correlation", help="Jitter correlation, e.g. 25%.")
@click.option("--loss", help="Random loss, e.g. 2% (0: none).")
@click.option("--loss-correlation", "loss_correlation", help="Loss correlation, e.g. 25%.")
@click.option("--loss-gemodel", "loss_gemodel", help="Gilbert-Elliott loss p,r,1-h,1-k as NetEm's gemodel, e.g. 1%,10%,50%,0%.")
@click.option("--rate", help="Rate limit, e.g. 10Mbit, 10M, 500k (0: unlimited).")
@click.option("--corrupt", help="Corrupted packets, e.g. 0.1%.")
@click.option("--duplicate", help="Duplicated packets, e.g. 1%.")
@click.option("--reorder", help="Reordered packets, e.g. 5% (needs a delay).")
@click.option("--up/--down", "up", default=None, help="Link administratively up or down (down drops everything).")
@click.option("--show", is_flag=True, help="Print the current conditions and the engine: per directed link, or above "
                                           f"{SHOW_LINES} links one line per condition (how many links, examples); "
                                           "with --all every link.")
@click.option("--json", "as_json", is_flag=True, help="With --show: machine-readable.")
@click.option("--clear", is_flag=True, help="Remove conditions: of the selected links, or (no selection) all, "
                                            "with every cut and everything the framework set in the nodes.")
def impair(name, between, node, all_links, direction, profile, show, as_json, clear, up, **params) -> None:
    """Set, change, show or clear link conditions of running swarm NAME.

    A change is laid over the current conditions: parameters not given keep their values."""
    swarm = Swarm.attach(name)
    ctl = swarm.links
    given = {k: v for k, v in params.items() if v is not None}
    if up is not None:
        given["up"] = up
    if clear:
        if given or profile:
            raise SpecError("impair: --clear takes no condition options")
        if between or node:
            ctl.reset(between=list(between) if between else None, node=node, direction=direction)
            out.print(f"swarm {name!r}: conditions of the selected links cleared")
        else:
            ctl.clear()
            out.print(f"swarm {name!r}: every link condition and cut removed")
        return
    if not given and not profile:
        if between or node or (all_links and not show):
            raise SpecError("impair: give a condition to set (e.g. --loss 2%), or --show, or --clear")
        return _show(ctl, as_json, every=all_links)
    if show:
        raise SpecError("impair: --show cannot be combined with a change")
    values = _validate(LinkValues, {**given, "profile": profile}, "impair").impairment()
    changed = ctl.impair(values, between=list(between) if between else None, node=node, direction=direction,
                         all_links=all_links)
    shown = ", ".join(f"{s}->{d}" for s, d in changed[:4]) + (f" (+{len(changed) - 4} more)" if len(changed) > 4 else "")
    out.print(f"swarm {name!r}: {shown}: set {values.describe()} (engine {ctl.engine.name})")


APPLIED_AT = {  # where each engine of netem.engines acts on a directed link src -> dst
    "netem": "on the sender: NetEm under an HTB class per destination on its ISL interface (egress)",
    "nft": "loss and cuts at the receiver (nftables ingress drop, so the sender's socket sees no error); "
           "rate on the sender (HTB class per destination, egress)",
    "userspace": "on the way to the receiver: swarm-linkd holds and drops the packets iptables NFQUEUE hands it, "
                 "per sending MAC (delay, rate, loss ... all there), at a forwarding hop (mangle FORWARD, per receiving "
                 "bridge port: the netns switch, the compose host) or in the receiving node's PREROUTING (the "
                 "multi-host swarm backend; a pinned engine without a hop)",
}


def applied_at(engine) -> str:
    """Where `engine` applies a link's conditions: its own `applied_at`, else the table above."""
    return getattr(engine, "applied_at", None) or APPLIED_AT.get(engine.name, "inside the nodes, per directed link")


def _show_summary(name: str, count: int, groups: list[dict]) -> None:
    """One line per condition (LinkController.condition_groups): a swarm of hundreds of nodes has up to N(N-1)
    directed links."""
    table = Table(title=f"link conditions of {name}: {count:,} directed links, by condition "
                        "(--show --all: every link)")
    for col in ("links", "configured", "cut", "in effect", "e.g."):
        table.add_column(col)
    for g in groups:
        table.add_row(f"{g['links']:,}", g["configured"], "cut" if g["cut"] else "", g["effective"],
                      ", ".join(g["examples"]))
    out.print(table)


def _show(ctl, as_json: bool, every: bool = False) -> None:
    if as_json:
        click.echo(json.dumps(ctl.summary(), indent=1))
        return

    summary = ctl.summary(every=every, rows_up_to=SHOW_LINES)
    out.print(f"impairment engine: {summary['engine_description']}")
    out.print(f"applied: {applied_at(ctl.engine)}")
    if summary.get("engine_placement"):
        out.print(f"userspace engine: {summary['engine_placement']}")
    for note in summary["notes"]:
        out.print(f"note: {note}")
    if summary["node_faults"]:
        out.print("node faults: " + ", ".join(f"{n} {f}" for n, f in sorted(summary["node_faults"].items())))
    if "groups" in summary:
        return _show_summary(ctl.swarm.name, summary["link_count"], summary["groups"])
    rows = summary["links"]
    if not rows:
        out.print(f"swarm {ctl.swarm.name!r}: no link conditions set (every link as the host gives it)")
        return
    table = Table(title=f"link conditions of {ctl.swarm.name} (directed: sender -> receiver)")
    for col in ("link", "configured", "cut", "in effect"):
        table.add_column(col)
    for r in rows:
        table.add_row(f"{r['src']} -> {r['dst']}", r["configured"], "cut" if r["cut"] else "", r["effective"])
    out.print(table)


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("name")
@click.argument("kind", type=click.Choice(["cut", "heal", "partition", "node"]))
@click.argument("args", nargs=-1)
def fault(name: str, kind: str, args: tuple[str, ...]) -> None:
    """Inject a fault into running swarm NAME: cut A B | heal [A B] | partition A,B C,D ... | node N ACTION
    (ACTION: stop, kill, pause, unpause, restart)."""
    swarm = Swarm.attach(name)
    ctl = swarm.links
    cuts_before = ctl.load().cuts
    if kind == "cut":
        if len(args) != 2:
            raise SpecError("fault cut: give two nodes, e.g. `swarm fault NAME cut sat01 sat03`")
        ctl.cut(*args)
        what = f"link {args[0]} <-> {args[1]} cut"
    elif kind == "heal":
        if args in ((), ("all",)):
            ctl.heal()
            what = "every cut and partition healed"
        elif len(args) == 2:
            ctl.heal(*args)
            what = f"link {args[0]} <-> {args[1]} healed"
        else:
            raise SpecError("fault heal: give two nodes (one link) or none (everything)")
    elif kind == "partition":
        groups = [[n for n in a.split(",") if n] for a in args]
        ctl.partition(groups)
        what = "partitioned into " + " | ".join(",".join(g) for g in groups)
    else:
        if len(args) != 2:
            raise SpecError("fault node: give a node and an action, e.g. `swarm fault NAME node sat02 restart`")
        ctl.node_action(*args)
        what = f"node {args[0]}: {args[1]} done"
    applied = time.time()
    out.print(f"swarm {name!r}: {what} at {time.strftime('%H:%M:%S')} (engine {ctl.engine.name})")
    wait_after_fault(swarm, f"{kind} {' '.join(args)}".strip(), applied, cuts_before, ctl.load().cuts)
