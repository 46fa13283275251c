"""The `orbits:` spec (pure): which nodes fly which orbits, where the ground stations are, and the link
policy that turns geometry into links.

    orbits:
      epoch: 2026-03-20T12:00:00Z    # start of the plan (default: the newest TLE epoch, else 2026-01-01T00:00:00Z)
      duration: 10min                # how much orbit to plan (default 10min)
      step: 1s                       # sampling step = link update period (default 1s)
      propagation_speed: c           # or 0.59c (StarryNet's value), 200000km/s
      satellites:
        - walker: {type: delta, total: 12, planes: 3, phasing: 1, altitude: 550km, inclination: 53, prefix: sat}
        - formation: {count: 3, spacing: 100km, altitude: 500km, inclination: 97.4, prefix: ff}   # leader-follower
        - {name: iss, tle: ["1 25544U 98067A ...", "2 25544  51.6416 ..."]}
        - {name: cube, elements: {altitude: 600km, eccentricity: 0.001, inclination: 51.6, raan: 30,
                                  arg_perigee: 0, mean_anomaly: 90}}
      ground_stations:
        - {name: gs01, lat: 47.37, lon: 8.54, alt: 400m, min_elevation: 10}
      links:
        isl: {max_range: 5000km, max_degree: 4, rate: 100Mbit}   # rate fixed, or a link budget (below)
        ground: {min_elevation: 10, max_links: 2, rate: {bandwidth: 20MHz, snr: 10dB, at: 1000km, max: 200Mbit}}
        atmosphere_margin: 80km      # a line of sight must clear the Earth + this much atmosphere
        delay_resolution: 1ms        # a link's delay is re-applied when it drifts by more than this

Names follow the swarm's rule ([a-z0-9-]+); generated satellites are <prefix>01, <prefix>02, ... (at least two
digits, as the swarm spec names its groups), so `walker: {total: 12, prefix: sat}` flies the swarm's
sat01..sat12. Angles are degrees; bare lengths are km; bare durations are seconds. The satellites and ground
stations are modelled in netem/spec/satellites.py; this module holds the link policy, the whole spec and its
loading.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

import swarm.units as units
from netem.spec.satellites import GroundStation, SatelliteEntry, tle_epoch
from swarm.errors import SpecError
from swarm.spec.validation import Strict, error_location

DEFAULT_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
TLE_WARN_DAYS = 14.0  # SGP4 drifts ~1-3 km/day from a TLE's epoch: beyond two weeks the geometry is a guess
MAX_SAMPLES = 20_000_000  # steps x nodes: beyond this a plan is a typo (100 nodes x 2 days at 1 s)
# The planner holds every node pair's index (16 bytes a pair) and computes pairs x steps distances: 10,000
# satellites (5e7 pairs) passed 6 GB for one step. Bounds, checked before any computing:
MAX_PAIRS = 2_000_000  # 2,000 satellites; ~32 MB of pair indices plus one 16 MB chunk at a time
MAX_PAIR_SAMPLES = 2_000_000_000  # pairs x steps; measured ~13 M pair-samples/s here: ~2.5 min of planning


# ------------------------------------------------------------------------------------- link policy
class RateModel(Strict):
    """A link's rate: fixed (`rate: 100Mbit`) or from a link budget: Shannon capacity of `bandwidth` at
    `snr` measured at distance `at`, free-space (SNR ~ 1/d^2), capped at `max`; below `min` the link is
    down (the budget does not close). Rates are floored to multiples of `step` so small drifts are not
    re-applied every second."""

    fixed: Optional[int] = None  # bit/s
    bandwidth: Optional[float] = None  # Hz
    snr: Optional[float] = None  # dB at `at`
    at: Optional[float] = None  # km
    max: Optional[int] = None  # bit/s
    min: int = 0  # bit/s
    step: Optional[int] = None  # bit/s; default 1 % of max (or of the rate at `at`)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v: Any) -> Any:
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            return {"fixed": units.parse_link_rate(v, "rate")}
        if isinstance(v, dict):
            v = dict(v)
            for key, parse in (("bandwidth", units.parse_frequency_hz), ("snr", units.parse_db),
                               ("at", units.parse_length_km), ("max", units.parse_link_rate),
                               ("min", units.parse_link_rate), ("step", units.parse_link_rate)):
                if v.get(key) is not None:
                    v[key] = parse(v[key], key)
        return v

    @model_validator(mode="after")
    def _complete(self) -> "RateModel":
        budget = [k for k in ("bandwidth", "snr", "at") if getattr(self, k) is not None]
        if self.fixed is None and len(budget) != 3:
            raise ValueError("rate: give a fixed rate (100Mbit) or a budget {bandwidth, snr, at}")
        if self.fixed is not None and budget:
            raise ValueError("rate: a fixed rate and a link budget exclude each other")
        if self.at is not None and self.at <= 0:
            raise ValueError(f"rate.at {self.at:g} km: must be positive")
        return self

    @property
    def is_budget(self) -> bool:
        return self.fixed is None

    def quantum(self) -> int:
        if self.step:
            return self.step
        assert self.bandwidth is not None and self.snr is not None  # a budget has all three (_complete)
        ref = self.max or self.bandwidth * math.log2(1 + 10 ** (self.snr / 10))  # the rate at `at`
        return max(1, int(ref // 100))



class IslPolicy(Strict):
    enabled: bool = True
    max_range: Optional[float] = None  # km; None: any distance with line of sight
    max_degree: Optional[int] = Field(None, ge=1)  # nearest k (mutual), None: every visible pair
    rate: Optional[RateModel] = None  # None: rate not managed (unlimited)

    _len = field_validator("max_range", mode="before")(
        lambda v: None if v is None else units.parse_length_km(v, "max_range"))

    @field_validator("max_range")
    @classmethod
    def _pos(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and v <= 0:
            raise ValueError(f"max_range {v:g} km: must be positive")
        return v


class GroundPolicy(Strict):
    enabled: bool = True
    min_elevation: float = 10.0  # deg
    max_links: Optional[int] = Field(None, ge=1)  # per station, highest elevation first
    rate: Optional[RateModel] = None

    _ang = field_validator("min_elevation", mode="before")(lambda v: units.parse_angle_deg(v, "min_elevation"))

    @field_validator("min_elevation")
    @classmethod
    def _el(cls, v: float) -> float:
        if not -10 <= v < 90:
            raise ValueError(f"min_elevation {v:g}: must be in [-10, 90) degrees")
        return v


class LinkPolicy(Strict):
    isl: IslPolicy = IslPolicy()
    ground: GroundPolicy = GroundPolicy()
    atmosphere_margin: float = 80.0  # km (Hypatia's choice: no ISL grazes below 80 km)
    delay_resolution: float = 1.0  # ms

    _len = field_validator("atmosphere_margin", mode="before")(
        lambda v: units.parse_length_km(v, "atmosphere_margin"))

    @field_validator("delay_resolution", mode="before")
    @classmethod
    def _res(cls, v: Any) -> float:
        ms = units.parse_time_ms(v, "delay_resolution")
        if ms <= 0:
            raise ValueError(f"delay_resolution {v!r}: must be positive")
        return ms

    @field_validator("atmosphere_margin")
    @classmethod
    def _margin(cls, v: float) -> float:
        if v < 0:
            raise ValueError(f"atmosphere_margin {v:g} km: must not be negative")
        return v


# ------------------------------------------------------------------------------------------- root
class OrbitsSpec(Strict):
    epoch: Optional[datetime] = None
    duration: float = 600.0  # s
    step: float = 1.0  # s
    propagation_speed: float = units.C_KM_S  # km/s
    satellites: list[SatelliteEntry] = Field(default_factory=list)
    ground_stations: list[GroundStation] = Field(default_factory=list)
    links: LinkPolicy = LinkPolicy()

    @field_validator("epoch", mode="before")
    @classmethod
    def _epoch(cls, v: Any) -> Optional[datetime]:
        return None if v is None else units.parse_epoch(v)

    @field_validator("duration", "step", mode="before")
    @classmethod
    def _dur(cls, v: Any, info) -> float:
        return units.parse_duration(v, info.field_name)

    @field_validator("propagation_speed", mode="before")
    @classmethod
    def _speed(cls, v: Any) -> float:
        return units.parse_speed_km_s(v)

    @model_validator(mode="after")
    def _whole(self) -> "OrbitsSpec":
        if self.step > self.duration:
            raise ValueError(f"step {self.step:g} s is longer than duration {self.duration:g} s")
        names = self.satellite_names() + [g.name for g in self.ground_stations]
        if not names:
            raise ValueError("no satellites and no ground stations")
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise ValueError(f"node {n!r} is named twice")
            seen.add(n)
        samples = math.ceil(self.duration / self.step) * len(names)
        if samples > MAX_SAMPLES:
            raise ValueError(f"{len(names)} nodes x {math.ceil(self.duration / self.step)} steps is more than "
                             f"{MAX_SAMPLES:,} samples: raise step or shorten duration")
        pairs = len(names) * (len(names) - 1) // 2
        if pairs > MAX_PAIRS:
            raise ValueError(f"{len(names)} nodes make {pairs:,} node pairs, more than the planner's {MAX_PAIRS:,} "
                             f"(~{pairs * 16 / 1e9:.1f} GB before computing); plan fewer nodes")
        steps = math.ceil(self.duration / self.step) + 1
        if pairs * steps > MAX_PAIR_SAMPLES:
            raise ValueError(f"{pairs:,} node pairs x {steps:,} steps is more than {MAX_PAIR_SAMPLES:,} pair samples "
                             f"(~{pairs * steps / 13e6 / 60:.0f} min of planning): raise step or shorten duration")
        return self

    # ------------------------------------------------------------------ derived, all pure
    def satellite_names(self) -> list[str]:
        out: list[str] = []
        for s in self.satellites:
            gen = s.walker or s.formation
            if gen is None:
                assert s.name is not None  # a satellite without a generator is named (validated)
                out.append(s.name)
            else:
                out += gen.names()
        return out

    def node_names(self) -> list[str]:
        return self.satellite_names() + [g.name for g in self.ground_stations]

    def start(self) -> datetime:
        """The plan's epoch: given, else the newest TLE epoch, else DEFAULT_EPOCH."""
        if self.epoch is not None:
            return self.epoch
        tles = [tle_epoch(s.tle[0]) for s in self.satellites if s.tle]
        return max(tles) if tles else DEFAULT_EPOCH

    def warnings(self) -> list[str]:
        """Sane-but-suspicious input: a start far from a TLE's epoch (SGP4 accuracy decays with it)."""
        out = []
        start = self.start()
        for s in self.satellites:
            if s.tle:
                days = abs((start - tle_epoch(s.tle[0])).total_seconds()) / 86400
                if days > TLE_WARN_DAYS:
                    out.append(f"node {s.name!r}: plan epoch {start:%Y-%m-%dT%H:%M:%SZ} is {days:.0f} days from its "
                               f"TLE epoch {tle_epoch(s.tle[0]):%Y-%m-%dT%H:%M:%SZ}: positions may be off by "
                               f"tens of km or more")
        return out


# -------------------------------------------------------------------------------------- loading
def parse_orbits(data: Any, source: str = "orbits") -> OrbitsSpec:
    """Validate an `orbits:` mapping; bad input is one SpecError line naming the field and the value."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping, got {type(data).__name__}")
    try:
        return OrbitsSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = error_location(tuple(err["loc"]), data)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field {err['loc'][-1]!r}"
            where = error_location(tuple(err["loc"][:-1]), data)
        elif err["type"] not in ("value_error", "missing", "assertion_error"):
            msg = f"{msg} (got {err.get('input')!r})"
        raise SpecError(f"{source}{'.' + where if where else ''}: {msg}") from None


def load_orbits_file(path) -> OrbitsSpec:
    """A YAML file with an `orbits:` mapping at the top (a swarm spec or experiment), or the mapping itself."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark else ""
        raise SpecError(f"{p}: not valid YAML{at}") from None
    if isinstance(data, dict) and "orbits" in data:
        return parse_orbits(data["orbits"], f"{p}: orbits")
    return parse_orbits(data, str(p))
