"""The `dtn` experiment type: bundles through DTN agents (swarm.dtn.agents) over patterns, CLAs, routings, link profiles and
contact plans (`swarm run`)."""
from __future__ import annotations

from analysis.dtn import write_dtn_report
from experiments.dtn import run
from experiments.dtn.model import experiment_from_dict
from experiments.kind import ExperimentType

TYPE = ExperimentType(
    name="dtn", summary="bundles through DTN agents: patterns x CLAs x routings x link profiles x contacts",
    command="run", from_dict=experiment_from_dict, swarms=run.test_swarms, run=run.run,
    report=write_dtn_report, unit="s", plan_check=run.plan_check)
