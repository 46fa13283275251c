"""`swarm` command line: a thin layer over the Swarm facade (swarm.runtime.swarm) and the experiment registry.

One top-level handler turns every framework error into one line on stderr and an exit code: 2 for bad
input (nothing was started), 1 for a failure while running, 130 after Ctrl-C. `--debug` shows tracebacks
and every command the runner executes.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from swarm import __version__
from swarm.cfs.node import check_cfs
from swarm.runtime.state import all_states, default_workdir, down_by_name, leftovers, wipe as wipe_all
from swarm.runtime.swarm import BEFORE_DOWN, NodeFailed, Swarm
from swarm.cli import cfs as cfs_commands, dtn as dtn_commands, links as link_commands, mesh as mesh_commands, \
    orbits as orbit_commands
from swarm.cli import observe as observe_commands
from swarm.cli.console import err, out, warn
from swarm.cli.mesh import convergence_line
from swarm.errors import SwarmError
from swarm.observe.events import RunEvents
from swarm.observe.runcapture import RunCaptures, section_of
from netem.engines import ENGINES, choose_engine
from swarm.spec.mesh import MeshSpec, choose_implementation
from swarm.runtime.probe import capabilities
from swarm.runtime.runner import Runner
from swarm.caps import Capabilities
from netem.runtime.linkd import engine_for
from swarm.runtime.backends import REGISTRY, TRAITS, swarm_dir
from swarm.runtime.backends.compose import ComposeBackend
from swarm.spec.model import check_swarm_name, json_schema, spec_from_dict



class ProgressBar:
    """A rich progress bar fed by backends' (done, total, what) callbacks; quiet when not a terminal."""

    def __init__(self, title: str):
        self.bar = Progress(TextColumn(f"[bold]{title}[/] {{task.description}}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=err, transient=False)
        self.task = None

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.task is None:
            self.task = self.bar.add_task(what, total=total)
        self.bar.update(self.task, completed=done, total=total, description=what)


def _either(names: list[str]) -> str:
    """'a, b or c': choices named in help text, from a registry."""
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


# CLI choices and help come from the registries (backends, link engines): a new one shows up by itself
BACKENDS = sorted(REGISTRY)
ONE_HOST_BACKENDS = _either([n for n in BACKENDS if not TRAITS[n].multi_host])
ENGINE_CHOICES = _either(list(ENGINES))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and every command run.")
@click.version_option(__version__, prog_name="swarm")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Containerized spacecraft-swarm emulation: spec -> compose -> running swarm -> sweeps -> reports."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(name)s: %(message)s")


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


@cli.command()
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


@cli.command()
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
        engine = swarm.links.engine
        if swarm.spec.links:
            swarm.check_links()  # every condition possible with this host's impairment engine
        mesh = swarm.mesh.implementation or "none"  # a pinned implementation this host lacks: SpecError
        swarm.backend.check_spec(swarm.spec, swarm.nodes)  # multi-host: every host answers, rights, subnets
        out.print(f"{spec_file}: valid ({len(swarm.nodes)} nodes, backend {swarm.backend.name}, impairment engine "
                  f"{engine.name}, mesh {mesh})")
        return
    with ProgressBar("up") as bar:
        swarm = Swarm.from_yaml(spec_file, backend=backend, progress=bar, keep_on_failure=keep_on_failure,
                                message=lambda m: err.print(m), engine=engine)
        seconds = swarm.up(ready_timeout=timeout)
    out.print(f"swarm {swarm.name!r}: {len(swarm.nodes)} nodes up with backend {swarm.backend.name} in {seconds:.1f} s")
    for line in swarm.backend_facts():
        out.print(line)
    if swarm.mesh_result is not None:
        out.print(convergence_line("start", swarm.mesh_result, swarm.mesh.implementation))


@cli.command()
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


@cli.command(name="exec", context_settings={"ignore_unknown_options": True})
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


@cli.command()
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


@cli.command()
@click.argument("name")
@click.option("--keep-compose", is_flag=True, help="Keep the generated compose/NAME.yml.")
def down(name: str, keep_compose: bool) -> None:
    """Remove everything of swarm NAME (idempotent; works after a crash), the compose file it generated too."""
    removed = down_by_name(name, warn=warn, keep_compose=keep_compose)
    out.print(f"swarm {name!r}: " + (f"removed {', '.join(removed)}" if removed else "nothing to remove"))


@cli.command()
@click.argument("names", nargs=-1)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (for scripts).")
def wipe(names: tuple[str, ...], dry_run: bool, yes: bool) -> None:
    """Remove what the framework made for the swarms NAMES, or for every swarm (after a crash). Only what
    carries the framework's labels or markers is removed; images are kept."""
    for name in names:
        check_swarm_name(name)
    if names and not dry_run:
        for name in names:
            removed = down_by_name(name, warn=warn)
            out.print(f"swarm {name!r}: " + (f"removed {', '.join(removed)}" if removed else "nothing to remove"))
        return
    found = leftovers()
    if names:
        found = {n: found.get(n, []) for n in names}
    if dry_run:
        for swarm, things in found.items():
            click.echo(f"{swarm}: " + (", ".join(things) if things else "nothing"))
        click.echo(f"would remove {sum(map(len, found.values()))} object(s) of {len([f for f in found.values() if f])} swarm(s)"
                   " (dry run: nothing removed)")
        return
    if not found:
        out.print("wiped: nothing to remove")
        return
    question = f"remove everything of {len(found)} swarm(s): {', '.join(found)}?"
    if not yes:
        if not sys.stdin.isatty():
            raise SwarmErrorExit(f"wipe: would {question[:-1]}; not a terminal, so confirm with --yes "
                                 "(or name swarms: `swarm wipe NAME...`; see --dry-run)", 2)
        if not click.confirm(question, default=False):
            out.print("nothing removed")
            return
    removed = wipe_all()
    out.print("wiped: " + (", ".join(removed) if removed else "nothing to remove"))


@cli.command(name="list")
def list_() -> None:
    """Swarms that are up (have state)."""
    for name, state in all_states(default_workdir(), warn=warn):
        nodes = len(spec_from_dict(state["spec"]).resolved_nodes())
        age = time.time() - state.get("created", time.time())
        out.print(f"{name}\t{state['backend']}\t{nodes} nodes\tup {age:.0f} s")


@cli.command()
def schema() -> None:
    """Print the JSON Schema of the swarm spec."""
    click.echo(json.dumps(json_schema(), indent=1))


BRIDGE_NF_SYSCTL = "/proc/sys/net/bridge/bridge-nf-call-iptables"


def engine_placement_facts(caps: Capabilities) -> dict:
    """Per one-host backend: the engine `links:` runs with, and where the userspace engine runs there; and the
    host's net.bridge.bridge-nf-call-iptables (the compose host engine needs 1; Docker sets it for its bridges,
    and the engine sets it, recording that in the swarm's state, where it is not)."""
    facts: dict = {}
    for name in ("netns", "compose"):
        backend = REGISTRY[name](Runner(), caps, Path("."))
        hop = backend.hop_placement() if caps.bridge_nf else None
        facts[f"impairment_engine_{name}"] = engine_for(caps, backend).name
        facts[f"userspace_engine_{name}"] = hop or ("inside each node, only when pinned (the binary copied in)"
                                                    if backend.traits.containers else "in each node's namespace")
    try:
        facts["host_bridge_nf_call_iptables"] = Path(BRIDGE_NF_SYSCTL).read_text().strip()
    except OSError:
        facts["host_bridge_nf_call_iptables"] = "absent (br_netfilter not loaded; Docker loads it)"
    return facts


@cli.command()
def probe() -> None:
    """What this host can do (Docker, Compose, sch_netem, batman-adv, nftables, tools)."""
    caps = capabilities()
    facts = caps.as_dict()
    facts["mesh_batman"] = choose_implementation(MeshSpec(protocol="batman"), caps, ComposeBackend.traits)  # what `mesh: batman` runs
    facts["impairment_engine"] = choose_engine(caps).name  # what `links:` runs with on netns
    facts.update(engine_placement_facts(caps))  # per backend, and where the userspace engine runs
    click.echo(json.dumps(facts, indent=1))


@cli.command()
@click.argument("experiment_file", required=False, type=click.Path())
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), help="Finish the interrupted run in this folder.")
@click.option("--backend", help=f"{ONE_HOST_BACKENDS} (default: the experiment's, else the host's default).")
@click.option("--results", "results_root", default="results", show_default=True, help="Folder for run folders.")
@click.option("--abort-on-error", is_flag=True, help="Stop at the first test with a failed flow.")
@click.option("--report/--no-report", "make_report", default=True, show_default=True, help="Write the report at the end.")
@click.option("--check", is_flag=True, help="Only validate the experiment and every swarm it implies; create nothing.")
def sweep(experiment_file, resume_dir, backend, results_root, abort_on_error, make_report, check) -> None:
    """Run the sweep in EXPERIMENT_FILE (or --resume a run folder): traffic (iperf3/mux) or `type: ddsperf`."""
    if check:
        _check_experiment("sweep", experiment_file, backend)
        return
    _run_experiment("sweep", experiment_file, resume_dir, backend, results_root, make_report, abort_on_error)


@cli.command("run")
@click.argument("experiment_file", required=False, type=click.Path())
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False),
              help="Finish the interrupted run in this folder (types that resume: dtn).")
@click.option("--backend", help=f"{ONE_HOST_BACKENDS} (default: the experiment's, else the host's default).")
@click.option("--results", "results_root", default="results", show_default=True, help="Folder for run folders.")
@click.option("--report/--no-report", "make_report", default=True, show_default=True)
@click.option("--check", is_flag=True, help="Only validate the experiment and its swarm; create nothing.")
def run_cmd(experiment_file: str | None, resume_dir: str | None, backend: str | None, results_root: str,
            make_report: bool, check: bool) -> None:
    """Run the experiment in EXPERIMENT_FILE (e.g. the reference swarm app under a fault timeline), or --resume a
    run folder; results and a report."""
    if check:
        _check_experiment("run", experiment_file, backend)
        return
    _run_experiment("run", experiment_file, resume_dir, backend, results_root, make_report)


def _check_experiment(command: str, experiment_file: str | None, backend: str | None) -> None:
    from experiments.runs import check_experiment  # start-up: see _run_experiment

    if not experiment_file:
        raise SwarmErrorExit(f"{command} --check: give an EXPERIMENT_FILE", 2)
    out.print(check_experiment(experiment_file, backend, command), soft_wrap=True)


def _run_experiment(command: str, experiment_file, resume_dir, backend, results_root, make_report,
                    abort_on_error: bool = False) -> None:
    """Any registered experiment type: open (or resume) its run folder, run it with a progress bar, report."""
    # here, not at the top: the experiment types pull in pandas and matplotlib (~1.5 s), which `swarm status` and
    # the other swarm commands never need
    from experiments.runs import RunContext, discard_if_empty, open_run, running

    kind, exp, store = open_run(experiment_file, resume_dir, results_root, backend, command)
    section = section_of(experiment_file) if experiment_file and not resume_dir else None  # checked by open_run
    err.print(f"run folder: {store.dir}")
    unit = f" {kind.unit}" if kind.unit else ""
    bar = Progress(TextColumn(f"[bold]{kind.name}[/] {{task.description}}"), BarColumn(),
                   TextColumn(f"{{task.completed:.0f}}/{{task.total:.0f}}{unit}"), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn(), console=err)
    specs = kind.swarms(exp)
    watched = RunEvents([swarm_dir(default_workdir(), spec.name) for spec in specs], getattr(exp, "name", kind.name))

    def message(m: str) -> None:
        bar.console.print(m)
        watched.message(m)

    def progress(d: float, t: float, w: str) -> None:
        bar.update(task, completed=d, total=t, description=w)
        watched.progress(d, t, w)

    captures = None
    try:
        with bar, running(kind, exp, store, resume=bool(resume_dir), message=lambda m: bar.console.print(m)):
            task = bar.add_task("starting", total=0)  # a number from the start: the count column formats it
            if section is not None:
                captures = RunCaptures(section, [spec.name for spec in specs], store.dir / "capture", default_workdir(),
                                       attach=Swarm.attach, before_down=BEFORE_DOWN, message=message)
                captures.start()
            try:
                run_dir = kind.run(RunContext(exp, store, backend=backend, abort_on_error=abort_on_error,
                                              message=message, progress=progress))
            finally:
                if captures is not None:
                    captures.stop()
    except BaseException:
        if not resume_dir and discard_if_empty(store):  # the first swarm never came up: no empty folder left
            err.print(f"removed the empty run folder {store.dir}")
        raise
    out.print(f"{command} done: {run_dir}")
    if make_report:
        _write_report(run_dir)


def _write_report(run_dir: Path) -> None:
    from experiments import registry  # start-up: see _run_experiment

    paths = registry.type_of_run(run_dir).report(Path(run_dir))
    out.print(f"report: {paths['report_html']} and {paths['report_md']}")


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
def report(run_dir: str) -> None:
    """Write tables, plots, report.md and report.html for the run in RUN_DIR."""
    _write_report(Path(run_dir))


for _commands in (link_commands, cfs_commands, mesh_commands, orbit_commands, dtn_commands,  # impair, fault; cfs; mesh; orbits; dtn
                  observe_commands):  # capture, events, view
    _commands.register(cli)


class SwarmErrorExit(SwarmError):
    """A CLI usage error with its own exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code


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
