"""Orbits -> link timeline (pure, vectorised over time x pairs).

Per step and pair: distance, line of sight (the straight segment clears a sphere of Earth radius + the
atmosphere margin), the link policy (ISL range, nearest-k degree, ground elevation mask, per-station link
limit, link budget), one-way delay = distance / propagation speed. The samples are run-length encoded per
pair into a timeline with one row per interval in which the link's state, delay bin and rate hold:

    t_start, t_end   s from the plan's epoch; the row holds for [t_start, t_end)
    a, b             node names, a before b in the plan's node order (satellites, then ground stations)
    kind             isl | ground
    up               the link exists (line of sight and policy)
    delay_ms         one-way delay: the middle of the row's smallest and largest sample (NaN when down),
                     so within delay_resolution/2 of every sample of the row (a row never leaves its
                     delay bin, delay_resolution wide)
    rate             bit/s (0: not managed / unlimited); floored to the rate model's step
    distance_km      the distance that delay_ms corresponds to

Only pairs that are up at some time get rows (covering the whole plan); every other pair is down
throughout. Time is processed in chunks, each chunk is run-length encoded for the pairs up inside it, and
the chunks' segments are stitched: memory is one chunk plus the segments, whatever the duration.
"""
from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from netem.orbits.propagate import ground_positions, satellite_positions, satrecs, time_grid
from netem.spec.orbits import OrbitsSpec, RateModel, load_orbits_file
from netem.spec.satellites import EARTH_RADIUS_KM

COLUMNS = ["t_start", "t_end", "a", "b", "kind", "up", "delay_ms", "rate", "distance_km"]
_CHUNK_ELEMENTS = 2_000_000  # samples x node pairs per chunk: ~16 MB per float64 matrix


@dataclass
class Plan:
    """The planner's output: the timeline and what it was computed from."""

    nodes: list[str]
    kinds: dict[str, str]  # name -> "sat" | "ground"
    epoch: datetime
    step: float
    duration: float
    speed_km_s: float
    timeline: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ views
    def at(self, t: float) -> datetime:
        return self.epoch + timedelta(seconds=float(t))

    def links(self) -> list[tuple[str, str]]:
        """Every pair that is up at some time."""
        tl = self.timeline
        return sorted(set(zip(tl["a"], tl["b"])), key=lambda p: (self.nodes.index(p[0]), self.nodes.index(p[1])))

    def never_up(self, nodes: Optional[list[str]] = None) -> list[tuple[str, str]]:
        """Pairs among `nodes` (default: all plan nodes) that the plan never connects."""
        nodes = [n for n in (nodes or self.nodes) if n in self.kinds]
        ever = set(self.links())
        order = {n: i for i, n in enumerate(self.nodes)}
        nodes = sorted(nodes, key=order.__getitem__)
        return [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:] if (a, b) not in ever]

    def contacts(self) -> pd.DataFrame:
        """Up intervals merged across delay/rate changes: one row per contact window (a pass)."""
        tl = self.timeline
        cols = ["a", "b", "kind", "t_start", "t_end", "duration_s", "delay_min_ms", "delay_max_ms", "rate_min",
                "rate_max"]
        up = tl[tl["up"]].sort_values(["a", "b", "t_start"])
        if up.empty:
            return pd.DataFrame(columns=cols)
        same_pair = (up["a"].values[1:] == up["a"].values[:-1]) & (up["b"].values[1:] == up["b"].values[:-1])
        contiguous = np.isclose(up["t_start"].values[1:], up["t_end"].values[:-1])
        new = np.concatenate([[True], ~(same_pair & contiguous)])
        gid = np.cumsum(new)
        out = up.groupby(gid).agg(a=("a", "first"), b=("b", "first"), kind=("kind", "first"),
                                  t_start=("t_start", "min"), t_end=("t_end", "max"),
                                  delay_min_ms=("delay_ms", "min"), delay_max_ms=("delay_ms", "max"),
                                  rate_min=("rate", "min"), rate_max=("rate", "max"))
        out["duration_s"] = out["t_end"] - out["t_start"]
        return out[cols].sort_values(["t_start", "a", "b"]).reset_index(drop=True)

    def steps(self) -> Iterator[tuple[float, pd.DataFrame]]:
        """(t, rows starting at t) in time order: what a live driver applies at each step. The rows at t=0
        are the initial state of every pair that is ever up."""
        tl = self.timeline.sort_values(["t_start", "a", "b"], kind="stable")
        for t, rows in tl.groupby("t_start", sort=True):
            yield float(t), rows

    def summary(self) -> dict:
        tl = self.timeline
        c = self.contacts()
        n_steps = self.stats.get("steps", 0)
        changes = tl.groupby("t_start").size()
        changes = changes[changes.index > 0]
        return {
            "epoch": f"{self.epoch:%Y-%m-%dT%H:%M:%SZ}",
            "duration_s": self.duration, "step_s": self.step, "steps": n_steps,
            "satellites": sum(1 for k in self.kinds.values() if k == "sat"),
            "ground_stations": sum(1 for k in self.kinds.values() if k == "ground"),
            "pairs_ever_up": len(self.links()),
            "isl_pairs_ever_up": int(tl.loc[tl["kind"] == "isl", ["a", "b"]].drop_duplicates().shape[0]),
            "ground_pairs_ever_up": int(tl.loc[tl["kind"] == "ground", ["a", "b"]].drop_duplicates().shape[0]),
            "timeline_rows": len(tl),
            "contacts": len(c),
            "ground_passes": int((c["kind"] == "ground").sum()) if len(c) else 0,
            "steps_with_changes": int(len(changes)),
            "max_changes_per_step": int(changes.max()) if len(changes) else 0,
            "delay_ms_min": float(tl["delay_ms"].min()) if tl["up"].any() else None,
            "delay_ms_max": float(tl["delay_ms"].max()) if tl["up"].any() else None,
            "planning_s": self.stats.get("planning_s"),
        }


# ----------------------------------------------------------------------------------------- rates
def _rates(model: Optional[RateModel], dist_km: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """(rate bit/s int64, closes mask or None). No model: 0 (unmanaged)."""
    if model is None:
        return np.zeros(dist_km.shape, dtype=np.int64), None
    if not model.is_budget:
        return np.full(dist_km.shape, model.fixed, dtype=np.int64), None
    assert model.snr is not None and model.at is not None and model.bandwidth is not None  # a budget has all three
    snr = 10 ** (model.snr / 10) * (model.at / np.maximum(dist_km, 1e-3)) ** 2  # free space: SNR ~ 1/d^2
    cap = model.bandwidth * np.log2(1 + snr)  # Shannon
    if model.max:
        cap = np.minimum(cap, model.max)
    q = model.quantum()
    rate = (np.floor(cap / q) * q).astype(np.int64)
    closes = rate >= max(model.min, 1)
    return rate, closes


# --------------------------------------------------------------------------------------- planning
def plan(spec: OrbitsSpec, chunk_elements: int = _CHUNK_ELEMENTS) -> Plan:
    """Propagate, decide visibility per step and pair, and run-length encode the link timeline."""
    t0 = _time.perf_counter()
    epoch = spec.start()
    times = time_grid(spec)
    n_t = len(times)
    recs = satrecs(spec)
    sat_names = [n for n, _ in recs]
    gs = list(spec.ground_stations)
    nodes = sat_names + [g.name for g in gs]
    kinds = {n: "sat" for n in sat_names} | {g.name: "ground" for g in gs}
    n_s, n_g = len(sat_names), len(gs)
    pos = satellite_positions(recs, epoch, times)  # (T, S, 3)
    gpos, gup = ground_positions(gs, epoch, times)  # (T, G, 3)
    t_prop = _time.perf_counter() - t0

    pol = spec.links
    r_block2 = (EARTH_RADIUS_KM + pol.atmosphere_margin) ** 2
    iu, ju = np.triu_indices(n_s, 1)
    n_isl = len(iu) if pol.isl.enabled else 0
    n_gnd = n_g * n_s if pol.ground.enabled else 0
    # pair table: ISL (i<j) first, then (sat s, station g) station-major
    pair_a = np.concatenate([iu[:n_isl], np.tile(np.arange(n_s), n_g)[:n_gnd]]).astype(np.int64)
    pair_b = np.concatenate([ju[:n_isl], (n_s + np.repeat(np.arange(n_g), n_s))[:n_gnd]]).astype(np.int64)
    sin_min_el = np.sin(np.radians([g.min_elevation if g.min_elevation is not None else pol.ground.min_elevation
                                    for g in gs]))

    per_step = max(1, n_s * n_s + n_g * n_s)
    chunk = max(1, min(n_t, chunk_elements // per_step))
    segs: list[dict] = []
    for c0 in range(0, n_t, chunk):
        c1 = min(n_t, c0 + chunk)
        up_parts, dist_parts, rate_parts = [], [], []
        if n_isl:
            up, dist, rate = _isl_chunk(pos[c0:c1], iu, ju, r_block2, pol)
            up_parts.append(up)
            dist_parts.append(dist)
            rate_parts.append(rate)
        if n_gnd:
            up, dist, rate = _ground_chunk(pos[c0:c1], gpos[c0:c1], gup[c0:c1], sin_min_el, pol)
            up_parts.append(up)
            dist_parts.append(dist)
            rate_parts.append(rate)
        if not up_parts:
            continue
        up = np.concatenate(up_parts, axis=1)
        idx = np.flatnonzero(up.any(axis=0))
        if len(idx):
            dist = np.concatenate(dist_parts, axis=1)[:, idx]
            rate = np.concatenate(rate_parts, axis=1)[:, idx]
            segs.append(_chunk_segments(c0, idx, up[:, idx], dist, rate, spec))
    t_vis = _time.perf_counter() - t0 - t_prop

    timeline = _encode(segs, n_t, spec, nodes, pair_a, pair_b, n_isl)
    stats = {"steps": n_t, "pairs_considered": int(n_isl + n_gnd), "chunk_steps": chunk,
             "propagate_s": round(t_prop, 4), "visibility_s": round(t_vis, 4),
             "planning_s": round(_time.perf_counter() - t0, 4)}
    return Plan(nodes=nodes, kinds=kinds, epoch=epoch, step=spec.step, duration=spec.duration,
                speed_km_s=spec.propagation_speed, timeline=timeline, warnings=spec.warnings(), stats=stats)


def _isl_chunk(p: np.ndarray, iu: np.ndarray, ju: np.ndarray, r_block2: float, pol):
    """ISL up/distance/rate (Tc, pairs) for satellite positions p (Tc, S, 3). Everything is computed on
    the pair list (i < j) from the Gram matrix; only the nearest-k selection needs a full matrix."""
    n_s = p.shape[1]
    gram = np.matmul(p, np.transpose(p, (0, 2, 1)))  # (Tc, S, S), BLAS
    n2 = np.einsum("tii->ti", gram)
    g = gram[:, iu, ju]
    n2i, n2j = n2[:, iu], n2[:, ju]
    d2 = np.maximum(n2i + n2j - 2 * g, 0.0)
    # closest approach of the segment p_i -> p_j to the Earth's centre: p_i + t (p_j - p_i), t in [0, 1]
    a = n2i - g  # = -p_i . (p_j - p_i)
    with np.errstate(divide="ignore", invalid="ignore"):
        ts = np.clip(np.where(d2 > 0, a / d2, 0.0), 0.0, 1.0)
    ok = (n2i - 2 * ts * a + ts * ts * d2) > r_block2
    if pol.isl.max_range is not None:
        ok &= d2 <= pol.isl.max_range ** 2
    dist = np.sqrt(d2)
    rate, closes = _rates(pol.isl.rate, dist)
    if closes is not None:
        ok &= closes
    k = pol.isl.max_degree
    if k is not None and k < n_s - 1:
        dm = np.full((p.shape[0], n_s, n_s), np.inf)
        cand = np.where(ok, d2, np.inf)
        dm[:, iu, ju] = cand
        dm[:, ju, iu] = cand
        kth = np.partition(dm, k - 1, axis=2)[:, :, k - 1]  # (Tc, S): each node's k-th nearest candidate
        ok &= (cand <= kth[:, iu]) & (cand <= kth[:, ju])  # mutual nearest-k: no node exceeds k links
    return ok, dist, rate


def _ground_chunk(p: np.ndarray, g: np.ndarray, up: np.ndarray, sin_min_el: np.ndarray, pol):
    """Ground link up/distance/rate (Tc, G*S), station-major, for sats p (Tc,S,3), stations g, up (Tc,G,3)."""
    v = p[:, None, :, :] - g[:, :, None, :]  # (Tc, G, S, 3)
    rng = np.sqrt(np.einsum("tgsd,tgsd->tgs", v, v))
    sin_el = np.einsum("tgsd,tgd->tgs", v, up) / rng
    ok = sin_el >= sin_min_el[None, :, None]
    rate, closes = _rates(pol.ground.rate, rng)
    if closes is not None:
        ok &= closes
    k = pol.ground.max_links
    n_s = p.shape[1]
    if k is not None and k < n_s:
        score = np.where(ok, -sin_el, np.inf)
        kth = np.partition(score, k - 1, axis=2)[:, :, k - 1:k]
        ok &= score <= kth
    tc = p.shape[0]
    return ok.reshape(tc, -1), rng.reshape(tc, -1), rate.reshape(tc, -1)


def _chunk_segments(c0: int, idx: np.ndarray, up: np.ndarray, dist: np.ndarray, rate: np.ndarray,
                    spec: OrbitsSpec) -> dict:
    """Run-length encode one chunk (Tc, K) of the pairs `idx`: segments where up, delay bin and rate hold."""
    tc, k = up.shape
    res_km = spec.links.delay_resolution / 1000.0 * spec.propagation_speed  # delay bin width in km
    dbin = np.where(up, np.floor(np.where(up, dist, 0.0) / res_km), -1).astype(np.int64)
    rkey = np.where(up, rate, -1)
    change = np.ones((tc, k), dtype=bool)
    change[1:] = (up[1:] != up[:-1]) | (dbin[1:] != dbin[:-1]) | (rkey[1:] != rkey[:-1])
    starts = np.flatnonzero(change.T)  # pair-major: each pair's samples contiguous
    lengths = np.diff(np.append(starts, tc * k))
    col, t_local = starts // tc, starts % tc
    dmin = np.minimum.reduceat(np.where(up, dist, np.inf).T.ravel(), starts)
    dmax = np.maximum.reduceat(np.where(up, dist, -np.inf).T.ravel(), starts)
    return {"pid": idx[col], "t0": c0 + t_local, "n": lengths, "up": up[t_local, col],
            "dbin": dbin[t_local, col], "rate": rkey[t_local, col], "dmin": dmin, "dmax": dmax}


def _encode(segs: list[dict], n_t: int, spec: OrbitsSpec, nodes: list[str], pair_a: np.ndarray,
            pair_b: np.ndarray, n_isl: int) -> pd.DataFrame:
    """Chunks' segments -> one timeline: gaps (chunks where a pair was down throughout) become down
    segments, and equal neighbours across chunk boundaries merge."""
    if not segs:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
            COLUMNS, ["float64", "float64", "object", "object", "object", "bool", "float64", "int64", "float64"])})
    cat = {key: np.concatenate([sg[key] for sg in segs]) for key in segs[0]}
    order = np.lexsort((cat["t0"], cat["pid"]))
    cat = {key: v[order] for key, v in cat.items()}
    pid, t0, end = cat["pid"], cat["t0"], cat["t0"] + cat["n"]
    first = np.ones(len(pid), dtype=bool)
    first[1:] = pid[1:] != pid[:-1]
    last = np.ones(len(pid), dtype=bool)
    last[:-1] = pid[1:] != pid[:-1]
    expected = np.where(first, 0, np.concatenate([[0], end[:-1]]))
    gap = t0 > expected
    tail = last & (end < n_t)
    fill_pid = np.concatenate([pid[gap], pid[tail]])
    fill_t0 = np.concatenate([expected[gap], end[tail]])
    fill_n = np.concatenate([t0[gap] - expected[gap], n_t - end[tail]])
    m = len(fill_pid)
    if m:
        cat = {"pid": np.concatenate([pid, fill_pid]), "t0": np.concatenate([t0, fill_t0]),
               "n": np.concatenate([cat["n"], fill_n]), "up": np.concatenate([cat["up"], np.zeros(m, bool)]),
               "dbin": np.concatenate([cat["dbin"], np.full(m, -1)]),
               "rate": np.concatenate([cat["rate"], np.full(m, -1)]),
               "dmin": np.concatenate([cat["dmin"], np.full(m, np.inf)]),
               "dmax": np.concatenate([cat["dmax"], np.full(m, -np.inf)])}
        order = np.lexsort((cat["t0"], cat["pid"]))
        cat = {key: v[order] for key, v in cat.items()}
    pid = cat["pid"]
    new = np.ones(len(pid), dtype=bool)
    new[1:] = ((pid[1:] != pid[:-1]) | (cat["up"][1:] != cat["up"][:-1]) | (cat["dbin"][1:] != cat["dbin"][:-1])
               | (cat["rate"][1:] != cat["rate"][:-1]))
    heads = np.flatnonzero(new)
    n = np.add.reduceat(cat["n"], heads)
    with np.errstate(invalid="ignore"):  # down segments: inf + -inf, masked below
        mid_dist = (np.minimum.reduceat(cat["dmin"], heads) + np.maximum.reduceat(cat["dmax"], heads)) / 2
    t_idx, pid, seg_up, rate = cat["t0"][heads], pid[heads], cat["up"][heads], cat["rate"][heads]
    names = np.array(nodes, dtype=object)
    df = pd.DataFrame({
        "t_start": t_idx * spec.step,
        "t_end": np.minimum((t_idx + n) * spec.step, spec.duration),
        "a": names[pair_a[pid]],
        "b": names[pair_b[pid]],
        "kind": np.where(pid < n_isl, "isl", "ground").astype(object),
        "up": seg_up,
        "delay_ms": np.where(seg_up, np.round(mid_dist / spec.propagation_speed * 1000.0, 6), np.nan),
        "rate": np.where(seg_up, rate, 0).astype(np.int64),
        "distance_km": np.where(seg_up, np.round(mid_dist, 3), np.nan),
    })
    return df.sort_values(["t_start", "a", "b"], kind="stable").reset_index(drop=True)


def plan_file(path) -> Plan:
    return plan(load_orbits_file(path))
