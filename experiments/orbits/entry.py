"""The `orbits` experiment type: a swarm whose links follow an orbit plan live (`swarm run`)."""
from __future__ import annotations

from analysis.orbits import write_orbits_report
from experiments.orbits.model import experiment_from_dict
from experiments.orbits.run import run_orbits_experiment
from experiments.kind import ExperimentType


def _run(exp, store, *, backend=None, message=lambda m: None, progress=lambda d, t, w: None, abort_on_error=False):
    return run_orbits_experiment(exp, store=store, backend=backend, message=message, progress=progress)


TYPE = ExperimentType(
    name="orbits", summary="links follow an orbit plan live (delay, visibility, rate), with contact plans",
    command="run", from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec()], run=_run,
    report=write_orbits_report, resumable=False, unit="s")
