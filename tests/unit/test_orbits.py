"""Orbit planner (netem/orbits): known geometry, policy, run-length encoding, exports, bad input."""
from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from netem.orbits.export import to_hdtn, to_ion
from netem.orbits.planner import plan
from netem.spec.orbits import parse_orbits
from netem.spec.satellites import tle_epoch
from swarm.dtn.contacts import parse_contact_plan
from swarm.errors import SpecError

# The ISS element set used as the example in the TLE format's own documentation (checksums valid).
ISS = ["1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927",
       "2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537"]
C = 299_792.458


def _plan(**orbits):
    return plan(parse_orbits(orbits))


# ------------------------------------------------------------------------------------ known geometry
def test_two_nodes_half_an_orbit_apart_are_never_visible():
    p = _plan(duration="100min", satellites=[
        {"name": "a", "elements": {"altitude": "550km", "inclination": 53}},
        {"name": "b", "elements": {"altitude": "550km", "inclination": 53, "mean_anomaly": 180}}])
    assert p.timeline.empty
    assert p.never_up() == [("a", "b")]


def test_along_track_pair_100km_apart_has_0_334_ms_delay():
    p = _plan(duration="95min", satellites=[{"formation": {"count": 2, "spacing": "100km", "altitude": "500km",
                                                           "inclination": 97.4, "prefix": "ff"}}])
    tl = p.timeline
    assert list(zip(tl.a, tl.b)) == [("ff01", "ff02")]
    assert tl.up.all() and tl.t_start.min() == 0 and tl.t_end.max() == 95 * 60
    assert tl.delay_ms.iloc[0] == pytest.approx(100 / C * 1000, abs=0.001)  # 0.3336 ms
    assert round(tl.delay_ms.iloc[0], 3) == 0.334


def test_ground_pass_over_leo_lasts_the_textbook_minutes():
    # A polar orbit passes straight over a station at the pole whatever the Earth's rotation, so the pass
    # is the full arc where elevation >= 10 deg: 2*lambda/(2*pi) * T, lambda = acos(rg cos e / r) - e.
    p = _plan(duration="100min", satellites=[{"name": "leo", "elements": {"altitude": "550km", "inclination": 90}}],
              ground_stations=[{"name": "pole", "lat": 90, "lon": 0, "min_elevation": 10}])
    passes = p.contacts()
    assert len(passes) == 1
    r, rg, e = 6378.137 + 550, 6356.752, math.radians(10)
    lam = math.acos(rg * math.cos(e) / r) - e
    textbook = 2 * lam / (2 * math.pi) * 2 * math.pi * math.sqrt(r**3 / 398600.4418)
    assert 7.5 * 60 < textbook < 8.5 * 60
    assert passes.duration_s.iloc[0] == pytest.approx(textbook, rel=0.02)
    # closest approach straight overhead: ~ altitude above the pole; far end at 10 deg elevation
    assert passes.delay_min_ms.iloc[0] == pytest.approx((r - rg) / C * 1000, rel=0.03)


def test_ground_pass_times_agree_with_skyfield():
    """An independent implementation (Skyfield's find_events on the same TLE) finds the same pass."""
    skyfield = pytest.importorskip("skyfield.api")
    ts = skyfield.load.timescale(builtin=True)
    sat = skyfield.EarthSatellite(ISS[0], ISS[1], "iss", ts)
    station = skyfield.wgs84.latlon(0.0, 0.0)  # under the ISS's track at some point of a day
    start = tle_epoch(ISS[0]).replace(microsecond=0)
    t0, t1 = ts.from_datetime(start), ts.from_datetime(start + timedelta(days=1))
    times, events = sat.find_events(station, t0, t1, altitude_degrees=10.0)
    rises = [t.utc_datetime() for t, ev in zip(times, events) if ev == 0]
    sets = [t.utc_datetime() for t, ev in zip(times, events) if ev == 2]
    assert rises and sets
    rise = rises[0]
    setting = next(s for s in sets if s > rise)
    p = _plan(epoch=start.isoformat(), duration="1d", step="1s", satellites=[{"name": "iss", "tle": ISS}],
              ground_stations=[{"name": "gs", "lat": 0, "lon": 0, "min_elevation": 10}])
    c = p.contacts()
    first = c.iloc[0]
    assert (p.at(first.t_start) - rise).total_seconds() == pytest.approx(0, abs=2)
    assert (p.at(first.t_end) - setting).total_seconds() == pytest.approx(0, abs=2)


# ----------------------------------------------------------------------------------------- policy
def test_walker_delta_pattern_and_names():
    s = parse_orbits({"satellites": [{"walker": {"type": "delta", "total": 12, "planes": 3, "phasing": 1,
                                                 "altitude": "550km", "inclination": 53}}]})
    w = s.satellites[0].walker
    assert s.node_names() == [f"sat{i:02d}" for i in range(1, 13)]
    els = w.elements()
    assert [e.raan for e in els[::4]] == [0, 120, 240]
    assert els[1].mean_anomaly == 90 and els[4].mean_anomaly == 30  # 360/4 in plane, f*360/t between planes
    star = parse_orbits({"satellites": [{"walker": {"type": "star", "total": 6, "planes": 3, "altitude": 800,
                                                    "inclination": 86.4}}]}).satellites[0].walker
    assert [e.raan for e in star.elements()[::2]] == [0, 60, 120]


def test_max_degree_is_never_exceeded_and_range_is_respected():
    p = _plan(duration="20min", satellites=[{"walker": {"total": 24, "planes": 4, "phasing": 1, "altitude": 550,
                                                        "inclination": 53}}],
              links={"isl": {"max_degree": 2, "max_range": "4000km"}})
    tl = p.timeline
    up = tl[tl.up]
    assert (up.distance_km <= 4000).all()
    for t in np.arange(0, 1200, 60.0):
        live = up[(up.t_start <= t) & (up.t_end > t)]
        degree = live.a.value_counts().add(live.b.value_counts(), fill_value=0)
        assert degree.max() <= 2


def test_timeline_rows_cover_the_plan_and_hold_delay_within_resolution():
    p = _plan(duration="30min", satellites=[{"walker": {"total": 8, "planes": 2, "altitude": 550,
                                                        "inclination": 53}}],
              ground_stations=[{"name": "gs01", "lat": 10, "lon": 20}],
              links={"delay_resolution": "0.5ms"})
    tl = p.timeline
    assert set(tl.kind) <= {"isl", "ground"}
    for (a, b), rows in tl.groupby(["a", "b"]):
        rows = rows.sort_values("t_start")
        assert rows.t_start.iloc[0] == 0 and rows.t_end.iloc[-1] == 1800
        assert np.allclose(rows.t_start.values[1:], rows.t_end.values[:-1])  # contiguous, no overlap
    # each row's delay: mean of a bin 0.5 ms wide
    up = tl[tl.up]
    assert (np.floor(up.delay_ms / 0.5) * 0.5 <= up.delay_ms + 1e-9).all()
    assert p.summary()["steps"] == 1800


def test_propagation_speed_scales_delay():
    sats = [{"formation": {"count": 2, "spacing": "1000km", "altitude": 600}}]
    fast = _plan(duration="1min", satellites=sats).timeline.delay_ms.iloc[0]
    slow = _plan(duration="1min", satellites=sats, propagation_speed="0.59c").timeline.delay_ms.iloc[0]
    assert slow == pytest.approx(fast / 0.59, rel=1e-6)


def test_link_budget_rate_falls_with_distance_and_closes_the_link():
    base = dict(duration="100min", satellites=[{"name": "leo", "elements": {"altitude": 550, "inclination": 90}}],
                ground_stations=[{"name": "pole", "lat": 90, "lon": 0, "min_elevation": 0}])
    open_ = _plan(**base, links={"ground": {"rate": {"bandwidth": "10MHz", "snr": "10dB", "at": "1000km",
                                                     "max": "100Mbit", "step": "1Mbit"}}})
    up = open_.timeline[open_.timeline.up]
    near, far = up.loc[up.distance_km.idxmin()], up.loc[up.distance_km.idxmax()]
    assert near.rate > far.rate > 0 and (up.rate % 1_000_000 == 0).all()
    # Shannon at 1000 km with 10 dB: 10 MHz * log2(11) = 34.6 Mbit/s
    mid = up.iloc[(up.distance_km - 1000).abs().argsort().iloc[0]]
    assert mid.rate == pytest.approx(34.6e6 * 1.0, rel=0.1)
    closed = _plan(**base, links={"ground": {"rate": {"bandwidth": "10MHz", "snr": "10dB", "at": "1000km",
                                                      "min": "30Mbit"}}})
    assert closed.contacts().duration_s.sum() < open_.contacts().duration_s.sum()


def test_fixed_rates_per_link_kind():
    p = _plan(duration="100min", satellites=[{"formation": {"count": 2, "spacing": "100km", "altitude": 550,
                                                            "inclination": 90}}],
              ground_stations=[{"name": "pole", "lat": 90, "lon": 0}],
              links={"isl": {"rate": "100Mbit"}, "ground": {"rate": "10Mbit", "max_links": 1}})
    up = p.timeline[p.timeline.up]
    assert set(up[up.kind == "isl"].rate) == {100_000_000}
    assert set(up[up.kind == "ground"].rate) == {10_000_000}
    # one link per station at a time: the two satellites' passes do not overlap
    g = p.contacts().query("kind == 'ground'")
    assert len(g) >= 2
    for t in np.arange(0, 6000, 5.0):
        assert ((g.t_start <= t) & (g.t_end > t)).sum() <= 1


# ----------------------------------------------------------------------------------------- TLEs
def test_tle_is_accepted_and_sets_the_default_epoch():
    s = parse_orbits({"satellites": [{"name": "iss", "tle": "\n".join(["ISS (ZARYA)"] + ISS)}]})
    assert s.start() == tle_epoch(ISS[0])
    assert s.start().strftime("%Y-%m-%d") == "2008-09-20"
    assert s.warnings() == []


def test_tle_far_from_the_epoch_warns():
    s = parse_orbits({"epoch": "2008-12-01T00:00:00Z", "satellites": [{"name": "iss", "tle": ISS}]})
    (w,) = s.warnings()
    assert "'iss'" in w and "days from its TLE epoch" in w


@pytest.mark.parametrize("lines, needle", [
    ([ISS[0][:-1] + "3", ISS[1]], "TLE line 1: bad checksum 3"),
    ([ISS[0], ISS[1][:-1] + "0"], "TLE line 2: bad checksum 0"),
    ([ISS[0], "3" + ISS[1][1:]], "TLE line 2 must start with '2 '"),
    ([ISS[0], ISS[1][:60]], "TLE line 2 has 60 characters"),
    ([ISS[0]], "TLE must be two lines"),
])
def test_bad_tle_names_node_and_line(lines, needle):
    with pytest.raises(SpecError) as err:
        parse_orbits({"satellites": [{"name": "iss", "tle": lines}]})
    assert "node 'iss'" in str(err.value) and needle in str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("orbits, needle", [
    ({"satellites": [{"name": "x", "elements": {"altitude": "-100km"}}]}, "below the Earth's surface"),
    ({"satellites": [{"name": "x", "elements": {"semi_major_axis": 7000, "eccentricity": 0.2}}]},
     "perigee -778 km is below the Earth's surface"),
    ({"step": 0, "satellites": [{"name": "x", "elements": {"altitude": 500}}]}, "orbits.step: step 0: must be positive"),
    ({"step": "-1s", "satellites": [{"name": "x", "elements": {"altitude": 500}}]}, "orbits.step: step '-1s': expected seconds"),
    ({"ground_stations": [{"name": "gs01", "lat": 95, "lon": 0}]}, "('gs01').lat: latitude 95 outside -90..90"),
    ({"satellites": [{"walker": {"total": 10, "planes": 3, "altitude": 550, "inclination": 53}}]},
     "total 10 is not a multiple of planes 3"),
    ({"satellites": [{"name": "a", "elements": {"altitude": 500}}, {"name": "a", "elements": {"altitude": 600}}]},
     "node 'a' is named twice"),
    ({"satellites": [{"name": "a", "elements": {"altitude": 500}, "tle": ISS}]}, "give exactly one of"),
    ({"satellites": [{"name": "x", "elements": {"altitude": 500, "colour": "red"}}]}, "unknown field 'colour'"),
    ({"propagation_speed": "2c", "satellites": [{"name": "x", "elements": {"altitude": 500}}]}, "at most c"),
    ({"duration": "1s", "step": "2s", "satellites": [{"name": "x", "elements": {"altitude": 500}}]},
     "longer than duration"),
])
def test_bad_input_is_one_line(orbits, needle):
    with pytest.raises(SpecError) as err:
        parse_orbits(orbits)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2


# ---------------------------------------------------------------------------------------- exports
def _walker_plan():
    return _plan(duration="30min", satellites=[{"walker": {"total": 8, "planes": 2, "phasing": 1, "altitude": 550,
                                                           "inclination": 53}}],
                 ground_stations=[{"name": "gs01", "lat": 30, "lon": 20}],
                 links={"isl": {"rate": "100Mbit", "max_range": "6000km"}, "ground": {"min_elevation": 5}})


def parse_ion(text: str) -> list[tuple]:
    """The project's one ION parser, as (kind, start, end, from, to, rate or owlt) with integer fields."""
    cp = parse_contact_plan(text, "test")
    return ([("contact", int(c.start), int(c.end), int(c.a), int(c.b), int(c.rate)) for c in cp.contacts]
            + [("range", int(r.start), int(r.end), int(r.a), int(r.b), int(r.owlt)) for r in cp.ranges])


def test_ion_contact_plan_matches_the_timeline():
    p = _walker_plan()
    text = to_ion(p)
    cmds = parse_ion(text)
    contacts = [c for c in cmds if c[0] == "contact"]
    ranges = [c for c in cmds if c[0] == "range"]
    assert contacts and ranges
    num = {n: i for i, n in enumerate(p.nodes, 1)}
    windows = p.contacts()
    for _, s, e, src, dst, rate in contacts:
        assert e > s and rate > 0
        assert (s, e, dst, src, rate) in {(c[1], c[2], c[3], c[4], c[5]) for c in contacts}  # both directions
        a, b = sorted((src, dst))
        names = [n for n, i in num.items() if i in (a, b)]
        w = windows[(windows.a.isin(names)) & (windows.b.isin(names))]
        assert ((w.t_start <= s) & (w.t_end >= e)).any()  # inside a real window
    isl_rates = {c[5] for c in contacts if "gs01" not in (p.nodes[c[3] - 1], p.nodes[c[4] - 1])}
    assert isl_rates == {100_000_000 // 8}  # ION's rate is bytes/s
    for _, s, e, a, b, owlt in ranges:
        assert a < b and owlt == 1  # LEO light time rounds up to one whole second
    assert text.splitlines()[1].startswith("# nodes: sat01=1 ")


def test_ion_origin_and_compression():
    p = _walker_plan()
    origin = datetime(2026, 11, 22, 21, 0, 0, tzinfo=timezone.utc)
    text = to_ion(p, origin=origin, speedup=10)
    assert "@ 2026/11/22-21:00:00" in text.splitlines()
    assert max(c[2] for c in parse_ion(text)) <= 180  # 30 min at x10


def test_hdtn_contact_plan():
    p = _walker_plan()
    numbers = {n: 100 + i for i, n in enumerate(p.nodes)}
    doc = json.loads(json.dumps(to_hdtn(p, numbers)))
    cs = doc["contacts"]
    assert cs and [c["contact"] for c in cs] == list(range(len(cs)))
    for c in cs:
        assert set(c) == {"contact", "source", "dest", "startTime", "endTime", "rateBitsPerSec", "owlt"}
        assert all(isinstance(v, int) for v in c.values())
        assert c["endTime"] > c["startTime"] and c["source"] >= 100
    assert len(cs) == 2 * len([x for x in parse_ion(to_ion(p)) if x[0] == "contact"]) // 2


def test_every_sample_is_within_half_a_resolution_of_its_row():
    from netem.orbits.propagate import ground_positions, satellite_positions, satrecs, time_grid
    s = parse_orbits({"duration": "100min", "links": {"delay_resolution": "0.5ms"},
                      "satellites": [{"name": "leo", "elements": {"altitude": 550, "inclination": 90}}],
                      "ground_stations": [{"name": "pole", "lat": 90, "lon": 0}]})
    p = plan(s)
    times = time_grid(s)
    sat = satellite_positions(satrecs(s), s.start(), times)[:, 0]
    gs, _ = ground_positions(s.ground_stations, s.start(), times)
    delay = np.linalg.norm(sat - gs[:, 0], axis=1) / C * 1000
    up = p.timeline[p.timeline.up]
    assert len(up) > 5
    for row in up.itertuples():
        k = slice(int(row.t_start), int(row.t_end))
        assert np.abs(delay[k] - row.delay_ms).max() <= 0.25 + 1e-9


# ------------------------------------------------------------------------------ live records (pure)
def test_parse_ping_reply_and_unanswered_lines():
    from netem.orbits.records import parse_ping
    from conftest import REPO
    df = parse_ping((REPO / "tests/data/orbits/ping-sat01-gs01.txt").read_text(), 0.2)
    assert list(df.seq[:4]) == [1, 2, 3, 4] and not df.answered[:4].any()
    late = df[df.seq == 60].iloc[0]  # reported unanswered, then answered 1008 ms later: the reply wins
    assert late.answered and late.rtt_ms == 1008 and late.sent_ts == pytest.approx(1795382810.021283 - 1.008)
    assert df[df.seq == 70].iloc[0].rtt_ms == 0.036


def test_probe_samples_against_the_plan():
    import pandas as pd
    from netem.orbits.records import against_plan
    tl = pd.DataFrame({"t_start": [0.0, 100.0, 200.0], "t_end": [100.0, 200.0, 300.0], "a": "s1", "b": "g",
                       "kind": "ground", "up": [False, True, False], "delay_ms": [float("nan"), 3.0, float("nan")],
                       "rate": 0, "distance_km": 0.0})
    samples = pd.DataFrame({"seq": [1, 2, 3], "sent_ts": [1000.5, 1015.0, 1019.8], "answered": [False, True, True],
                            "rtt_ms": [float("nan"), 6.1, 6.0]})
    out = against_plan(samples, tl, "g", "s1", release_ts=1000.0, speedup=10, margin_s=5)
    assert list(out.t_plan_s.round(3)) == [5.0, 150.0, 198.0]
    assert list(out.planned_up) == [False, True, True] and list(out.planned_delay_ms.fillna(-1)) == [-1, 3.0, 3.0]
    assert list(out.near_change) == [False, False, True]


def test_ping_argv():
    from netem.orbits.records import ping_argv
    assert ping_argv("10.230.0.3", 0.2, 60.5, "10.230.0.2") == [
        "ping", "-D", "-O", "-n", "-U", "-i", "0.2", "-W", "1", "-w", "61", "-I", "10.230.0.2", "10.230.0.3"]


# ---------------------------------------------------------------------------- experiment and CLI
def _experiment(**over):
    import yaml
    from conftest import REPO
    data = yaml.safe_load((REPO / "experiments/walker-dtn.yaml").read_text())
    data.update(over)
    return data


def test_walker_dtn_experiment_validates_and_names_the_swarm_after_the_plan():
    from experiments.orbits.model import experiment_from_dict
    exp = experiment_from_dict(_experiment(), "walker-dtn.yaml")
    names = [n.name for n in exp.swarm_spec().resolved_nodes()]
    assert names == [f"sat{i:02d}" for i in range(1, 13)] + ["gs01"]
    p = plan(exp.orbits_spec())
    assert p.contacts().query("kind == 'ground'").shape[0] >= 1  # the ground pass the example promises


@pytest.mark.parametrize("over, needle", [
    ({"probes": [["sat01", "sat99"]]}, "probes: node 'sat99' is not a node of the orbit plan"),
    ({"swarm": {"nodes": 4}}, "swarm.nodes: set by the experiment"),
    ({"speedup": 0}, "speedup"),
    ({"contact_plan_numbers": {"sat01": 1}}, "contact_plan_numbers: no number for node 'sat02'"),
])
def test_bad_orbits_experiment(over, needle):
    from experiments.orbits.model import experiment_from_dict
    with pytest.raises(SpecError) as err:
        experiment_from_dict(_experiment(**over), "x.yaml")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cli_orbits_plan_writes_the_pieces_and_bad_input_exits_2(tmp_path, capsys):
    from conftest import REPO
    from swarm.cli.main import main
    main(["orbits", "plan", str(REPO / "experiments/walker-dtn.yaml"), "--out", str(tmp_path / "p"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["satellites"] == 12 and summary["ground_passes"] == 1
    for name in ("timeline.csv", "contact-plan.ion", "contact-plan.hdtn.json", "availability.png", "passes.png"):
        assert (tmp_path / "p" / name).stat().st_size > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"orbits:\n  satellites:\n    - {{name: iss, tle: ['{ISS[0][:-1]}0', '{ISS[1]}']}}\n")
    with pytest.raises(SystemExit) as exit_:
        main(["orbits", "plan", str(bad), "--out", str(tmp_path / "q")])
    assert exit_.value.code == 2
    assert "node 'iss': TLE line 1: bad checksum 0" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


def test_swarm_spec_takes_an_orbits_section_whose_nodes_it_has():
    from swarm.spec.model import spec_from_dict
    orbits = {"satellites": [{"walker": {"total": 4, "planes": 2, "altitude": 550, "inclination": 53}}],
              "ground_stations": [{"name": "gs01", "lat": 10, "lon": 20}]}
    spec = spec_from_dict({"name": "orb-spec", "groups": [{"prefix": "sat", "count": 4}, {"prefix": "gs", "count": 1}],
                           "orbits": orbits})
    assert parse_orbits(spec.orbits).node_names() == ["sat01", "sat02", "sat03", "sat04", "gs01"]
    with pytest.raises(SpecError) as err:
        spec_from_dict({"name": "orb-spec", "nodes": 4, "orbits": orbits})
    assert "orbits: node 'gs01' is not a node of the swarm" in str(err.value)
    with pytest.raises(SpecError) as err:
        spec_from_dict({"name": "orb-spec", "nodes": 4, "orbits": {"ground_stations": [{"name": "sat01", "lat": 91,
                                                                                        "lon": 0}]}})
    assert "latitude 91 outside -90..90" in str(err.value)


def test_tc_tree_of_the_same_shape_changes_in_place():
    from netem.tc import plan_netem, plan_rate
    from netem.incremental import tc_changes
    from netem.spec.links import Impairment
    a, b = "02:42:0a:e6:00:03", "02:42:0a:e6:00:04"
    old = plan_netem("eth0", {a: Impairment(delay=5.0, rate=10_000_000), b: Impairment(delay=7.0)})
    new = plan_netem("eth0", {a: Impairment(delay=5.5, rate=20_000_000), b: Impairment(delay=7.0)})
    assert tc_changes(old, new) == [
        ["tc", "class", "change", "dev", "eth0", "parent", "5eed:", "classid", "5eed:1", "htb", "rate", "20mbit",
         "ceil", "20mbit", "quantum", "200000"],
        ["tc", "qdisc", "change", "dev", "eth0", "parent", "5eed:1", "handle", "1:", "netem", "limit", "1000",
         "delay", "5500us"]]
    assert tc_changes(old, old) == []
    # another destination, or a leaf gone: the shape changed, rebuild
    assert tc_changes(old, plan_netem("eth0", {a: Impairment(delay=5.0)})) is None
    assert tc_changes(old, plan_netem("eth0", {a: Impairment(rate=10_000_000), b: Impairment(delay=7.0)})) is None
    r1, r2 = plan_rate("eth0", {a: Impairment(rate=10_000_000)}), plan_rate("eth0", {a: Impairment(rate=15_000_000)})
    assert [c[:3] for c in tc_changes(r1, r2)] == [["tc", "class", "change"]]


def test_orbits_report_from_a_recorded_run(tmp_path):
    """A run folder recorded on this host (orb-walker at x20, nft engine: no delay applied), trimmed."""
    import shutil
    from analysis.orbits import write_orbits_report
    from conftest import REPO
    run = tmp_path / "run"
    shutil.copytree(REPO / "tests/data/orbits/run", run)
    files = write_orbits_report(run)
    md = files["report_md"].read_text()
    assert "Live link updates" in md and "Probes: does the link follow the plan?" in md
    assert "could not apply delay" in md  # the nft engine's limit is said, not hidden
    for name in ("availability.png", "delay.png", "passes.png", "lag.png", "probes.png", "contact-plan.ion"):
        assert files[name].stat().st_size > 0
