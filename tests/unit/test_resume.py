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
