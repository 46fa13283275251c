"""The ddsperf sweep's experiment (`type: ddsperf`): its model and validators (see run.py for what it does)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from experiments.traffic.model import ExperimentSpec
from swarm.spec.apps import check_domain_id
from swarm.units import parse_duration, rate_hz
from experiments.base import ExperimentModel
from swarm.spec.documents import read_yaml, unique, validate_document
from swarm.spec.model import SwarmSpec, swarm_from_template


SIZE_RE = re.compile(r"^(\d+)(k|kB|KiB|M|MB|MiB)?\Z")
RATE_RE = re.compile(r"^(inf|\d+(?:\.\d+)?(?:Hz|kHz)?)\Z")
MEASURES: tuple[Literal["throughput", "latency"], ...] = ("throughput", "latency")


def parse_sample_size(value: Any) -> int:
    """ddsperf's size syntax ('64', '1k', '8KiB', '1MB') -> bytes; ValueError naming the value."""
    m = SIZE_RE.match(str(value).strip())
    if not m:
        raise ValueError(f"sample size {value!r}: expected bytes, e.g. 64, 1k, 8KiB or 1MB")
    mult = {None: 1, "k": 1024, "kB": 1000, "KiB": 1024, "M": 1048576, "MB": 1000000, "MiB": 1048576}[m.group(2)]
    size = int(m.group(1)) * mult
    if size != 0 and size < 12:
        raise ValueError(f"sample size {value!r}: ddsperf's KS topic needs 0 or at least 12 bytes")
    return size





class DdsperfExperiment(ExperimentModel):
    """A ddsperf sweep."""

    type: Literal["ddsperf"]
    name: str
    sizes: list[int]  # swarm sizes
    sample_sizes: list[str] = Field(default_factory=lambda: ["1k"])
    rates: list[str] = Field(default_factory=lambda: ["1kHz"])
    measures: list[Literal["throughput", "latency"]] = Field(default_factory=lambda: list(MEASURES))
    duration: float = Field(5.0, ge=3, le=3600)  # seconds the publisher / pinger runs
    repeats: int = Field(1, ge=1, le=100)
    reliable: bool = False
    domain_id: int = 1
    settle: float = Field(0.5, ge=0, le=600)
    backend: Optional[Literal["compose", "netns", "swarm"]] = None
    swarm: dict[str, Any] = Field(default_factory=dict)

    @field_validator("domain_id", mode="before")
    @classmethod
    def _domain(cls, v):
        return check_domain_id(v)

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: list[int]) -> list[int]:
        return ExperimentSpec._sizes(v)  # the iperf3 sweep's rule for swarm sizes

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)  # `5s`, `2min` or plain seconds, like every other experiment's duration

    @field_validator("sample_sizes", mode="before")
    @classmethod
    def _samples(cls, v: Any) -> list[str]:
        if not isinstance(v, list):
            raise ValueError(f"sample_sizes {v!r}: expected a list, e.g. [64, 1k, 8KiB]")
        v = [str(s) if isinstance(s, int) and not isinstance(s, bool) else s for s in v]  # YAML reads 64 as int
        if not all(isinstance(s, str) for s in v):
            raise ValueError("sample_sizes: each is bytes, e.g. 64, 1k, 8KiB or 1MB")
        if not v:
            raise ValueError("sample_sizes: give at least one")
        for s in v:
            parse_sample_size(s)
        return unique("sample_sizes", [str(s) for s in v], key=parse_sample_size)

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("rates: give at least one, e.g. [100Hz, 1kHz, inf]")
        for r in v:
            if not RATE_RE.match(str(r)) or rate_hz(r) <= 0:
                raise ValueError(f"rate {r!r}: expected a positive rate like 100Hz, 2kHz or inf")
        return unique("rates", [str(r) for r in v], key=rate_hz)

    @model_validator(mode="after")
    def _consistent(self) -> "DdsperfExperiment":
        if not self.measures:
            raise ValueError("measures: give throughput, latency or both")
        for key in ("name", "nodes", "node_list", "groups", "apps"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the sweep")
        self.swarm_spec(max(self.sizes))
        return self

    def swarm_spec(self, size: int) -> SwarmSpec:
        """The swarm of `size` nodes the tests of that size run on."""
        return swarm_from_template(self.swarm, self.name, f"{self.name}-n{size}", size, self.backend)


def experiment_from_dict(data: Any, source: str = "") -> DdsperfExperiment:
    return validate_document(DdsperfExperiment, data, source, "experiment")


# --------------------------------------------------------------------------------------------- planning
def load_ddsperf(path: str | Path) -> DdsperfExperiment:
    """Read and validate a ddsperf experiment file."""
    return experiment_from_dict(read_yaml(path, "experiment"), str(path))
