"""`swarm sweep`, `run`, `report`: running an experiment of any registered type into a run folder, and its report.

The experiment types pull in pandas and matplotlib (~1.5 s), which `swarm status` and the other swarm commands
never need: they are imported inside the commands, not at the top.
"""
from __future__ import annotations

from pathlib import Path

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from swarm.cli.common import ONE_HOST_BACKENDS, SwarmErrorExit
from swarm.cli.console import err, out
from swarm.observe.runcapture import section_of


def register(cli: click.Group) -> None:
    """Add sweep, run and report to the `swarm` command group."""
    for command in (sweep, run_cmd, report):
        cli.add_command(command)


@click.command()
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


@click.command("run")
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
    from experiments.runs import discard_if_empty, open_run, run_experiment

    kind, exp, store = open_run(experiment_file, resume_dir, results_root, backend, command)
    section = section_of(experiment_file) if experiment_file and not resume_dir else None  # checked by open_run
    err.print(f"run folder: {store.dir}")
    unit = f" {kind.unit}" if kind.unit else ""
    bar = Progress(TextColumn(f"[bold]{kind.name}[/] {{task.description}}"), BarColumn(),
                   TextColumn(f"{{task.completed:.0f}}/{{task.total:.0f}}{unit}"), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn(), console=err)
    try:
        with bar:
            task = bar.add_task("starting", total=0)  # a number from the start: the count column formats it
            run_dir = run_experiment(kind, exp, store, resume=bool(resume_dir), capture=section, backend=backend,
                                     abort_on_error=abort_on_error, message=lambda m: bar.console.print(m),
                                     progress=lambda d, t, w: bar.update(task, completed=d, total=t, description=w))
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


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
def report(run_dir: str) -> None:
    """Write tables, plots, report.md and report.html for the run in RUN_DIR."""
    _write_report(Path(run_dir))
