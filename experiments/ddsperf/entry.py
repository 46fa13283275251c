"""The `ddsperf` experiment type: DDS throughput and latency by sample size, rate and swarm size."""
from __future__ import annotations

from analysis.ddsperf import write_ddsperf_report
from experiments.ddsperf import run
from experiments.ddsperf.model import experiment_from_dict
from experiments.ddsperf.plan import plan_tests
from experiments.kind import ExperimentType

TYPE = ExperimentType(
    name="ddsperf", summary="Cyclone DDS ddsperf throughput/latency sweep", command="sweep",
    from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec(size) for size in sorted(set(exp.sizes))],
    run=run.run, report=write_ddsperf_report, count_tests=lambda exp: len(plan_tests(exp)))
