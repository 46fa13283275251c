"""The `app` experiment type: the reference swarm app (DDS) under a fault timeline (`swarm run`)."""
from __future__ import annotations

from analysis.app import write_app_report
from experiments.app import run
from experiments.app.model import experiment_from_dict
from experiments.kind import ExperimentType

TYPE = ExperimentType(
    name="app", summary="the reference swarm app under a fault timeline", command="run",
    from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec()], run=run.run,
    report=write_app_report, resumable=False, unit="s")
