"""The `traffic` experiment type: the full-mesh bandwidth/loss sweep (iperf3 or mux engine)."""
from __future__ import annotations

from analysis.traffic import write_sweep_report
from experiments.kind import ExperimentType
from experiments.traffic import run
from experiments.traffic.model import experiment_from_dict, plan_tests

TYPE = ExperimentType(
    name="traffic", summary="bandwidth and loss sweep over swarm sizes, protocols and rates", command="sweep",
    from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec(size) for size in sorted(set(exp.sizes))],
    run=run.run, report=write_sweep_report, count_tests=lambda exp: len(plan_tests(exp)))
