"""`swarm init`, `up`, `down`, `wipe`, `list`: writing a spec, bringing a swarm up, taking swarms down.

    swarm init demo --nodes 4     # demo.yaml, commented
    swarm up demo.yaml            # (--check: validate only)
    swarm down demo               # idempotent; works after a crash
    swarm wipe --dry-run          # what the framework left on this host
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click

from swarm.cfs.node import check_cfs
from swarm.cli.common import BACKENDS, ENGINE_CHOICES, ONE_HOST_BACKENDS, ProgressBar, SwarmErrorExit
from swarm.cli.console import err, out, warn
from swarm.cli.mesh import convergence_line
from swarm.runtime.state import all_states, default_workdir, down_by_name, leftovers, state_names, wipe as wipe_all
from swarm.runtime.swarm import Swarm
from swarm.spec.model import check_swarm_name, spec_from_dict


def register(cli: click.Group) -> None:
    """Add init, up, down, wipe and list to the `swarm` command group."""
    for command in (init, up, down, wipe, list_):
        cli.add_command(command)


SPEC_TEMPLATE = """\
# Swarm spec for swarm-emu. Validate with `swarm up --check {name}.yaml`; JSON Schema: `swarm schema`.
name: {name}            # [a-z0-9-]+; prefixes every container, network and namespace of this swarm
nodes: {nodes}                # sat01..sat{last}; or use `node_list:` / `groups:` for heterogeneous swarms
{backend_line}
defaults:               # applied to every node (a group or a node_list entry may override any of these)
  role: spacecraft
  env: {{}}               # extra environment variables for the node's software
  # image: my-flightsw:1.0   # a local image (compose backend); default: the framework's node image
  # command: [python3, /opt/swarm/flightsw/agent.py, run]
  # resources: {{cpus: 0.5, memory: 256m}}
  # cfs: {{install: ~/cFS/build/exe/cpu1}}   # run your native cFS build instead (images/cfs/README.md)
networks:
  isl:    {{subnet: 10.77.0.0/16, mtu: 1500}}   # inter-satellite links: internal, impaired, meshed
  ground: {{subnet: 10.78.0.0/16, mtu: 1500}}   # commanding and telemetry, reachable from the host
# groups:                # instead of `nodes:`, e.g. 2 relays and 6 observers
#   - {{prefix: relay, count: 2, role: relay}}
#   - {{prefix: obs, count: 6, role: observer, env: {{SENSOR: camera}}}}
"""


@click.command()
@click.argument("name")
@click.option("--nodes", "-n", default=4, show_default=True, help="Number of spacecraft.")
@click.option("--backend", type=click.Choice(BACKENDS), help="Pin a backend (default: chosen per host).")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(name: str, nodes: int, backend: str | None, force: bool) -> None:
    """Write NAME.yaml, a commented spec for a swarm of NODES spacecraft."""
    spec_from_dict({"name": name, "nodes": nodes, "backend": backend}, "arguments")  # validate before writing
    path = Path(f"{name}.yaml")
    if path.exists() and not force:
        raise SwarmErrorExit(f"{path}: exists; use --force to overwrite", 2)
    backend_line = f"backend: {backend}" if backend else "# backend: compose   # or netns; default: compose where Docker runs"
    path.write_text(SPEC_TEMPLATE.format(name=name, nodes=nodes, last=f"{nodes:02d}", backend_line=backend_line))
    out.print(f"wrote {path}")


@click.command()
@click.argument("spec_file", type=click.Path())
@click.option("--backend", help=f"{ONE_HOST_BACKENDS} (default: the spec's, else compose where Docker runs).")
@click.option("--keep-on-failure", is_flag=True, help="Leave a failed swarm in place for inspection.")
@click.option("--timeout", type=float, help="Seconds to wait for readiness (default 60 + 0.5 per node).")
@click.option("--check", is_flag=True, help="Only validate the spec.")
@click.option("--engine", help=f"Pin the impairment engine: {ENGINE_CHOICES} (default: the spec's "
                               "`links.engine`, else kernel NetEm where it exists, else userspace, else nft).")
def up(spec_file: str, backend: str | None, keep_on_failure: bool, timeout: float | None, check: bool,
       engine: str | None) -> None:
    """Bring up the swarm in SPEC_FILE and wait until every node is ready."""
    if check:
        swarm = Swarm.from_yaml(spec_file, backend=backend, engine=engine)
        check_cfs(swarm.spec, swarm.nodes, swarm.backend.traits)
        swarm.check_dtn()  # agents the user builds: their install trees; agents that need containers
        chosen = swarm.links.engine
        if swarm.spec.links:
            swarm.check_links()  # every condition possible with this host's impairment engine
        mesh = swarm.mesh.implementation or "none"  # a pinned implementation this host lacks: SpecError
        swarm.backend.check_spec(swarm.spec, swarm.nodes)  # multi-host: every host answers, rights, subnets
        out.print(f"{spec_file}: valid ({len(swarm.nodes)} nodes, backend {swarm.backend.name}, impairment engine "
                  f"{chosen.name}, mesh {mesh})")
        return
    made: Swarm | None = None
    try:  # all or nothing: a Ctrl-C before the summary is printed removes the swarm (Swarm.undo_up), one after
        with ProgressBar("up") as bar:  # it is ignored (the swarm is up and said so)
            made = swarm = Swarm.from_yaml(spec_file, backend=backend, progress=bar, keep_on_failure=keep_on_failure,
                                           message=lambda m: err.print(m), engine=engine)
            seconds = swarm.up(ready_timeout=timeout)
        out.print(f"swarm {swarm.name!r}: {len(swarm.nodes)} nodes up with backend {swarm.backend.name} in {seconds:.1f} s")
        for line in swarm.backend_facts():
            out.print(line)
        if swarm.mesh_result is not None:
            out.print(convergence_line("start", swarm.mesh_result, swarm.mesh.implementation or "none"))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:
        if made is not None:
            made.undo_up()
        raise



@click.command()
@click.argument("name")
@click.option("--keep-compose", is_flag=True, help="Keep the generated compose/NAME.yml.")
def down(name: str, keep_compose: bool) -> None:
    """Remove everything of swarm NAME (idempotent; works after a crash), the compose file it generated too."""
    removed = down_by_name(name, warn=warn, keep_compose=keep_compose)
    out.print(f"swarm {name!r}: " + (f"removed {', '.join(removed)}" if removed else "nothing to remove"))


@click.command()
@click.argument("names", nargs=-1)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (for scripts).")
def wipe(names: tuple[str, ...], dry_run: bool, yes: bool) -> None:
    """Remove what the framework made for the swarms NAMES, or (no NAMES) for every swarm of this checkout (its
    .swarm/ state; after a crash). Only what carries the framework's labels or markers is removed; images are
    kept. Swarms of another checkout or a CI run are listed by --dry-run and removed only by name."""
    for name in names:
        check_swarm_name(name)
    if names and not dry_run:
        for name in names:
            removed = down_by_name(name, warn=warn)
            out.print(f"swarm {name!r}: " + (f"removed {', '.join(removed)}" if removed else "nothing to remove"))
        return
    found = leftovers()
    here = set(state_names(default_workdir()))
    if dry_run:
        return _wipe_dry_run({n: found.get(n, []) for n in names} if names else found, bool(names), here)
    others = sorted(n for n in found if n not in here)
    if here and _confirmed(f"remove everything of {len(here)} swarm(s) of this checkout: {', '.join(sorted(here))}?", yes):
        removed = wipe_all(warn=warn)
        out.print("wiped: " + (", ".join(removed) if removed else "nothing to remove"))
    elif not here:
        out.print("wiped: nothing of this checkout to remove")
    if others:  # one line (not wrapped): what was left and how to remove it
        click.echo(f"not this checkout's (no state in {default_workdir() / '.swarm'}), left alone: {', '.join(others)}; "
                   "`swarm wipe NAME...` removes them", err=True)


def _wipe_dry_run(found: dict[str, list[str]], named: bool, here: set[str]) -> None:
    """`wipe --dry-run`: everything found, those of another checkout marked (`wipe` leaves them unless named)."""
    for swarm, things in found.items():
        whose = "" if named or swarm in here else f"  [not this checkout's: `swarm wipe {swarm}` removes it]"
        click.echo(f"{swarm}: " + (", ".join(things) if things else "nothing") + whose)
    mine = found if named else {n: t for n, t in found.items() if n in here}
    click.echo(f"would remove {sum(map(len, mine.values()))} object(s) of {len([f for f in mine.values() if f])} "
               "swarm(s) (dry run: nothing removed)")


def _confirmed(question: str, yes: bool) -> bool:
    """--yes, or the user's answer on a terminal; not a terminal without --yes: one line, exit 2."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise SwarmErrorExit(f"wipe: would {question[:-1]}; not a terminal, so confirm with --yes "
                             "(or name swarms: `swarm wipe NAME...`; see --dry-run)", 2)
    if click.confirm(question, default=False):
        return True
    out.print("nothing removed")
    return False


@click.command(name="list")
def list_() -> None:
    """Swarms that are up (have state)."""
    for name, state in all_states(default_workdir(), warn=warn):
        nodes = len(spec_from_dict(state["spec"]).resolved_nodes())
        age = time.time() - state.get("created", time.time())
        out.print(f"{name}\t{state['backend']}\t{nodes} nodes\tup {age:.0f} s")
