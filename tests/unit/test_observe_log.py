"""Watching a swarm survives a bad event log (issue 40, item 6): a bad line is skipped and said once, the log is
read in chunks (never the whole file), a truncated log is read again from the start, and a malformed
orbit.json is answered per request in /api/state (valid JSON, NaN as null) without breaking the view."""
from __future__ import annotations

import json
import threading
import time
import tracemalloc
import urllib.request

import pytest

from swarm.observe import track
from swarm.observe.events import EVENTS_FILE, emit, follow, format_event
from swarm.observe.view import LiveState, bind
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

BAD_LINES = ['{"t": 1, "type": "link", "src": "sat01"}', "not json", "[1, 2]", '{"t": NaN, "type": "swarm"}',
             '{"type": "node", "node": "sat01", "state": "up"}', '{"t": 2, "type": "node", "node": 3, "state": "x"}']


def _strict(body: bytes):
    def refuse(name):
        raise ValueError(f"{name} in JSON")
    return json.loads(body, parse_constant=refuse)


def test_bad_event_lines_are_skipped_said_once_and_counted(tmp_path):
    emit(tmp_path, "swarm", state="up", nodes=2)
    with open(tmp_path / EVENTS_FILE, "a") as f:
        f.write("\n".join(BAD_LINES) + "\n")
    emit(tmp_path, "link", src="sat01", dst="sat02", state="cut", conditions="")
    got = list(follow(tmp_path, once=True))
    assert [e["type"] for e in got] == ["swarm", "log", "link", "log"]
    assert "line 2: a link event without dst, state; skipped" in got[1]["message"]
    assert f"{len(BAD_LINES)} bad lines skipped" in got[3]["message"]
    lines = [format_event(e) for e in got]  # `swarm events`: every line formats
    assert "sat01 -> sat02: cut" in lines[2]


def test_format_event_never_fails_on_odd_fields():
    for ev in ({"t": 1, "type": "run", "done": "x"}, {"t": "x", "type": "link"}, {"type": 5}, {}):
        assert isinstance(format_event(ev), str)


def test_a_large_log_streams_without_reading_it_whole(tmp_path):
    line = json.dumps({"t": 1.0, "type": "run", "experiment": "e", "message": "x" * 100}) + "\n"
    (tmp_path / EVENTS_FILE).write_text(line * 300_000)  # ~40 MB
    tracemalloc.start()
    try:
        stream = follow(tmp_path, once=True)
        assert next(stream)["type"] == "run"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB held before the first event"
    assert sum(1 for _ in stream) == 300_000 - 1


def test_a_truncated_log_is_read_again_from_the_start_and_said(tmp_path):
    for i in range(3):
        emit(tmp_path, "fault", kind="cut", args=[str(i)])
    polls = iter(range(200))
    stream = follow(tmp_path, poll=0.01, alive=lambda: next(polls, None) is not None)
    assert [next(stream)["args"] for _ in range(3)] == [["0"], ["1"], ["2"]]
    (tmp_path / EVENTS_FILE).write_text("")
    emit(tmp_path, "fault", kind="heal", args=["new"])
    rest = list(stream)
    assert rest[0]["type"] == "log" and "shrank" in rest[0]["message"] and "from the start" in rest[0]["message"]
    assert rest[1]["kind"] == "heal" and rest[-1]["state"] == "down"


@pytest.fixture
def view(tmp_path):
    swarm = Swarm(spec_from_dict({"name": "rfv-u", "nodes": 2, "backend": "netns"}), workdir=tmp_path)
    state = LiveState(swarm)
    state.dir.mkdir(parents=True)
    yield state
    state.stop.set()


def _run(loop, state, until, timeout=5.0):
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        time.sleep(0.02)
    return t


def test_the_view_follower_survives_a_bad_line_and_shows_what_follows(view):
    with open(view.dir / EVENTS_FILE, "a") as f:
        f.write('{"t": 1, "type": "link", "src": "sat01"}\n{"t": 1, "type": "link", "src": 1, "dst": [], "state": {}}\n')
    emit(view.dir, "link", src="sat01", dst="sat02", state="cut", conditions="")
    t = _run(view._follow, view, lambda: view.links)
    assert view.links == {("sat01", "sat02"): {"state": "cut", "conditions": ""}}
    assert t.is_alive()
    emit(view.dir, "link", src="sat01", dst="sat02", state="up", conditions="")
    _run(lambda: None, view, lambda: not view.links)
    assert view.links == {} and t.is_alive()


@pytest.mark.parametrize("doc, problem", [
    ('{"duration": 60, "release": NaN, "speedup": 1, "epoch": "e", "times": [0, 60], "nodes": {}}', "release"),
    ('{"duration": 60, "release": 0, "speedup": 1, "epoch": "e", "times": [0, 60], "nodes": 5}', "nodes"),
    ('{"duration": 60, "release": 0, "speedup": 1, "times": [0, 60], "nodes": {"sat01": {"kind": "sat", '
     '"lat": [0], "lon": [0, 1]}}}', "sat01"),
    ("[1]", "not a JSON object"),
])
def test_a_malformed_orbit_json_is_answered_per_request_and_the_state_stays_valid_json(view, doc, problem):
    (view.dir / track.TRACK_FILE).write_text(doc)
    _run(view._orbit, view, lambda: view.orbit is not None or view.orbit_problem)
    server = bind("127.0.0.1", 0, view)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        for _ in range(2):  # every request answered, not only the first
            with urllib.request.urlopen(url + "/api/state", timeout=5) as r:
                body = _strict(r.read())
            assert [n["name"] for n in body["nodes"]] == ["sat01", "sat02"]
            assert track.TRACK_FILE in body["orbit"]["error"] and problem in body["orbit"]["error"]
        with urllib.request.urlopen(url + "/api/track", timeout=5) as r:
            _strict(r.read())
    finally:
        server.shutdown()
        server.server_close()


def test_to_json_turns_nan_into_null():
    from swarm.observe.view import to_json
    assert _strict(to_json({"a": [float("nan"), float("inf"), 1.5], "b": (float("-inf"),)})) == \
        {"a": [None, None, 1.5], "b": [None]}


def test_the_event_log_is_kept_with_the_run_that_started_the_swarm(tmp_path):
    from swarm.runtime.backends import swarm_dir
    from swarm.runtime.state import forget_state, write_state
    run, other = tmp_path / "run", tmp_path / "not-a-run"
    run.mkdir()
    other.mkdir()
    (run / "experiment.yaml").write_text("name: x\n")
    for size, owner in ((2, run), (3, run), (4, other), (5, None)):  # a sweep brings the name up once per size
        write_state(tmp_path, "rfv-k", {"spec": {}, "backend": "netns", **({"owner": str(owner)} if owner else {})})
        emit(swarm_dir(tmp_path, "rfv-k"), "swarm", state="up", nodes=size)
        assert forget_state(tmp_path, "rfv-k")
    kept = [json.loads(line)["nodes"] for line in (run / "events" / "rfv-k.jsonl").read_text().splitlines()]
    assert kept == [2, 3] and list(other.iterdir()) == []


def test_an_engine_log_that_grew_a_lot_is_read_from_its_last_mib(tmp_path):
    from swarm.observe.events import LogWatch
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "sat01.linkd.log").write_text("")
    watch = LogWatch(tmp_path)
    with open(logs / "sat01.linkd.log", "a") as f:
        f.write(("x" * 99 + "\n") * 200_000)  # 20 MB of other lines, then a restart
        f.write("swarm-linkd: engine exited with status 1; restarting\n")
    tracemalloc.start()
    try:
        got = watch()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(e["type"], e["node"]) for e in got] == [("engine", "sat01")]
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB"
