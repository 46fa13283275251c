"""CLI bad-input handling: one line naming field and value, exit 2, nothing created."""
import json
import os
import subprocess
import sys

import pytest

SPECS = {
    "malformed": "name: x\nnodes: [1, 2\n",
    "unknown_field": "name: x\nnodes: 3\nflavour: mint\n",
    "zero": "name: x\nnodes: 0\n",
    "one": "name: x\nnodes: 1\n",
    "too_many": "name: x\nnodes: 100000\n",
    "duplicate": "name: x\nnode_list: [{name: a}, {name: a}]\n",
    "space": "name: x\nnode_list: [{name: 'sat 07'}, {name: b}]\n",
    "shell": "name: x\nnode_list: [{name: 'a;reboot'}, {name: b}]\n",
    "small_subnet": "name: x\nnodes: 20\nnetworks: {isl: {subnet: 10.9.0.0/28}}\n",
    "unknown_backend": "name: x\nnodes: 2\nbackend: k8s\n",
    "hardy_ltp": "name: x\nnodes: 2\ndefaults: {dtn: {agent: hardy, cla: ltp}}\n",
}
NEEDLES = {
    "malformed": "malformed YAML", "unknown_field": "unknown field 'flavour'", "zero": "nodes 0", "one": "nodes 1",
    "too_many": "nodes 100000", "duplicate": "duplicate", "space": "'sat 07'", "shell": "'a;reboot'",
    "small_subnet": "too small for 20", "unknown_backend": "'k8s'",
    "hardy_ltp": "dtn.cla 'ltp': agent 'hardy' does not carry it (it carries tcp; ltp is carried by dtn7, ion, hdtn)",
}


def swarm(args, tmp_path, **env):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "SWARM_WORKDIR": str(tmp_path), **env}, timeout=60)


@pytest.mark.parametrize("case", sorted(SPECS))
def test_bad_spec_exit_2_one_line_nothing_created(case, tmp_path):
    (tmp_path / "s.yaml").write_text(SPECS[case])
    res = swarm(["up", "s.yaml"], tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and NEEDLES[case] in lines[0], res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_unknown_backend_flag(tmp_path):
    (tmp_path / "s.yaml").write_text("name: x\nnodes: 2\n")
    res = swarm(["up", "s.yaml", "--backend", "k8s"], tmp_path)
    assert res.returncode == 2 and "backend 'k8s': unknown backend" in res.stderr


def test_docker_asked_for_but_not_running(tmp_path):
    (tmp_path / "s.yaml").write_text("name: x\nnodes: 2\nbackend: compose\n")
    res = swarm(["up", "s.yaml"], tmp_path, DOCKER_HOST="unix:///nonexistent.sock")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: s.yaml: backend 'compose': Docker is not running (docker version found no server); use --backend netns"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_status_of_unknown_swarm(tmp_path):
    res = swarm(["status", "ghost"], tmp_path)
    assert res.returncode == 2 and "swarm 'ghost': not up" in res.stderr


def test_down_of_unknown_swarm_is_a_noop(tmp_path):
    res = swarm(["down", "ghost"], tmp_path)
    assert res.returncode == 0 and "nothing to remove" in res.stdout


def test_init_writes_a_valid_commented_spec(tmp_path):
    assert swarm(["init", "my-swarm", "--nodes", "8"], tmp_path).returncode == 0
    text = (tmp_path / "my-swarm.yaml").read_text()
    assert "# " in text
    res = swarm(["up", "--check", "my-swarm.yaml", "--backend", "netns"], tmp_path)
    assert res.returncode == 0 and "8 nodes" in res.stdout
    again = swarm(["init", "my-swarm"], tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr


def test_init_rejects_bad_name(tmp_path):
    res = swarm(["init", "Bad Name"], tmp_path)
    assert res.returncode == 2 and "swarm 'Bad Name'" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_schema_is_json_schema(tmp_path):
    res = swarm(["schema"], tmp_path)
    schema = json.loads(res.stdout)
    assert schema["title"] == "swarm-emu swarm spec" and "nodes" in schema["properties"]


def test_sweep_and_run_show_progress_and_report_for_any_registered_type(tmp_path, monkeypatch, capsys):
    """The CLI's one path for every experiment type: progress callbacks (before a total is known too),
    the run folder, and the type's report. The experiment type here is a stand-in registered for the test."""
    from experiments import registry, runs
    from experiments.kind import ExperimentType
    from swarm.cli.main import main

    calls = []

    def run(ctx):
        ctx.progress(0, 0, "starting")
        ctx.progress(1, 3, "test 1")
        ctx.message("a message")
        calls.append(ctx.exp)
        return tmp_path / "run"

    def report(run_dir):
        calls.append(run_dir)
        return {"report_html": run_dir / "report.html", "report_md": run_dir / "report.md"}

    kind = ExperimentType(name="stand-in", summary="", command="sweep", from_dict=lambda d, s: d,
                          swarms=lambda e: [], run=run, report=report, unit="s")
    monkeypatch.setattr(runs, "open_run", lambda *a: (kind, {"x": 1}, type("S", (), {"dir": tmp_path / "run"})()))
    monkeypatch.setattr(registry, "type_of_run", lambda d: kind)
    main(["sweep", "anything.yaml"])
    assert calls == [{"x": 1}, tmp_path / "run"]
    assert "report:" in capsys.readouterr().out
