"""The experiment-type registry: every kind of experiment the CLI can run, found by the `type:` of its
file (default `traffic`) or of the experiment.yaml stored in its run folder.

Each type is an `ExperimentType` (experiments/kind.py) defined in its own folder (experiments/<type>/entry.py): its model
(`from_dict`), every swarm it brings up (`swarms`, each checked before a run folder is made), how
it runs into a run folder (`run`), and its report (`report`, in analysis/). Adding a type is one new
folder and one line in TYPES below.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from swarm.observe.runcapture import take_section
from swarm.errors import SpecError
from swarm.spec.documents import read_yaml

from experiments.app.entry import TYPE as APP
from experiments.ddsperf.entry import TYPE as DDSPERF
from experiments.dtn.entry import TYPE as DTN
from experiments.kind import ExperimentType
from experiments.orbits.entry import TYPE as ORBITS
from experiments.traffic.entry import TYPE as TRAFFIC

TYPES: dict[str, ExperimentType] = {t.name: t for t in (TRAFFIC, DDSPERF, APP, ORBITS, DTN)}
DEFAULT = TRAFFIC.name


def get_type(name: Any, where: str = "experiment") -> ExperimentType:
    """The registered type `name`; SpecError (one line) naming the known ones."""
    if not isinstance(name, str) or name not in TYPES:  # `type: [x]` is not a name (and not hashable)
        known = ", ".join(f"{n} (the default)" if n == DEFAULT else n for n in TYPES)
        raise SpecError(f"{where}: type {name!r}: unknown experiment type (known: {known})")
    return TYPES[name]


def type_of_document(data: Any, where: str) -> ExperimentType:
    """The type a parsed experiment document declares (no `type:`: the traffic sweep)."""
    return get_type(data.get("type", DEFAULT) if isinstance(data, dict) else DEFAULT, where)


def load(path: str | Path) -> tuple[ExperimentType, Any]:
    """Read an experiment file: its type and its validated model (one-line SpecErrors)."""
    data = read_yaml(path, "experiment")
    kind = type_of_document(data, str(path))
    take_section(data, str(path))  # `capture:` is any type's (swarm.observe.runcapture): checked, then set aside
    return kind, kind.from_dict(data, str(path))


def type_of_run(run_dir: Path) -> ExperimentType:
    """The type of the experiment stored in a run folder."""
    path = Path(run_dir) / "experiment.yaml"
    if not path.exists():
        raise SpecError(f"{run_dir}: not a results folder (no experiment.yaml)")
    return type_of_document(read_yaml(path, "experiment"), str(path))
