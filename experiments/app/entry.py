"""The `app` experiment type: the reference swarm app (DDS) under a fault timeline (`swarm run`)."""
from __future__ import annotations

from analysis.app import write_app_report
from experiments.app.model import experiment_from_dict
from experiments.app.run import run_app_experiment
from experiments.kind import ExperimentType


def _run(exp, store, *, backend=None, message=lambda m: None, progress=lambda d, t, w: None, abort_on_error=False):
    return run_app_experiment(exp, store=store, backend=backend, message=message, progress=progress)


TYPE = ExperimentType(
    name="app", summary="the reference swarm app under a fault timeline", command="run",
    from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec()], run=_run,
    report=write_app_report, resumable=False, unit="s")
