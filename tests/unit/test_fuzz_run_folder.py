"""Fuzzed run folders (issue 40): random and truncated versions of what a run folder and a swarm's state folder
hold -- tests.csv and the other tables, experiment.yaml, events.jsonl, orbit.json, state.json -- through the
code that reads them back (`--resume`, the event followers, the view's tracks, the swarm state). Every case
ends in a result or one SpecError line (a clean skip for the log and the tracks), never another exception,
and `--resume` never loses a row: what leaves a table is in `<table>.dropped`. Fixed seed, a few seconds."""
from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from experiments.runs import open_run
from experiments.store import ResultsStore
from swarm.errors import SpecError
from swarm.observe import track
from swarm.observe.events import EVENTS_FILE, follow, format_event
from swarm.runtime.backends import swarm_dir
from swarm.runtime.state import StateError, forget_state, read_state

SEED = 20261126
REPO = Path(__file__).resolve().parents[2]
VALUES = [None, 0, -1, 1e308, float("nan"), float("inf"), True, "", "x", "ünï", "a" * 500, [], [1, [2]], {}, {"t": 1}]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random damage: truncated, bytes flipped, random bytes inserted, a line repeated or dropped."""
    how = rng.randrange(5)
    if how == 0 or not data:
        return data[:rng.randrange(len(data) + 1)]
    if how == 1:
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if how == 2:
        at = rng.randrange(len(data) + 1)
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + data[at:]
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    return b"\n".join(lines[:i] + ([lines[i]] * 3 if how == 3 else []) + lines[i + 1:])


def mutate_json(doc, rng: random.Random):
    """The document with one value somewhere replaced by a random one (or a key removed)."""
    doc = json.loads(json.dumps(doc))
    node, key = None, None
    cur = doc
    for _ in range(rng.randint(1, 5)):
        keys = list(cur) if isinstance(cur, dict) else list(range(len(cur))) if isinstance(cur, list) else []
        if not keys:
            break
        node, key = cur, rng.choice(keys)
        cur = cur[key]
    if node is None:
        return rng.choice(VALUES)
    if isinstance(node, dict) and rng.random() < 0.2:
        del node[key]
    else:
        node[key] = rng.choice(VALUES)
    return doc


def _rows(path: Path) -> Counter | None:
    """The rows of a table (None: not UTF-8 CSV, which resume must refuse)."""
    if not path.exists():
        return Counter()
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return Counter(tuple(r) for r in list(csv.reader(f))[1:])
    except (UnicodeDecodeError, csv.Error):
        return None


def _run_folder(root: Path, rng: random.Random) -> Path:
    run = root / "run"
    run.mkdir(parents=True)
    (run / "experiment.yaml").write_text((REPO / "experiments" / "dtn-chain.yaml").read_text())
    store = ResultsStore(run)
    store.append("bundles.csv", ["run_id", "test_id", "src"], [{"test_id": f"t{i % 3}", "src": i} for i in range(30)])
    store.append("faults.csv", ["run_id", "test_id", "kind"], [{"test_id": "t1", "kind": "cut"}])
    store.append("mesh.csv", ["run_id", "test_id", "event"], [{"test_id": "", "event": "up"}])
    for t in ("t0", "t1"):
        store.append_test({"run_id": "r", "test_id": t})
    return run


@pytest.mark.parametrize("target", ["tests.csv", "bundles.csv", "experiment.yaml"])
def test_resume_of_a_damaged_run_folder_is_one_line_or_loses_no_row(tmp_path, target):
    rng = random.Random(f"{SEED}-{target}")
    for case in range(40):
        run = _run_folder(tmp_path / str(case), rng)
        path = run / target
        path.write_bytes(mutate(path.read_bytes(), rng))
        tables = {p.name: _rows(p) for p in run.glob("*.csv") if p.name != "tests.csv"}
        try:
            _kind, _exp, store = open_run(None, str(run), tmp_path / "results", None, "run")
            store.drop_incomplete_flows()
        except SpecError as exc:
            assert "\n" not in str(exc) and str(exc), (case, str(exc))
            continue
        assert None not in tables.values(), (case, "an unreadable table was not refused")
        for name, rows in tables.items():  # nothing lost: kept + moved aside == before
            assert _rows(run / name) + _rows(run / (name + ".dropped")) == rows, (case, name)


def test_followers_skip_damaged_event_logs_cleanly(tmp_path):
    rng = random.Random(f"{SEED}-events")
    good = b"".join(json.dumps(ev).encode() + b"\n" for ev in [
        {"t": 1.5, "type": "link", "src": "sat01", "dst": "sat02", "state": "cut", "conditions": "", "cause": "c"},
        {"t": 2.0, "type": "node", "node": "sat01", "state": "killed", "action": "kill", "cause": "c"},
        {"t": 2.5, "type": "run", "experiment": "e", "done": 1, "total": 3, "what": "x"},
        {"t": 3.0, "type": "mesh", "state": "converged", "converge_s": 1.2, "problem": ""}])
    for case in range(150):
        d = tmp_path / str(case)
        d.mkdir()
        if case % 2:
            lines = [json.dumps(mutate_json(json.loads(line), rng)).encode() for line in good.splitlines()]
            data = b"\n".join(lines) + b"\n"
        else:
            data = mutate(good, rng)
        (d / EVENTS_FILE).write_bytes(data)
        for ev in follow(d, once=True):
            assert isinstance(ev, dict)
            assert isinstance(format_event(ev), str)
            json.dumps(ev, allow_nan=False)  # what `swarm events --json` and the view pass on is valid JSON


def test_damaged_orbit_tracks_are_refused_in_one_line_or_shown(tmp_path):
    from swarm.observe.view import to_json
    rng = random.Random(f"{SEED}-orbit")
    doc = {"epoch": "2026-01-01T00:00:00Z", "duration": 60.0, "times": [0.0, 30.0, 60.0], "release": 1000.0,
           "speedup": 2.0, "nodes": {"sat01": {"kind": "sat", "lat": [0.0, 1.0, 2.0], "lon": [179.0, -179.5, -178.0]},
                                     "gs01": {"kind": "ground", "lat": [48.0], "lon": [11.0]}}}
    for case in range(200):
        d = tmp_path / str(case)
        d.mkdir()
        data = json.dumps(mutate_json(doc, rng)).encode() if case % 2 else mutate(json.dumps(doc).encode(), rng)
        (d / track.TRACK_FILE).write_bytes(data)
        try:
            got = track.read(d)
        except ValueError as exc:
            assert "\n" not in str(exc) and track.TRACK_FILE in str(exc), str(exc)
            continue
        if got is not None:
            where = track.positions(got, track.plan_time(got, 1010.0))
            json.loads(to_json(where))


def test_damaged_swarm_state_is_one_line_and_down_still_forgets_it(tmp_path):
    rng = random.Random(f"{SEED}-state")
    run = tmp_path / "run"
    run.mkdir()
    (run / "experiment.yaml").write_text("name: x\n")
    state = {"spec": {"name": "rfz", "nodes": 2}, "backend": "netns", "owner": str(run), "host_tag": "abcd"}
    for case in range(150):
        work = tmp_path / f"w{case}"
        d = swarm_dir(work, "rfz")
        d.mkdir(parents=True)
        data = json.dumps(mutate_json(state, rng)).encode() if case % 2 else mutate(json.dumps(state).encode(), rng)
        (d / "state.json").write_bytes(data)
        (d / EVENTS_FILE).write_text('{"t": 1, "type": "swarm", "state": "up"}\n')
        try:
            got = read_state(work, "rfz")
            assert isinstance(got, dict)
        except StateError as exc:
            assert "\n" not in str(exc), str(exc)
        assert forget_state(work, "rfz") and not d.exists()


def test_mutate_changes_what_it_is_given():
    rng = random.Random(SEED)
    data = b"run_id,test_id\nr,t0\nr,t1\n"
    assert sum(mutate(data, rng) != data for _ in range(50)) > 40
    assert io.BytesIO(data).read() == data
