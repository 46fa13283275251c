"""Starting and resuming an experiment of any registered type: the run folder is made only after the
experiment validated and the backend its first swarm needs answered, so bad input leaves nothing behind."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments import registry
from experiments.registry import ExperimentType
from experiments.store import ResultsStore, host_facts
from swarm.errors import SpecError
from swarm.runtime.swarm import Swarm


def open_run(experiment_file: str | None, resume_dir: str | None, results_root: str | Path,
             backend: str | None, command: str) -> tuple[ExperimentType, Any, ResultsStore]:
    """(type, experiment, store) for `swarm <command> FILE` or `--resume RUN_DIR`; SpecError for a type that
    another command runs, a type that cannot resume, or a file that differs from the stored experiment."""
    if resume_dir:
        store = ResultsStore(Path(resume_dir))
        data, source = store.experiment_document()
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
    Swarm(kind.first_swarm(exp), backend=backend or getattr(exp, "backend", None)).backend.check_available()
    return kind, exp, ResultsStore.create(Path(results_root), exp, host_facts())


def _check_command(kind: ExperimentType, source: str, command: str) -> None:
    if kind.command != command:
        raise SpecError(f"{source}: {'an' if kind.name[0] in 'aeiou' else 'a'} {kind.name} experiment "
                        f"(type: {kind.name}); run it with `swarm {kind.command}`")
