"""CLI of the DDS work: `swarm run` (the reference app under a fault timeline) and the ddsperf sweep, which
`swarm sweep` hands over to when the experiment says `type: ddsperf`."""
from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from swarm.spec.model import read_yaml

out = Console()
err = Console(stderr=True)


def experiment_type(path: str | Path) -> str:
    """The `type:` of an experiment file: `traffic` (the bandwidth/loss sweep, iperf3 or mux engine; the
    default), `ddsperf` or `app`; unknown types are one-line SpecErrors."""
    from swarm.errors import SpecError

    data = read_yaml(path, "experiment")
    kind = data.get("type", "traffic") if isinstance(data, dict) else "traffic"
    if kind not in ("traffic", "ddsperf", "app"):
        raise SpecError(f"{path}: type {kind!r}: unknown experiment type (known: traffic (the default), "
                        "ddsperf, app)")
    return kind


def run_ddsperf_sweep_cli(experiment_file: str | None, resume_dir: str | None, backend: str | None,
                          results_root: str, make_report: bool) -> None:
    """`swarm sweep` for a ddsperf experiment (new run or --resume)."""
    from swarm.runtime.swarm import Swarm
    from experiments.ddsperf.sweep import experiment_from_dict, load_ddsperf, run_ddsperf_sweep, write_ddsperf_report
    from swarm.errors import SpecError
    from experiments.traffic.run import ResultsStore, host_facts

    if resume_dir:
        store = ResultsStore(Path(resume_dir))
        exp = experiment_from_dict(read_yaml(store.dir / "experiment.yaml", "experiment"), str(store.dir / "experiment.yaml"))
        if experiment_file and load_ddsperf(experiment_file) != exp:
            raise SpecError(f"{experiment_file}: differs from the experiment stored in {resume_dir}")
    else:
        exp = load_ddsperf(experiment_file)
        Swarm(exp.swarm_spec(min(exp.sizes)), backend=backend or exp.backend).backend.check_available()
        store = ResultsStore.create(Path(results_root), exp, host_facts())
    err.print(f"run folder: {store.dir}")
    bar = Progress(TextColumn("[bold]ddsperf[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err)
    with bar:
        task = bar.add_task("starting", total=None)
        run_ddsperf_sweep(exp, store, backend=backend, message=lambda m: bar.console.print(m),
                          progress=lambda d, t, w: bar.update(task, completed=d, total=t, description=w))
    out.print(f"sweep done: {store.dir}")
    if make_report:
        paths = write_ddsperf_report(store.dir)
        out.print(f"report: {paths['report_html']} and {paths['report_md']}")


def register(cli: click.Group) -> None:
    """Add `run` to the CLI."""

    @cli.command()
    @click.argument("experiment_file", type=click.Path(dir_okay=False))
    @click.option("--backend", help="compose or netns (default: the experiment's, else the host's default).")
    @click.option("--results", "results_root", default="results", show_default=True, help="Folder for run folders.")
    @click.option("--report/--no-report", "make_report", default=True, show_default=True)
    def run(experiment_file: str, backend: str | None, results_root: str, make_report: bool) -> None:
        """Run the reference swarm app under the fault timeline in EXPERIMENT_FILE; results and a report."""
        from experiments.app.run import experiment_from_dict, run_app_experiment, write_app_report

        exp = experiment_from_dict(read_yaml(experiment_file, "experiment"), experiment_file)
        bar = Progress(TextColumn("[bold]run[/] {task.description}"), BarColumn(),
                       TextColumn("{task.completed:.0f}/{task.total:.0f} s"), TimeElapsedColumn(), console=err)
        with bar:
            task = bar.add_task("starting", total=exp.warmup)
            run_dir = run_app_experiment(exp, Path(results_root), backend=backend, message=lambda m: bar.console.print(m),
                                         progress=lambda d, t, w: bar.update(task, completed=d, total=t, description=w))
        out.print(f"run done: {run_dir}")
        if make_report:
            paths = write_app_report(run_dir)
            out.print(f"report: {paths['report_html']} and {paths['report_md']}")
