"""Where the nodes of an `orbits:` spec are (pure): satellites from a TLE, Keplerian elements or a generator
(Walker delta/star constellation, leader-follower formation), and ground stations on the WGS84 ellipsoid.

netem/spec/orbits.py assembles them with the link policy into the `orbits:` spec (OrbitsSpec); these models
only check their own fields (shape, ranges, TLE checksums) and name the node in every error.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

import swarm.units as units
from swarm.spec.validation import Strict

EARTH_RADIUS_KM = 6378.137  # WGS84 equatorial radius
MU_KM3_S2 = 398600.8  # WGS72 (SGP4's constants)
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")


def _check_name(what: str, v: str) -> str:
    if not isinstance(v, str) or not _NAME_RE.fullmatch(v) or len(v) > 40:
        raise ValueError(f"{what} {v!r}: name must match [a-z0-9-]+ (at most 40 characters)")
    return v


def _check_prefix(v: str) -> str:
    """A name prefix is valid when a name made from it (prefix + a digit) is."""
    return _check_name("prefix", v + "0")[:-1]


def numbered_names(prefix: str, count: int) -> list[str]:
    """prefix01 .. prefixNN, zero-padded to the width of `count` (at least 2), as Walker and Formation name them."""
    width = max(2, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


# ------------------------------------------------------------------------------------------- TLE
def tle_checksum(line: str) -> int:
    """The TLE checksum: digits summed, each '-' counts 1, modulo 10 (over the first 68 columns)."""
    return sum(int(c) if c.isdigit() else (1 if c == "-" else 0) for c in line[:68]) % 10


def check_tle(lines: list[str], node: str) -> tuple[str, str]:
    """Two TLE lines (an optional title line is dropped) checked for shape and checksum; errors name the
    node and the line."""
    lines = [ln.rstrip() for ln in lines if ln.strip()]
    if len(lines) == 3 and not lines[0].startswith("1 "):
        lines = lines[1:]  # a three-line element set: the title is ours to ignore (the node is named)
    if len(lines) != 2:
        raise ValueError(f"node {node!r}: TLE must be two lines (got {len(lines)})")
    for number, line in enumerate(lines, start=1):
        if not line.startswith(f"{number} "):
            raise ValueError(f"node {node!r}: TLE line {number} must start with '{number} ' (got {line[:10]!r})")
        if len(line) != 69:
            raise ValueError(f"node {node!r}: TLE line {number} has {len(line)} characters, expected 69")
        if not line[68].isdigit():
            raise ValueError(f"node {node!r}: TLE line {number} has no checksum digit in column 69")
        if int(line[68]) != tle_checksum(line):
            raise ValueError(f"node {node!r}: TLE line {number}: bad checksum {line[68]} "
                             f"(the line sums to {tle_checksum(line)})")
    if lines[0][2:7] != lines[1][2:7]:
        raise ValueError(f"node {node!r}: TLE lines carry different catalogue numbers "
                         f"({lines[0][2:7].strip()!r} and {lines[1][2:7].strip()!r})")
    try:
        float(lines[1][52:63]), float(lines[1][8:16]), float("0." + lines[1][26:33].strip())
        int(lines[0][18:20]), float(lines[0][20:32])
    except ValueError:
        raise ValueError(f"node {node!r}: TLE line 2: unreadable number in the element fields") from None
    return lines[0], lines[1]


def tle_epoch(line1: str) -> datetime:
    """A TLE's epoch (columns 19-32: two-digit year, fractional day of year)."""
    yy = int(line1[18:20])
    year = 2000 + yy if yy < 57 else 1900 + yy
    return datetime(year, 1, 1, tzinfo=timezone.utc) + timedelta(days=float(line1[20:32]) - 1)


# ---------------------------------------------------------------------------------- orbit sources
class Elements(Strict):
    """Keplerian (SGP4 mean) elements. Give `altitude` (of a circular orbit's radius above the equator)
    or `semi_major_axis`."""

    altitude: Optional[float] = None  # km
    semi_major_axis: Optional[float] = None  # km
    eccentricity: float = Field(0.0, ge=0.0, lt=1.0)
    inclination: float = 0.0  # deg
    raan: float = 0.0  # deg
    arg_perigee: float = 0.0  # deg
    mean_anomaly: float = 0.0  # deg
    bstar: float = 0.0  # drag term (1/earth radii); 0: no decay
    epoch: Optional[datetime] = None  # default: the plan's epoch

    @field_validator("altitude", "semi_major_axis", mode="before")
    @classmethod
    def _len(cls, v: Any, info) -> Optional[float]:
        return None if v is None else units.parse_length_km(v, info.field_name)

    @field_validator("inclination", "raan", "arg_perigee", "mean_anomaly", mode="before")
    @classmethod
    def _ang(cls, v: Any, info) -> float:
        return units.parse_angle_deg(v, info.field_name)

    @field_validator("epoch", mode="before")
    @classmethod
    def _epoch(cls, v: Any) -> Optional[datetime]:
        return None if v is None else units.parse_epoch(v)

    @field_validator("inclination")
    @classmethod
    def _incl(cls, v: float) -> float:
        if not 0 <= v <= 180:
            raise ValueError(f"inclination {v:g}: must be between 0 and 180 degrees")
        return v

    @model_validator(mode="after")
    def _above_ground(self) -> "Elements":
        if (self.altitude is None) == (self.semi_major_axis is None):
            raise ValueError("give one of altitude or semi_major_axis")
        a = self.a_km
        perigee_alt = a * (1 - self.eccentricity) - EARTH_RADIUS_KM
        if perigee_alt <= 0:
            what = (f"altitude {self.altitude:g} km" if self.altitude is not None
                    else f"semi_major_axis {a:g} km")
            raise ValueError(f"{what} with eccentricity {self.eccentricity:g}: perigee {perigee_alt:.0f} km "
                             f"is below the Earth's surface")
        return self

    @property
    def a_km(self) -> float:
        if self.semi_major_axis is not None:
            return self.semi_major_axis
        return EARTH_RADIUS_KM + (self.altitude or 0.0)  # _above_ground asks for one of the two


class Walker(Strict):
    """A Walker constellation i:t/p/f. delta: planes spread over 360 deg of RAAN; star: over 180 deg."""

    type: Literal["delta", "star"] = "delta"
    total: int = Field(ge=1, le=10_000)
    planes: int = Field(ge=1)
    phasing: int = Field(0, ge=0)
    altitude: float  # km
    inclination: float  # deg
    raan: float = 0.0  # deg: RAAN of the first plane
    prefix: str = "sat"

    _len = field_validator("altitude", mode="before")(lambda v: units.parse_length_km(v, "altitude"))
    _ang = field_validator("inclination", "raan", mode="before")(
        lambda v, info: units.parse_angle_deg(v, info.field_name))

    _prefix = field_validator("prefix")(lambda v: _check_prefix(v))

    @model_validator(mode="after")
    def _shape(self) -> "Walker":
        if self.total % self.planes:
            raise ValueError(f"total {self.total} is not a multiple of planes {self.planes}")
        if self.phasing >= self.planes:
            raise ValueError(f"phasing {self.phasing}: must be below planes ({self.planes})")
        if self.altitude <= 0:
            raise ValueError(f"altitude {self.altitude:g} km is below the Earth's surface")
        if not 0 <= self.inclination <= 180:
            raise ValueError(f"inclination {self.inclination:g}: must be between 0 and 180 degrees")
        return self

    def names(self) -> list[str]:
        return numbered_names(self.prefix, self.total)

    def elements(self) -> list[Elements]:
        per_plane = self.total // self.planes
        spread = 360.0 if self.type == "delta" else 180.0
        out = []
        for k in range(self.total):
            plane, slot = divmod(k, per_plane)
            out.append(Elements(
                altitude=self.altitude, inclination=self.inclination,
                raan=(self.raan + plane * spread / self.planes) % 360,
                mean_anomaly=(slot * 360.0 / per_plane + plane * self.phasing * 360.0 / self.total) % 360))
        return out


class Formation(Strict):
    """Leader-follower: `count` satellites on one circular orbit, each `spacing` (straight-line distance)
    behind the one before."""

    count: int = Field(ge=1, le=10_000)
    spacing: float  # km
    altitude: float  # km
    inclination: float = 0.0
    raan: float = 0.0
    mean_anomaly: float = 0.0  # of the leader
    prefix: str = "sat"

    _len = field_validator("spacing", "altitude", mode="before")(
        lambda v, info: units.parse_length_km(v, info.field_name))
    _ang = field_validator("inclination", "raan", "mean_anomaly", mode="before")(
        lambda v, info: units.parse_angle_deg(v, info.field_name))

    _prefix = field_validator("prefix")(lambda v: _check_prefix(v))

    @model_validator(mode="after")
    def _shape(self) -> "Formation":
        if self.altitude <= 0:
            raise ValueError(f"altitude {self.altitude:g} km is below the Earth's surface")
        r = EARTH_RADIUS_KM + self.altitude
        if not 0 < self.spacing <= 2 * r:
            raise ValueError(f"spacing {self.spacing:g} km: must be above 0 and at most the orbit's diameter")
        if (self.count - 1) * self.angle_deg >= 360:
            raise ValueError(f"{self.count} satellites {self.spacing:g} km apart do not fit on one orbit")
        return self

    @property
    def angle_deg(self) -> float:
        r = EARTH_RADIUS_KM + self.altitude
        return math.degrees(2 * math.asin(self.spacing / (2 * r)))  # chord -> central angle

    def names(self) -> list[str]:
        return numbered_names(self.prefix, self.count)

    def elements(self) -> list[Elements]:
        return [Elements(altitude=self.altitude, inclination=self.inclination, raan=self.raan,
                         mean_anomaly=(self.mean_anomaly - k * self.angle_deg) % 360) for k in range(self.count)]


class SatelliteEntry(Strict):
    """One item of `satellites:`: a named node with a TLE or elements, or a generator (walker, formation)."""

    name: Optional[str] = None
    tle: Optional[Any] = None  # two lines (a list, or one string with a newline)
    elements: Optional[Elements] = None
    walker: Optional[Walker] = None
    formation: Optional[Formation] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else _check_name("node", v)

    @model_validator(mode="after")
    def _one_source(self) -> "SatelliteEntry":
        given = [k for k in ("tle", "elements", "walker", "formation") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of tle, elements, walker, formation (got {given or 'none'})")
        if given[0] in ("tle", "elements") and self.name is None:
            raise ValueError(f"a satellite with {given[0]} needs a name")
        if given[0] in ("walker", "formation") and self.name is not None:
            raise ValueError(f"a {given[0]} names its satellites from its prefix; drop name {self.name!r}")
        if self.tle is not None:
            raw = self.tle.splitlines() if isinstance(self.tle, str) else self.tle
            if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
                raise ValueError(f"node {self.name!r}: tle must be two lines of text")
            object.__setattr__(self, "tle", list(check_tle(raw, self.name or "")))  # named: checked above
        return self


class GroundStation(Strict):
    name: str
    lat: float  # deg, geodetic
    lon: float  # deg
    alt: float = 0.0  # km above the WGS84 ellipsoid
    min_elevation: Optional[float] = None  # deg; default links.ground.min_elevation

    _name = field_validator("name")(lambda v: _check_name("ground station", v))
    _alt = field_validator("alt", mode="before")(lambda v: units.parse_length_km(v, "alt"))
    _ang = field_validator("lat", "lon", "min_elevation", mode="before")(
        lambda v, info: None if v is None else units.parse_angle_deg(v, info.field_name))

    @field_validator("lat")
    @classmethod
    def _lat(cls, v: float) -> float:
        if not -90 <= v <= 90:
            raise ValueError(f"latitude {v:g} outside -90..90 degrees")
        return v

    @field_validator("lon")
    @classmethod
    def _lon(cls, v: float) -> float:
        if not -180 <= v <= 360:
            raise ValueError(f"longitude {v:g} outside -180..360 degrees")
        return v

    @field_validator("min_elevation")
    @classmethod
    def _el(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not -10 <= v < 90:
            raise ValueError(f"min_elevation {v:g}: must be in [-10, 90) degrees")
        return v
