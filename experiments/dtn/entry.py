"""The `dtn` experiment type: bundles through dtn7-rs agents over patterns, CLAs, routings, link profiles and
contact plans (`swarm run`)."""
from __future__ import annotations

from analysis.dtn import write_dtn_report
from experiments.dtn.model import experiment_from_dict
from experiments.dtn.run import run_dtn_experiment, test_swarms
from experiments.kind import ExperimentType


def _run(exp, store, *, backend=None, message=lambda m: None, progress=lambda d, t, w: None, abort_on_error=False):
    return run_dtn_experiment(exp, store, backend=backend, message=message, progress=progress)


TYPE = ExperimentType(
    name="dtn", summary="bundles through dtn7-rs agents: patterns x CLAs x routings x link profiles x contacts",
    command="run", from_dict=experiment_from_dict, swarms=test_swarms, run=_run,
    report=write_dtn_report, unit="s")
