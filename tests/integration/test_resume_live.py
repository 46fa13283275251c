"""Resume after a crash (issue 29, defect 10), live on the netns backend: a sweep or a dtn run killed with
SIGKILL leaves its swarm up (its `down` never ran); `--resume` takes that swarm over instead of refusing with
"already up", keeps every test already written and runs only the missing ones. Swarm names start `rel-res`,
subnets from tests/alloc.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import REPO, csv_rows, interruptible, swarm_namespaces
from alloc import nets_yaml, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]


def swarm(args, timeout=300):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "SWARM_WORKDIR": str(REPO)}, timeout=timeout)


def dtn_agents_of(name: str) -> int:
    """How many dtnd processes of swarm `name` run (on netns their command line holds .swarm/<name>/)."""
    out = subprocess.run(["pgrep", "-f", f"dtnd.*[.]swarm/{name}/"], capture_output=True, text=True).stdout
    return len(out.split())


def kill_after_first_test(args, results: Path, timeout: float = 240, then: Callable[[], bool] | None = None) -> Path:
    """Start `swarm ARGS`, SIGKILL it once its first test has a tests.csv row (and, with `then`, once `then()`
    holds as well: a type with a swarm per test has taken the first one down by then); the run folder."""
    proc = subprocess.Popen([sys.executable, "-m", "swarm", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "SWARM_WORKDIR": str(REPO)}, preexec_fn=interruptible)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            runs = list(results.glob("*/tests.csv"))
            if runs and len(csv_rows(runs[0])) >= 1 and (then is None or then()):
                break
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        else:
            pytest.fail("no test finished in time")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    return runs[0].parent


def assert_resumed(run: Path, name: str, first: list[dict], expected: int, resume_args: list[str]) -> str:
    """`swarm ... --resume RUN` exits 0, keeps the rows written before, runs each missing test once, and
    leaves no namespace of the swarm; its stderr."""
    assert swarm_namespaces(name), "the killed run left no swarm up: nothing to take over"
    res = swarm([*resume_args, str(run), "--no-report"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "already up" not in res.stderr
    rows = csv_rows(run / "tests.csv")
    ids = [r["test_id"] for r in rows]
    assert len(ids) == len(set(ids)) == expected, ids
    assert rows[:len(first)] == first  # the measurements written before the crash are kept as they were
    assert not swarm_namespaces(name)
    return res.stderr


def test_a_killed_sweep_resumes_on_the_swarm_it_left_up(need_netns, need_iperf3, tmp_path):
    name = "rel-res-sweep"
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: {name}\nsizes: [2]\nprotocols: [udp]\nrates: [1M, 2M, 3M]\nduration: 2\n"
                   f"backend: netns\nswarm: {{{nets_yaml(NET[0])}}}\n")
    results = tmp_path / "results"
    try:
        run = kill_after_first_test(["sweep", str(exp), "--results", str(results), "--no-report"], results)
        first = csv_rows(run / "tests.csv")
        err = assert_resumed(run, name, first, 3, ["sweep", "--resume"])
        assert "taking it over" in err
        flows = csv_rows(run / "flows.csv")
        assert sorted({f["test_id"] for f in flows}) == sorted(r["test_id"] for r in csv_rows(run / "tests.csv"))
        assert len(flows) == 3 * 2  # 2 nodes: two directed flows per test, none twice
    finally:
        swarm(["down", f"{name}-n2"])


def test_a_second_resume_of_a_run_in_progress_is_refused(need_netns, need_iperf3, tmp_path):
    name = "rel-res-busy"
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: {name}\nsizes: [2]\nprotocols: [udp]\nrates: [1M, 2M]\nduration: 3\n"
                   f"backend: netns\nswarm: {{{nets_yaml(NET[1])}}}\n")
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "sweep", str(exp), "--results", str(results), "--no-report"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "SWARM_WORKDIR": str(REPO)}, preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 120
        while not swarm_namespaces(name) and time.monotonic() < deadline:
            time.sleep(0.2)
        run = next(results.iterdir())
        res = swarm(["sweep", "--resume", str(run), "--no-report"])
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert "in progress" in lines[-1] and str(proc.pid) in lines[-1], res.stderr
        assert proc.wait(timeout=180) == 0, proc.stderr.read()  # the live run was not disturbed
        assert len(csv_rows(run / "tests.csv")) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        swarm(["down", f"{name}-n2"])


def test_a_killed_dtn_run_resumes(need_dtn7, tmp_path):
    name = "rel-res-dtn"
    exp = tmp_path / "e.yaml"
    exp.write_text(f"type: dtn\nname: {name}\nbackend: netns\npattern: chain\nsizes: [1]\nbundle_sizes: [5kB]\n"
                   "rates: [5, 10]\nduration: 2s\ndrain: 10s\n"
                   f"swarm: {{{nets_yaml(NET[2])}}}\n")
    results = tmp_path / "results"
    try:
        # dtn brings up a swarm per test: the first test's swarm goes down right after its row, so the kill waits
        # until the second test's swarm is up with both agents (killing on the row alone raced that `down`)
        run = kill_after_first_test(["run", str(exp), "--results", str(results), "--no-report"], results,
                                    then=lambda: dtn_agents_of(name) >= 2)
        first = csv_rows(run / "tests.csv")
        assert_resumed(run, name, first, 2, ["run", "--resume"])
        bundles = csv_rows(run / "bundles.csv")
        ids = [r["test_id"] for r in csv_rows(run / "tests.csv")]
        for test_id, rate in zip(ids, (5, 10)):  # each test's bundles once: rate x duration of them
            assert sum(b["test_id"] == test_id for b in bundles) == rate * 2, (test_id, len(bundles))
    finally:
        swarm(["down", name])
