"""Resume after a crash (issue 29, defect 10), the parts that need no namespace: one process per run folder,
rows of an unfinished test dropped from every table, `run --resume` for the types that resume. The live
take-over of a killed run's swarm is tests/integration/test_resume_live.py."""
from __future__ import annotations

import csv
import subprocess
import sys
import time

import pytest
import yaml

from experiments.registry import TYPES
from experiments.store import ResultsStore
from swarm.errors import SpecError

from test_reliability import REPO, cli, one_line


def test_a_run_folder_held_by_a_live_run_is_refused(tmp_path, monkeypatch):
    from swarm.runtime.locks import run_lock
    monkeypatch.setenv("SWARM_LOCK_DIR", str(tmp_path / "locks"))
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from swarm.runtime.locks import run_lock\n"
                               "with run_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n",
                               str(run)], stdout=subprocess.PIPE, text=True, cwd=REPO,
                              env={"SWARM_LOCK_DIR": str(tmp_path / "locks"), "PATH": "/usr/bin:/bin"})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SpecError, match=rf"in progress.*pid {holder.pid}"):
            with run_lock(run):
                pass
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    time.sleep(0.1)
    with run_lock(run):  # the holder died: its lock went with it
        pass


def test_resume_drops_every_table_row_of_an_unfinished_test(tmp_path):
    store = ResultsStore(tmp_path / "run")
    store.dir.mkdir()
    store.append("bundles.csv", ["run_id", "test_id", "src"], [{"test_id": "t1"}, {"test_id": "t2"}])
    store.append("store.csv", ["run_id", "test_id", "node"], [{"test_id": "t2"}])
    store.append("mesh.csv", ["run_id", "test_id", "event"], [{"test_id": "", "event": "up"}, {"test_id": "t2"}])
    store.append("tests.csv", ["run_id", "test_id"], [{"test_id": "t1"}])  # t2 crashed before its tests.csv row
    store.drop_incomplete_flows()

    def ids(name):
        with (store.dir / name).open() as f:
            return [r["test_id"] for r in csv.DictReader(f)]
    assert ids("bundles.csv") == ["t1"] and ids("store.csv") == [] and ids("mesh.csv") == [""]
    assert ids("tests.csv") == ["t1"]


def test_dtn_runs_resume_like_sweeps():
    assert TYPES["dtn"].resumable and TYPES["dtn"].command == "run"


def test_run_resume_of_a_type_that_cannot_resume_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "experiment.yaml").write_text(yaml.safe_dump(yaml.safe_load(open(REPO / "experiments" / "dds-faults.yaml"))))
    code, _, err = cli("run", "--resume", str(run))
    assert code == 2 and "cannot be resumed" in one_line(err), err


def test_run_without_a_file_or_a_resume_folder_is_one_line():
    code, _, err = cli("run")
    assert code == 2 and "--resume" in one_line(err), err


# ---- issue 40, item 5: resume never deletes a row, refuses a tests.csv it cannot read, reads experiment.yaml bounded
def _dtn_run(tmp_path):
    """A dtn run folder with 200 bundles rows, 3 faults rows and a tests.csv as given by the caller."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "experiment.yaml").write_text((REPO / "experiments" / "dtn-chain.yaml").read_text())
    store = ResultsStore(run)
    store.append("bundles.csv", ["run_id", "test_id", "src"], [{"test_id": f"t{i % 2}", "src": i} for i in range(200)])
    store.append("faults.csv", ["run_id", "test_id", "kind"], [{"test_id": "t0", "kind": "cut"}] * 3)
    return run, store


def _table(path):
    return path.read_bytes() if path.exists() else None


def test_an_empty_tests_csv_moves_rows_aside_and_the_next_row_gets_a_header(tmp_path):
    run, store = _dtn_run(tmp_path)
    (run / "tests.csv").write_text("")
    said = store.drop_incomplete_flows()
    with (run / "bundles.csv.dropped").open() as f:
        aside = list(csv.DictReader(f))
    assert len(aside) == 200 and sorted({r["src"] for r in aside}, key=int) == [str(i) for i in range(200)]
    with (run / "faults.csv.dropped").open() as f:
        assert len(list(csv.DictReader(f))) == 3
    assert any("bundles.csv: 200 rows" in line and "bundles.csv.dropped" in line for line in said), said
    store.append_test({"run_id": "r", "test_id": "t0"})
    assert store.completed_tests() == {"t0"}  # the row came with its header: a later resume keeps t0's rows
    store.append("bundles.csv", ["run_id", "test_id", "src"], [{"test_id": "t0", "src": "again"}])
    assert store.drop_incomplete_flows() == []
    with (run / "bundles.csv").open() as f:
        assert [r["src"] for r in csv.DictReader(f)] == ["again"]


def test_moving_aside_twice_keeps_both_batches_and_extra_fields(tmp_path):
    run, store = _dtn_run(tmp_path)
    with (run / "bundles.csv").open("a") as f:
        f.write(",t9,x,extra-field\n")  # a row longer than the header keeps its extra field
    store.drop_incomplete_flows()
    store.append("bundles.csv", ["run_id", "test_id", "src"], [{"test_id": "t1", "src": "second"}])
    store.drop_incomplete_flows()
    lines = (run / "bundles.csv.dropped").read_text().splitlines()
    assert lines[0] == "run_id,test_id,src" and len(lines) == 1 + 201 + 1
    assert ",t9,x,extra-field" in lines and lines[-1] == ",t1,second"


@pytest.mark.parametrize("content, problem", [
    ("run_id,name\nr,foreign\n", "no test_id column"),
    (b"run_id,test_id\nr,\xff\xfe\n", "not UTF-8"),
    ("run_id,test_id\nr,\"" + "x" * 200_000 + "\"\n", "not a CSV table"),
])
def test_resume_refuses_a_tests_csv_it_cannot_read_and_touches_nothing(tmp_path, content, problem):
    run, _store = _dtn_run(tmp_path)
    tests = run / "tests.csv"
    tests.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = {p.name: _table(p) for p in run.iterdir()}
    code, _, err = cli("run", "--resume", str(run))
    assert code == 2 and str(tests) in one_line(err) and problem in one_line(err), err
    assert {p.name: _table(p) for p in run.iterdir()} == before


def test_resume_refuses_a_tests_csv_that_is_a_fifo_without_blocking(tmp_path):
    import os
    run, _store = _dtn_run(tmp_path)
    os.mkfifo(run / "tests.csv")
    code, _, err = cli("run", "--resume", str(run))
    assert code == 2 and "tests.csv: not a regular file" in one_line(err), err


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.symlink_to("/dev/zero"), "character device"),
    (lambda p: __import__("os").mkfifo(p), "a FIFO"),
    (lambda p: p.write_bytes(b"name: \xff\n"), "not UTF-8"),
    (lambda p: p.write_text("- a list\n"), "a YAML mapping expected"),
])
def test_resume_reads_experiment_yaml_bounded(tmp_path, make, problem):
    run = tmp_path / "run"
    run.mkdir()
    make(run / "experiment.yaml")
    code, _, err = cli("run", "--resume", str(run))
    assert code == 2 and "experiment.yaml" in one_line(err) and problem in one_line(err), err
