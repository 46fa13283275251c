"""The `orbits` experiment type: a swarm whose links follow an orbit plan live (`swarm run`)."""
from __future__ import annotations

from analysis.orbits import write_orbits_report
from experiments.kind import ExperimentType
from experiments.orbits import run
from experiments.orbits.model import experiment_from_dict

TYPE = ExperimentType(
    name="orbits", summary="links follow an orbit plan live (delay, visibility, rate), with contact plans",
    command="run", from_dict=experiment_from_dict, swarms=lambda exp: [exp.swarm_spec()], run=run.run,
    report=write_orbits_report, resumable=False, unit="s")
