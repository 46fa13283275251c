"""The `orbits` experiment (pure model): see experiments/orbits/run.py for the file format and the run."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from netem.orbits.spec import parse_orbits
from swarm.spec.model import SwarmSpec, _check_name, spec_from_dict, validate_document
from swarm.units import parse_duration


class OrbitsExperiment(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["orbits"] = "orbits"
    name: str
    backend: Optional[Literal["compose", "netns"]] = None
    speedup: float = Field(1.0, gt=0, le=10_000)
    orbits: dict[str, Any]
    swarm: dict[str, Any] = Field(default_factory=dict)
    probes: list[list[str]] = Field(default_factory=list)
    probe_interval: float = 0.2
    contact_plan_numbers: Optional[dict[str, int]] = None
    workers: int = Field(16, ge=1, le=256)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name("experiment", v)

    @field_validator("probe_interval", mode="before")
    @classmethod
    def _interval(cls, v: Any) -> float:
        s = parse_duration(v, "probe_interval")
        if s < 0.002:
            raise ValueError(f"probe_interval {v!r}: at least 2ms")
        return s

    @model_validator(mode="after")
    def _consistent(self) -> "OrbitsExperiment":
        spec = self.orbits_spec()
        for key in ("name", "nodes", "node_list", "groups"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the experiment (the nodes are the orbit plan's)")
        names = spec.node_names()
        for pair in self.probes:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"probes: {pair!r}: expected two different nodes [a, b]")
            for n in pair:
                if n not in names:
                    raise ValueError(f"probes: node {n!r} is not a node of the orbit plan")
        if self.contact_plan_numbers is not None:
            missing = [n for n in names if n not in self.contact_plan_numbers]
            if missing:
                raise ValueError(f"contact_plan_numbers: no number for node {missing[0]!r}")
        self.swarm_spec()
        return self

    def orbits_spec(self):
        return parse_orbits(self.orbits, f"{self.name}: orbits")

    def swarm_spec(self) -> SwarmSpec:
        names = self.orbits_spec().node_names()
        data = {**self.swarm, "name": self.name, "node_list": [{"name": n} for n in names]}
        if self.backend:
            data["backend"] = self.backend
        return spec_from_dict(data, f"{self.name}: swarm")


def experiment_from_dict(data: Any, source: str = "") -> OrbitsExperiment:
    return validate_document(OrbitsExperiment, data, source, "experiment")
