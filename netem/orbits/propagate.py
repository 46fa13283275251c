"""Positions of every node over the plan's time grid (pure, vectorised).

Satellites: SGP4 through `sgp4.api.SatrecArray` (the C++ reference implementation of Vallado et al.,
vectorised over satellites x times in one call). TLEs load as published; Keplerian elements (and the
Walker / formation generators) are handed to `sgp4init` as mean elements, so one propagator (with J2
secular drift) flies everything. Ground stations: WGS84 geodetic -> Earth-fixed -> TEME by the Greenwich
mean sidereal angle (polar motion and UT1-UTC are ignored: tens of metres, i.e. tens of nanoseconds of
delay). Everything is in TEME, km.
"""
from __future__ import annotations

import math
from datetime import datetime

import numpy as np
from sgp4.api import WGS72, Satrec, SatrecArray, jday

from netem.spec.orbits import OrbitsSpec
from netem.spec.satellites import EARTH_RADIUS_KM, MU_KM3_S2, Elements, GroundStation
from swarm.errors import SpecError

WGS84_F = 1 / 298.257223563
_SGP4_EPOCH_JD = 2433281.5  # 1949-12-31 00:00 UT: sgp4init counts its epoch in days from here
_SGP4_ERRORS = {1: "mean eccentricity out of range", 2: "mean motion below zero", 3: "eccentricity out of range",
                4: "semi-latus rectum below zero", 6: "orbit decayed (below the Earth's surface)"}


def _jd(dt: datetime) -> tuple[float, float]:
    return jday(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second + dt.microsecond * 1e-6)


def satrec_from_elements(el: Elements, epoch: datetime, satnum: int) -> Satrec:
    jd, fr = _jd(el.epoch or epoch)
    a = el.a_km
    n_rad_min = math.sqrt(MU_KM3_S2 / a**3) * 60.0
    sat = Satrec()
    sat.sgp4init(WGS72, "i", satnum, (jd - _SGP4_EPOCH_JD) + fr, el.bstar, 0.0, 0.0, el.eccentricity,
                 math.radians(el.arg_perigee), math.radians(el.inclination), math.radians(el.mean_anomaly),
                 n_rad_min, math.radians(el.raan))
    return sat


def satrecs(spec: OrbitsSpec) -> list[tuple[str, Satrec]]:
    """(name, Satrec) for every satellite, in `spec.satellite_names()` order."""
    epoch = spec.start()
    out: list[tuple[str, Satrec]] = []
    for entry in spec.satellites:
        name = entry.name or ""  # set wherever there is no generator (validated)
        if entry.tle:
            out.append((name, Satrec.twoline2rv(entry.tle[0], entry.tle[1])))
        elif entry.elements is not None:
            out.append((name, satrec_from_elements(entry.elements, epoch, len(out) + 1)))
        else:
            gen = entry.walker or entry.formation
            assert gen is not None  # one of tle, elements, walker, formation (validated)
            for name, el in zip(gen.names(), gen.elements()):
                out.append((name, satrec_from_elements(el, epoch, len(out) + 1)))
    return out


def time_grid(spec: OrbitsSpec) -> np.ndarray:
    """Sample times (s from the epoch): 0, step, 2 step, ... below duration. Sample k holds for
    [t_k, t_k + step)."""
    n = max(1, math.ceil(spec.duration / spec.step - 1e-9))
    return np.arange(n, dtype=np.float64) * spec.step


def gmst(jd: np.ndarray, fr: np.ndarray) -> np.ndarray:
    """Greenwich mean sidereal angle (rad), IAU-82 (the model SGP4's TEME frame is defined with)."""
    tut1 = ((jd - 2451545.0) + fr) / 36525.0
    sec = (-6.2e-6 * tut1**3 + 0.093104 * tut1**2 + (876600.0 * 3600 + 8640184.812866) * tut1 + 67310.54841)
    return np.mod(np.radians(sec / 240.0), 2 * np.pi)


def satellite_positions(recs: list[tuple[str, Satrec]], epoch: datetime, times: np.ndarray) -> np.ndarray:
    """TEME positions (T, N, 3) km. A satellite SGP4 cannot fly (decayed, bad elements) is a SpecError
    naming it and the time."""
    if not recs:
        return np.zeros((len(times), 0, 3))
    jd0, fr0 = _jd(epoch)
    jd = np.full(len(times), jd0)
    fr = fr0 + times / 86400.0
    err, r, _v = SatrecArray([s for _, s in recs]).sgp4(jd, fr)
    if err.any():
        i, k = map(int, np.argwhere(err)[0])
        code = int(err[i, k])
        raise SpecError(f"orbits: node {recs[i][0]!r}: SGP4 error {code} at t={times[k]:g} s: "
                        f"{_SGP4_ERRORS.get(code, 'propagation failed')}")
    return np.ascontiguousarray(np.transpose(r, (1, 0, 2)))


def geodetic_to_ecef(lat_deg: float, lon_deg: float, alt_km: float) -> tuple[np.ndarray, np.ndarray]:
    """WGS84 geodetic -> Earth-fixed position (km) and the local 'up' unit vector (the ellipsoid normal)."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    e2 = WGS84_F * (2 - WGS84_F)
    n = EARTH_RADIUS_KM / math.sqrt(1 - e2 * math.sin(lat) ** 2)
    pos = np.array([(n + alt_km) * math.cos(lat) * math.cos(lon), (n + alt_km) * math.cos(lat) * math.sin(lon),
                    (n * (1 - e2) + alt_km) * math.sin(lat)])
    up = np.array([math.cos(lat) * math.cos(lon), math.cos(lat) * math.sin(lon), math.sin(lat)])
    return pos, up


def ground_positions(stations: list[GroundStation], epoch: datetime, times: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """TEME positions and up vectors of the ground stations, each (T, G, 3)."""
    if not stations:
        return np.zeros((len(times), 0, 3)), np.zeros((len(times), 0, 3))
    jd0, fr0 = _jd(epoch)
    theta = gmst(np.full(len(times), jd0), fr0 + times / 86400.0)
    c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
    fixed = [geodetic_to_ecef(g.lat, g.lon, g.alt) for g in stations]
    pos_e = np.array([p for p, _ in fixed])  # (G, 3)
    up_e = np.array([u for _, u in fixed])

    def to_teme(v: np.ndarray) -> np.ndarray:
        x, y, z = v[:, 0][None, :], v[:, 1][None, :], v[:, 2][None, :]
        return np.stack([c * x - s * y, s * x + c * y, np.broadcast_to(z, (len(times), len(v)))], axis=-1)

    return to_teme(pos_e), to_teme(up_e)
