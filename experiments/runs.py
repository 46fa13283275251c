"""Starting and resuming an experiment of any registered type: the run folder is made only after the
experiment validated and the backend its first swarm needs answered, so bad input leaves nothing behind;
`run_experiment` runs it with what every run has around it (the run lock, its owner, the event logs, the
`capture:` section)."""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from experiments import registry
from experiments.loop import RunContext
from experiments.registry import ExperimentType
from experiments.store import ResultsStore, host_facts
from swarm.errors import SpecError
from swarm.observe.events import RunEvents
from swarm.observe.runcapture import CaptureSection, RunCaptures, check_names, section_of
from swarm.runtime.backends import swarm_dir
from swarm.runtime.locks import run_lock
from swarm.runtime.state import StateError, default_workdir, down_by_name, read_state
from swarm.runtime.swarm import Swarm
from swarm.spec.model import SwarmSpec

__all__ = ["RunContext", "open_run", "run_experiment", "preflight", "check_experiment", "discard_if_empty",
           "experiment_swarms"]


def open_run(experiment_file: str | None, resume_dir: str | None, results_root: str | Path,
             backend: str | None, command: str) -> tuple[ExperimentType, Any, ResultsStore]:
    """(type, experiment, store) for `swarm <command> FILE` or `--resume RUN_DIR`; SpecError for a type that
    another command runs, a type that cannot resume, or a file that differs from the stored experiment."""
    if resume_dir:
        store = ResultsStore(Path(resume_dir))
        data, source = store.experiment_document()
        store.check_tables()  # a tests.csv it cannot read is refused here, before any swarm is taken over
        kind = registry.type_of_document(data, source)
        _check_command(kind, source, command)
        if not kind.resumable:
            raise SpecError(f"{resume_dir}: a {kind.name} run cannot be resumed; start it again")
        exp = kind.from_dict(data, source)
        if experiment_file and registry.load(experiment_file)[1] != exp:
            raise SpecError(f"{experiment_file}: differs from the experiment stored in {resume_dir}")
        return kind, exp, store
    if not experiment_file:
        raise SpecError(f"{command}: give an EXPERIMENT_FILE or --resume RUN_DIR")
    kind, exp = registry.load(experiment_file)
    _check_command(kind, experiment_file, command)
    preflight(kind, exp, backend, experiment_file)
    section = section_of(experiment_file)  # `capture:` (swarm.observe.runcapture): only nodes the swarms have
    if section is not None:
        check_names(section, [n.name for s in experiment_swarms(kind, exp) for n in s.resolved_nodes()], experiment_file)
    return kind, exp, ResultsStore.create(Path(results_root), exp, host_facts())


@contextmanager
def running(kind: ExperimentType, exp: Any, store: ResultsStore, *, resume: bool,
            message: Callable[[str], None] = lambda _m: None) -> Iterator[str]:
    """Held while the experiment runs into `store`: one process per run folder (swarm.runtime.locks.run_lock);
    yields the run's owner name, which every swarm the run brings up records (RunContext.owner). On `resume`,
    first the swarms the
    interrupted run left up (a crash or a kill skips its `down`) are taken over: removed, so the run brings
    them up afresh; rows of a test that never finished are moved aside; measurements already written are kept."""
    with run_lock(store.dir):
        owner = str(store.dir.resolve())
        if resume:
            take_over(kind, exp, owner, message)
            for line in store.drop_incomplete_flows():
                message(line)
        yield owner


def run_experiment(kind: ExperimentType, exp: Any, store: ResultsStore, *, resume: bool = False,
                   capture: CaptureSection | None = None, backend: str | None = None, abort_on_error: bool = False,
                   message: Callable[[str], None] = lambda _m: None,
                   progress: Callable[[float, float, str], None] = lambda _d, _t, _w: None) -> Path:
    """Run the experiment into `store` (returns the run folder): under its run lock and as the owner of the swarms
    it brings up (`running`), its messages and progress also into the event log of each of its swarms that is up
    (RunEvents, for `swarm events` and the view), and with `capture` the section's captures on each swarm once it
    is up, closed just before it goes down or when the run ends. `message` and `progress` are the caller's
    (the CLI's progress bar); the take-over of `resume` is said to `message` only."""
    specs = kind.swarms(exp)
    workdir = default_workdir()
    watched = RunEvents([swarm_dir(workdir, spec.name) for spec in specs], getattr(exp, "name", kind.name))

    def say(text: str) -> None:
        message(text)
        watched.message(text)

    def report(done: float, total: float, what: str) -> None:
        progress(done, total, what)
        watched.progress(done, total, what)

    with running(kind, exp, store, resume=resume, message=message) as owner:
        captures = None
        if capture is not None:
            captures = RunCaptures(capture, [spec.name for spec in specs], store.dir / "capture", workdir,
                                   attach=Swarm.attach, message=say)
            captures.start()
        try:
            return kind.run(RunContext(exp, store, backend=backend, abort_on_error=abort_on_error, message=say,
                                       progress=report, owner=owner,
                                       before_down=(captures.finish,) if captures is not None else ()))
        finally:
            if captures is not None:
                captures.stop()


def take_over(kind: ExperimentType, exp: Any, owner: str, message: Callable[[str], None]) -> list[str]:
    """Remove every swarm of the experiment whose state names `owner` (the run being resumed) as the run that
    started it; a swarm of the same name somebody else started is left alone (its `up` then refuses). Returns
    the names removed."""
    workdir, removed = default_workdir(), []
    for name in dict.fromkeys(spec.name for spec in experiment_swarms(kind, exp)):
        try:
            state = read_state(workdir, name)
        except StateError:
            continue
        if state is not None and state.get("owner") == owner:
            message(f"swarm {name!r}: left up by the interrupted run; taking it over (removing it to start afresh)")
            down_by_name(name, workdir=workdir, warn=message)
            removed.append(name)
    return removed


def experiment_swarms(kind: ExperimentType, exp: Any) -> list[SwarmSpec]:
    """Every distinct swarm the experiment brings up, as its type lists them."""
    return kind.swarms(exp)


def preflight(kind: ExperimentType, exp: Any, backend: str | None, source: str) -> list[Swarm]:
    """What `up` would refuse, checked for every swarm of the experiment before anything is made (the
    backend, subnets against the host's interfaces and the swarms that are up, link conditions against
    this host's engine, the mesh): SpecError naming the file and the size."""
    swarms = []
    for spec in experiment_swarms(kind, exp):
        label = f"{source}: swarm {spec.name!r} ({len(spec.resolved_nodes())} nodes)"
        swarm = Swarm(spec, backend=backend or getattr(exp, "backend", None), source=label)
        swarm.preflight()
        swarms.append(swarm)
    return swarms


def sizes_summary(declared: list[int] | None, nodes: list[int]) -> str:
    """The sizes of `--check`'s line (pure): as the experiment gives them, and the swarms' node counts where they
    differ (a DTN test adds its ground node: `sizes: [1]` is a swarm of 2 nodes, not size 2)."""
    counts = sorted(set(nodes))
    if not declared:
        return f"sizes {', '.join(map(str, counts))}"
    said = f"sizes {', '.join(map(str, declared))}"
    return said if sorted(set(declared)) == counts else f"{said} (swarms of {', '.join(map(str, counts))} nodes)"


def check_experiment(experiment_file: str, backend: str | None, command: str) -> str:
    """`sweep --check` / `run --check`: validate the experiment and every swarm it implies; creates nothing.
    Returns the one-line summary."""
    kind, exp = registry.load(experiment_file)
    _check_command(kind, experiment_file, command)
    swarms = preflight(kind, exp, backend, experiment_file)
    tests = f"{kind.count_tests(exp)} tests, " if kind.count_tests else ""
    sizes = sizes_summary(getattr(exp, "sizes", None), [len(s.nodes) for s in swarms])
    first = swarms[0]
    planned = kind.plan_check(exp, first.links.engine.schedules) if kind.plan_check else ""
    return (f"{experiment_file}: valid ({kind.name}, {tests}{sizes}, backend {first.backend.name}, impairment engine "
            f"{first.links.engine.name}, mesh {first.mesh.implementation or 'none'}" + (f", {planned}" if planned else "")
            + ")")


def discard_if_empty(store: ResultsStore) -> bool:
    """Remove a run folder that holds no result yet (the first swarm never came up): True if removed."""
    d = store.dir
    if not d.is_dir() or (d / "tests.csv").exists() or any((d / "raw").rglob("*")):
        return False
    if {p.name for p in d.iterdir()} - {"experiment.yaml", "host.json", "raw", "events"}:
        return False
    shutil.rmtree(d)
    return True


def _check_command(kind: ExperimentType, source: str, command: str) -> None:
    if kind.command != command:
        raise SpecError(f"{source}: {'an' if kind.name[0] in 'aeiou' else 'a'} {kind.name} experiment "
                        f"(type: {kind.name}); run it with `swarm {kind.command}`")
