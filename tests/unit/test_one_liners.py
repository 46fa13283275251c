"""Issue 40, item 11's one-liners still open: `run --check` of a DTN experiment with `sizes: [1]` printed the
swarm's node count as its size (2: the ground node added), and the checkout's top-level `compose` package on
PYTHONPATH shadowed docker-compose v1's (the probe then reported no Compose, silently). The others of the item
are tested where they live: `capture --duration nan|inf|0.2` and `-o` a FIFO in tests/unit/test_observe.py
and tests/integration/test_observe_live.py, a DTN `duration: 30min` below."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.runs import sizes_summary
from swarm.runtime.probe import compose_command, compose_note, shadowing_compose_package
from swarm.runtime.runner import RecordingRunner, Result

REPO = Path(__file__).resolve().parents[2]


def test_sizes_are_said_as_given_with_the_node_counts_where_they_differ():
    assert sizes_summary([1], [2]) == "sizes 1 (swarms of 2 nodes)"
    assert sizes_summary([2, 4], [3, 5, 3]) == "sizes 2, 4 (swarms of 3, 5 nodes)"
    assert sizes_summary([2, 4], [2, 4]) == "sizes 2, 4"
    assert sizes_summary(None, [13]) == "sizes 13"


@pytest.mark.parametrize("sizes, said", [([1], "sizes 1 (swarms of 2 nodes)"), ([2], "sizes 2 (swarms of 3 nodes)")])
def test_run_check_of_a_dtn_experiment_says_its_sizes(tmp_path, sizes, said):
    doc = yaml.safe_load((REPO / "experiments/dtn-chain.yaml").read_text())
    doc.update(sizes=sizes, duration="30min")  # `min` as swarm.units knows it
    path = tmp_path / "dtn.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = subprocess.run([sys.executable, "-m", "swarm", "run", "--check", str(path)], capture_output=True, text=True,
                         cwd=REPO, timeout=120, env={**os.environ, "SWARM_WORKDIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert f"valid (dtn, {said}, backend" in res.stdout.replace("\n", ""), res.stdout


def shadowed_v1(argv: list[str]) -> bool:
    return argv[:2] == ["docker-compose", "version"]


def test_a_shadowed_docker_compose_v1_runs_without_pythonpath_and_the_probe_says_so(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    assert shadowing_compose_package() == str(REPO)
    runner = RecordingRunner(answers=[
        (lambda a: a[:2] == ["docker", "compose"], lambda a: Result(a, 1, "", "docker: 'compose' is not a docker command")),
        (shadowed_v1, lambda a: Result(a, 1, "", "ModuleNotFoundError: No module named 'compose.cli'")),
        (lambda a: a[:4] == ["env", "-u", "PYTHONPATH", "docker-compose"], lambda a: Result(a, 0, "1.29.2\n")),
    ])
    argv, version = compose_command(runner)
    assert (argv, version) == (["env", "-u", "PYTHONPATH", "docker-compose"], "1.29.2")
    note = compose_note(argv)
    assert "without PYTHONPATH" in note and str(REPO) in note and "shadow" in note and "\n" not in note
    assert "cannot start" in compose_note([])
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")
    assert shadowing_compose_package() == "" and compose_note(argv) == ""


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose v1 not installed")
def test_the_real_docker_compose_v1_is_found_with_the_checkout_on_pythonpath(monkeypatch):
    from swarm.runtime.runner import Runner

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        pytest.skip("the v2 plugin answers first; v1 is not asked")
    argv, version = compose_command(Runner())
    assert argv[-1] == "docker-compose" and version, (argv, version)
