"""Pure parts of the live view of an orbit run: the ground tracks and the clock (swarm.observe.track), the DTN
store figures, and an experiment's progress in the event log."""
from __future__ import annotations

import json

import numpy as np
import pytest

from swarm.observe import track
from swarm.observe.events import EVENTS_FILE, RunEvents, follow, format_event
from swarm.observe.view import store_counts

WALKER = {"epoch": "2026-03-20T12:00:00Z", "duration": "10min", "step": "1s",
          "satellites": [{"walker": {"type": "delta", "total": 6, "planes": 2, "phasing": 1, "altitude": "550km",
                                     "inclination": 53, "prefix": "sat"}}],
          "ground_stations": [{"name": "gs01", "lat": 10.0, "lon": 20.0, "alt": "0m", "min_elevation": 10}],
          "links": {"isl": {"max_range": "5000km"}}}


@pytest.fixture(scope="module")
def spec():
    from netem.spec.orbits import parse_orbits

    return parse_orbits(WALKER)


def test_sample_times_cover_the_plan_coarsely_and_end_at_its_end():
    assert track.sample_times(600, 1).tolist() == [float(t) for t in range(0, 601, 10)]
    day = track.sample_times(86400, 1)
    assert len(day) <= track.MAX_SAMPLES + 1 and day[-1] == 86400
    assert track.sample_times(25, 30).tolist() == [0.0, 25.0]


def test_tracks_match_sgp4_at_a_sample_and_ground_stations_stay_put(spec):
    from netem.orbits.propagate import satellite_positions, satrecs

    doc = track.ground_tracks(spec)
    assert set(doc["nodes"]) == {"sat01", "sat02", "sat03", "sat04", "sat05", "sat06", "gs01"}
    assert doc["nodes"]["gs01"] == {"kind": "ground", "lat": [10.0], "lon": [20.0]}
    pos = satellite_positions(satrecs(spec), spec.start(), np.array([120.0, 125.0]))
    lat, lon = track.teme_to_latlon(pos, np.array([120.0, 125.0]), spec.start())
    doc |= {"release": 0.0, "speedup": 1.0}
    at = track.positions(doc, 120.0)["sat01"]
    assert track.great_circle_deg(at["lat"], at["lon"], lat[0, 0], lon[0, 0]) < 0.01  # a sample: exact
    between = track.positions(doc, 125.0)["sat01"]  # between samples: linear, well under a degree off
    assert track.great_circle_deg(between["lat"], between["lon"], lat[1, 0], lon[1, 0]) < 0.1
    # a low orbit's inclination bounds its latitude; its speed is ~0.06 degree per second
    lats = doc["nodes"]["sat01"]["lat"]
    assert max(abs(x) for x in lats) <= 53.5
    a, b = track.positions(doc, 0)["sat01"], track.positions(doc, 100)["sat01"]
    assert 5.0 < track.great_circle_deg(a["lat"], a["lon"], b["lat"], b["lon"]) < 8.0


def test_positions_cross_the_antimeridian_the_short_way():
    doc = {"times": [0.0, 10.0], "duration": 10.0, "release": 0.0, "speedup": 1.0,
           "nodes": {"s": {"kind": "sat", "lat": [0.0, 2.0], "lon": [178.0, -178.0]}}}
    mid = track.positions(doc, 5.0)["s"]
    assert mid["lat"] == 1.0 and abs(abs(mid["lon"]) - 180.0) < 1e-6


def test_plan_time_follows_the_wall_clock_from_the_release_and_stops_at_the_end():
    doc = {"release": 1000.0, "speedup": 10.0, "duration": 600.0}
    assert track.plan_time(doc, 990.0) == 0.0 and track.plan_time(doc, 1012.5) == 125.0
    assert track.plan_time(doc, 2000.0) == 600.0


def test_publish_writes_the_view_its_tracks_and_clock_and_never_fails(spec, tmp_path):
    track.publish(tmp_path, spec, 1234.5, 10.0)
    doc = track.read(tmp_path)
    assert doc["release"] == 1234.5 and doc["speedup"] == 10.0 and doc["duration"] == 600.0
    assert json.loads((tmp_path / track.TRACK_FILE).read_text()) == doc
    track.publish(tmp_path / "gone", spec, 1.0, 1.0)  # no state directory (the swarm went down): nothing, no error
    track.publish(tmp_path, object(), 1.0, 1.0)  # not a spec: the run goes on without a map
    assert track.read(tmp_path)["release"] == 1234.5 and track.read(tmp_path / "gone") is None


def test_publish_takes_tracks_computed_ahead_and_writes_them_with_the_clock(spec, tmp_path):
    ahead = track.ground_tracks(spec)  # the orbit driver computes them in prepare(), before a release is chosen
    track.publish(tmp_path, object(), 99.0, 2.0, ahead)  # the spec is not read again
    assert track.read(tmp_path) == ahead | {"release": 99.0, "speedup": 2.0}


def test_store_counts_from_the_agents_status_store_answer():
    entries = ['dtn://sat01/in-745000000-0 {"ForwardPending"}', "dtn://sat02/in-745000001-0 {Deleted}",
               'dtn://sat03/in-745000002-0 {"ForwardPending", "Contraindicated"}', "dtn://x/in-1-0 {}"]
    assert store_counts(entries) == {"bundles": 3, "forward_pending": 2}
    assert store_counts([]) == {"bundles": 0, "forward_pending": 0}


def test_run_events_keep_messages_and_thin_progress_out_per_phase(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("swarm.observe.events.time.monotonic", lambda: clock[0])
    watched = RunEvents([tmp_path, tmp_path / "not-up"], "walker-dtn", every=2.0)
    watched.message("run folder: results/x")
    watched.progress(0, 60, "step t=1 s: 2 link(s) on 3 node(s)")
    watched.progress(0.5, 60, "step t=2 s: 1 link(s) on 2 node(s)")  # same phase, 0 s later: left out
    clock[0] += 2.5
    watched.progress(2.5, 60, "step t=25 s: 1 link(s) on 2 node(s)")
    watched.progress(2.6, 60, "plan's last interval")  # a new phase: at once
    got = list(follow(tmp_path, once=True))
    assert [e.get("what", e.get("message")) for e in got] == [
        "run folder: results/x", "step t=1 s: 2 link(s) on 3 node(s)", "step t=25 s: 1 link(s) on 2 node(s)",
        "plan's last interval"]
    assert all(e["type"] == "run" and e["experiment"] == "walker-dtn" and e["cause"] == "experiment walker-dtn"
               for e in got)
    assert "step t=25 s" in format_event(got[2]) and "(2/60)" in format_event(got[2])
    assert not (tmp_path / "not-up" / EVENTS_FILE).exists()


def test_mesh_events_read_as_one_line():
    from swarm.observe.events import event

    ok = format_event(event("mesh", state="converged", converge_s=1.25))
    bad = format_event(event("mesh", state="not converged", converge_s="", problem="sat03: no route to sat01"))
    assert "mesh converged in 1.25 s" in ok and "mesh not converged: sat03: no route to sat01" in bad


# ------------------------------------------------------------------------------------------------ capture:
def test_an_experiments_capture_section_is_taken_out_and_checked():
    from swarm.errors import SpecError
    from swarm.observe.runcapture import check_names, take_section

    doc = {"type": "orbits", "capture": {"links": [["sat01", "sat10"]], "nodes": ["gs01", {"node": "sat03",
                                         "iface": "ground"}], "snaplen": 128, "ring": {"size": "10MB", "files": 4}}}
    section = take_section(doc, "x.yaml")
    assert "capture" not in doc and section.links == [("sat01", "sat10")] and section.snaplen == 128
    assert [(n.node, n.iface) for n in section.nodes] == [("gs01", "isl"), ("sat03", "ground")]
    assert section.ring.size == 10_000_000 and section.ring.files == 4
    assert take_section({"type": "orbits"}, "x.yaml") is None
    check_names(section, ["sat01", "sat03", "sat10", "gs01"], "x.yaml")
    for bad, named in (({"links": [["sat01"]]}, "links"), ({"nodes": [{"node": "a", "iface": "eth9"}]}, "eth9"),
                       ({"snaplen": -1}, "snaplen"), ({"ring": {"size": "10", "files": 4}}, "1kB"), ({}, "at least one"),
                       ({"link": [["a", "b"]]}, "link")):
        with pytest.raises(SpecError, match=named) as exc:
            take_section({"capture": bad}, "x.yaml")
        assert "\n" not in str(exc.value)
    with pytest.raises(SpecError, match="'sat99' is not a node"):
        check_names(take_section({"capture": {"links": [["sat01", "sat99"]]}}, "x.yaml"), ["sat01"], "x.yaml")
    with pytest.raises(SpecError, match="two different"):
        check_names(take_section({"capture": {"links": [["sat01", "sat01"]]}}, "x.yaml"), ["sat01"], "x.yaml")
