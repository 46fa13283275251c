"""Where the orbit plan's nodes are, for the live view's map: ground tracks (latitude, longitude) of every node
over the plan, and the clock that maps wall time to plan time while a link-timeline driver runs.

The driver (netem.runtime.orbits) writes `<state dir>/orbit.json` when its clock starts: the tracks, the release
instant and the speedup. The view reads it and interpolates each node's position at the current plan time,
so a swarm nobody watches pays one small file per run and no thread. Why tracks sampled coarsely and
interpolated rather than SGP4 in the view: the view stays free of the orbit code, and a low orbit moves under
one degree per 10 s sample, well below a map pixel.
"""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Optional

import numpy as np
from sgp4.api import jday

from netem.orbits.propagate import gmst, satellite_positions, satrecs

TRACK_FILE = "orbit.json"
MAX_SAMPLES = 720  # per node: a 10-minute plan every 10 s, a day every 2 minutes


def sample_times(duration: float, step: float) -> np.ndarray:
    """Plan seconds the tracks are sampled at (pure): every max(10 s, step, duration / MAX_SAMPLES), and the end."""
    every = max(10.0, step, duration / MAX_SAMPLES)
    times = np.arange(0.0, duration, every)
    return np.append(times, duration) if not times.size or times[-1] < duration else times


def teme_to_latlon(pos: np.ndarray, times: np.ndarray, epoch) -> tuple[np.ndarray, np.ndarray]:
    """Geocentric latitude and longitude (degrees) of TEME positions (T, N, 3) at plan seconds `times` (pure):
    the frame turned back by the Greenwich sidereal angle. Geocentric, not geodetic: under 0.2 degrees, a map's
    pixel."""
    jd0, fr0 = jday(epoch.year, epoch.month, epoch.day, epoch.hour, epoch.minute, epoch.second + epoch.microsecond * 1e-6)
    theta = gmst(np.full(len(times), jd0), fr0 + times / 86400.0)[:, None]
    x, y, z = pos[..., 0], pos[..., 1], pos[..., 2]
    xe = np.cos(theta) * x + np.sin(theta) * y
    ye = -np.sin(theta) * x + np.cos(theta) * y
    lat = np.degrees(np.arctan2(z, np.hypot(xe, ye)))
    lon = np.degrees(np.arctan2(ye, xe))
    return lat, lon


def ground_tracks(spec) -> dict:
    """{"epoch", "duration", "times", "nodes": {name: {"kind", "lat": [...], "lon": [...]}}} of an OrbitsSpec:
    satellites sampled along the plan, ground stations fixed (one sample)."""
    epoch = spec.start()
    times = sample_times(spec.duration, spec.step)
    recs = satrecs(spec)
    nodes: dict[str, dict] = {}
    if recs:
        lat, lon = teme_to_latlon(satellite_positions(recs, epoch, times), times, epoch)
        for i, (name, _rec) in enumerate(recs):
            nodes[name] = {"kind": "sat", "lat": np.round(lat[:, i], 3).tolist(), "lon": np.round(lon[:, i], 3).tolist()}
    for g in spec.ground_stations:
        nodes[g.name] = {"kind": "ground", "lat": [g.lat], "lon": [g.lon]}
    return {"epoch": f"{epoch:%Y-%m-%dT%H:%M:%SZ}", "duration": float(spec.duration),
            "times": np.round(times, 3).tolist(), "nodes": nodes}


def publish(state_dir: Path, spec, release: float, speedup: float, tracks: dict | None = None) -> None:
    """Write the tracks and the clock for the view (atomically; never fails the caller: the run goes on
    without a map). `tracks`: ground_tracks(spec) computed ahead (1.4 s for 1,001 nodes: not between a
    release and the plan's hand-over)."""
    try:
        doc = (tracks if tracks is not None else ground_tracks(spec)) | {"release": release, "speedup": speedup}
        if state_dir.is_dir():
            tmp = state_dir / (TRACK_FILE + ".tmp")
            tmp.write_text(json.dumps(doc, separators=(",", ":")))
            os.replace(tmp, state_dir / TRACK_FILE)
    except Exception:  # noqa: BLE001 - a map is no reason to stop a run
        pass


def plan_time(doc: dict, now: float) -> float:
    """The plan second being applied at wall time `now` (pure): before the release 0, after the end the end."""
    return min(doc["duration"], max(0.0, (now - doc["release"]) * doc["speedup"]))


def _interp_lon(t: float, times: list[float], lon: list[float]) -> float:
    """Longitude at t, the short way round across the antimeridian."""
    unwrapped = np.degrees(np.unwrap(np.radians(lon)))
    value = float(np.interp(t, times, unwrapped))
    return (value + 180.0) % 360.0 - 180.0


def positions(doc: dict, t: float) -> dict[str, dict]:
    """{node: {"kind", "lat", "lon"}} at plan second t (pure), linear between samples."""
    out = {}
    times = doc["times"]
    for name, n in doc["nodes"].items():
        if len(n["lat"]) == 1:
            out[name] = {"kind": n["kind"], "lat": n["lat"][0], "lon": n["lon"][0]}
            continue
        lat = float(np.interp(t, times, n["lat"]))
        out[name] = {"kind": n["kind"], "lat": round(lat, 3), "lon": round(_interp_lon(t, times, n["lon"]), 3)}
    return out


MAX_TRACK_BYTES = 64 << 20  # 1,000 nodes x 720 samples is ~15 MB


def read(state_dir: Path) -> Optional[dict]:
    """The published tracks and clock, None when there are none (no orbit run) or the file is being replaced;
    ValueError (one line naming the file) for one that is not tracks (swarm.observe.track.check)."""
    path = state_dir / TRACK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        data = f.read(MAX_TRACK_BYTES + 1)
    if len(data) > MAX_TRACK_BYTES:
        raise ValueError(f"{path}: larger than {MAX_TRACK_BYTES >> 20} MiB")
    try:
        doc = json.loads(data, parse_constant=lambda c: None)  # NaN/Infinity: null, refused by check() below
    except (ValueError, RecursionError):
        return None  # being written (publish replaces it atomically, but a copy or an old version may not)
    problem = check(doc)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return doc


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check(doc) -> str:
    """What makes `doc` no tracks document (pure), "" when it is one: finite numbers for the clock, sample
    times, and per node a kind and as many finite latitudes and longitudes as times (or one: a ground station)."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    bad = [k for k in ("duration", "release", "speedup") if not _finite(doc.get(k))]
    if bad:
        return f"{bad[0]}: not a finite number"
    times, nodes = doc.get("times"), doc.get("nodes")
    if not isinstance(times, list) or not times or not all(_finite(t) for t in times):
        return "times: not a list of finite numbers"
    if not isinstance(nodes, dict):
        return "nodes: not a JSON object"
    for name, n in nodes.items():
        if not isinstance(n, dict) or not isinstance(n.get("kind"), str):
            return f"node {name!r}: no kind"
        lat, lon = n.get("lat"), n.get("lon")
        if not (isinstance(lat, list) and isinstance(lon, list) and len(lat) == len(lon) and len(lat) in (1, len(times))
                and all(_finite(v) for v in lat + lon)):
            return f"node {name!r}: lat/lon not {len(times)} (or 1) finite numbers each"
    return ""


def great_circle_deg(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Angle between two points on the sphere (degrees): how far a shown position is from the truth."""
    p1, p2, dl = math.radians(lat1), math.radians(lat2), math.radians(lon2 - lon1)
    c = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(dl)
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))
