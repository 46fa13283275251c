"""The `ddsperf` experiment type: DDS throughput and latency by sample size, rate and swarm size."""
from __future__ import annotations

from analysis.ddsperf import write_ddsperf_report
from experiments.ddsperf.model import experiment_from_dict
from experiments.ddsperf.plan import plan_tests
from experiments.ddsperf.run import run_ddsperf_sweep
from experiments.kind import ExperimentType


def _run(exp, store, *, backend=None, message=lambda m: None, progress=lambda d, t, w: None, abort_on_error=False):
    run_ddsperf_sweep(exp, store, backend=backend, message=message, progress=progress)
    return store.dir


TYPE = ExperimentType(
    name="ddsperf", summary="Cyclone DDS ddsperf throughput/latency sweep", command="sweep",
    from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec(size) for size in sorted(set(exp.sizes))], run=_run,
    report=write_ddsperf_report, count_tests=lambda exp: len(plan_tests(exp)))
