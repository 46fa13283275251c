"""Regression tests of the hardening review (issue 11): each defect found, reproduced first, then fixed."""
from swarm.runtime.backends import TRAITS
import json
import os
import subprocess
import sys
import time

import pytest


def swarm(args, tmp_path, input=None, **env):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=tmp_path,
                          input=input, env={**os.environ, "SWARM_WORKDIR": str(tmp_path), **env}, timeout=120)


def one_error_line(res):
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def fake_state(tmp_path, name, backend="netns", text=None):
    d = tmp_path / ".swarm" / name
    d.mkdir(parents=True, exist_ok=True)
    doc = {"name": name, "backend": backend, "spec": {"name": name, "nodes": 2,
           "networks": {"isl": {"subnet": "10.190.0.0/24"}, "ground": {"subnet": "10.191.0.0/24"}}},
           "image": "", "created": time.time(), "mesh": None}
    (d / "state.json").write_text(json.dumps(doc) if text is None else text)
    return d


# ---- 1. path traversal in `swarm down NAME` (and every command taking a swarm name)
@pytest.mark.parametrize("bad", ["../victim", "", ".", "..", "a/../../victim", "/tmp", "Victim"])
def test_down_refuses_a_name_outside_the_state_directory(bad, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    kept = fake_state(tmp_path, "hd-keep")
    res = swarm(["down", bad], tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "swarm" in one_error_line(res) and "must match" in res.stderr
    assert (victim / "keep.txt").read_text() == "mine" and (kept / "state.json").exists()


@pytest.mark.parametrize("command", [["status"], ["ping"], ["exec"], ["impair"], ["fault"], ["mesh"]])
def test_every_command_taking_a_swarm_name_checks_it(command, tmp_path):
    res = swarm([*command, "../victim", *{"exec": ["x", "true"], "fault": ["heal"]}.get(command[0], [])], tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "must match" in one_error_line(res)


def test_state_paths_stay_under_the_state_directory(tmp_path):
    from swarm.errors import SpecError
    from swarm.runtime.backends.base import swarm_dir

    assert swarm_dir(tmp_path, "hd-a") == (tmp_path / ".swarm" / "hd-a").resolve()
    for bad in ("../x", "", "a/b", ".."):
        with pytest.raises(SpecError):
            swarm_dir(tmp_path, bad)


# ---- 2. one unreadable state.json broke down, list and wipe for every swarm
@pytest.mark.parametrize("text", ["{", "", "[1, 2]", '{"name": "hd-bad"}', "\x00\xff"])
def test_corrupt_state_is_one_line_and_skipped(text, tmp_path):
    fake_state(tmp_path, "hd-good")
    bad = fake_state(tmp_path, "hd-bad", text=text)
    res = swarm(["list"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "hd-good" in res.stdout and "hd-bad" not in res.stdout
    warn = res.stderr.strip().splitlines()
    assert len(warn) == 1 and str(bad / "state.json") in warn[0] and "Traceback" not in res.stderr
    status = swarm(["status", "hd-bad"], tmp_path)
    assert status.returncode == 2 and str(bad / "state.json") in one_error_line(status)
    down = swarm(["down", "hd-bad"], tmp_path)
    assert down.returncode == 0, down.stderr
    assert not bad.exists() and (tmp_path / ".swarm" / "hd-good" / "state.json").exists()


def test_a_state_copied_from_another_swarm_is_refused(tmp_path):
    """Seen: hd-t2's state.json copied into hd-t1's folder made `swarm fault hd-t1 cut` cut hd-t2's link."""
    t2 = fake_state(tmp_path, "hd-t2")
    t1 = tmp_path / ".swarm" / "hd-t1"
    t1.mkdir()
    (t1 / "state.json").write_text((t2 / "state.json").read_text())
    for args in (["fault", "hd-t1", "cut", "hd-t201", "hd-t202"], ["status", "hd-t1"]):
        res = swarm(args, tmp_path)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "the state of swarm 'hd-t2', not of 'hd-t1'" in one_error_line(res)
    assert "hd-t1" not in swarm(["list"], tmp_path).stdout.replace(str(t1), "")
    assert swarm(["down", "hd-t1"], tmp_path).returncode == 0 and not t1.exists() and (t2 / "state.json").exists()


def test_state_is_written_atomically(tmp_path):
    from swarm.runtime.state import read_state, write_state

    write_state(tmp_path, "hd-a", {"name": "hd-a", "backend": "netns", "spec": {}, "n": 1})
    write_state(tmp_path, "hd-a", {"name": "hd-a", "backend": "netns", "spec": {}, "n": 2})
    assert read_state(tmp_path, "hd-a")["n"] == 2
    assert [p.name for p in (tmp_path / ".swarm" / "hd-a").iterdir()] == ["state.json"]
    assert (tmp_path / ".swarm" / "hd-a").stat().st_mode & 0o777 == 0o700


# ---- 3. Compose interpolated `$` in environment values (and commands)
def test_dollar_is_escaped_in_the_compose_file(tmp_path):
    import yaml

    from compose.render import compose_yaml, render_compose
    from conftest import golden
    from swarm.spec.model import spec_from_dict

    spec = spec_from_dict({"name": "hd-env", "node_list": [
        {"name": "a", "env": {"B": "$HOME", "C": "$(id)", "D": "a$$b", "E": "${X:-y}"}},
        {"name": "b", "image": "user/x:1", "command": ["sh", "-c", "echo $HOME"]}]})
    text = compose_yaml(render_compose(spec, "swarm-emu/node:latest"))
    assert text == golden("compose_dollar.yml", text)
    env = yaml.safe_load(text)["services"]["a"]["environment"]
    assert (env["B"], env["C"], env["D"], env["E"]) == ("$$HOME", "$$(id)", "a$$$$b", "$${X:-y}")
    assert yaml.safe_load(text)["services"]["b"]["command"] == ["sh", "-c", "echo $$HOME"]


# ---- 4. a predictable pid file in the host's /tmp, then `kill "$(cat file)"` as root
@pytest.mark.parametrize("backend", ["netns", "compose"])
def test_ddsperf_pid_file_is_in_the_swarms_own_directory(backend, tmp_path):
    from experiments.ddsperf.plan import pid_file

    path = pid_file(TRAITS[backend], tmp_path, "hd-x", "sat02")
    assert not path.startswith("/tmp/swarm-emu"), path
    if backend == "netns":  # a namespace shares the host's file system: the swarm's 0700 state directory
        assert path.startswith(str((tmp_path / ".swarm" / "hd-x").resolve()) + "/")
        assert (tmp_path / ".swarm" / "hd-x").stat().st_mode & 0o777 == 0o700
    else:  # a container's own file system
        assert path.startswith("/run/")


def test_no_code_keeps_files_in_the_hosts_tmp():
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    hits = [f"{p}:{i}" for d in ("swarm", "experiments", "netem", "compose", "analysis", "bench") for p in (repo / d).rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if '"/tmp' in line or "'/tmp" in line or 'f"/tmp' in line]
    assert hits == []


# ---- 5. (the live halves are in tests/integration/test_hardening_live.py)
def test_wipe_names_and_corrupt_state(tmp_path):
    fake_state(tmp_path, "hd-bad", text="{")
    fake_state(tmp_path, "hd-good")
    res = swarm(["wipe", "hd-bad", "hd-good", "--yes"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / ".swarm" / "hd-bad").exists() and not (tmp_path / ".swarm" / "hd-good").exists()
    assert swarm(["wipe", "../x"], tmp_path).returncode == 2


# ---- 6. duplicate values ran twice; duplicate YAML keys were silently the last one
EXP = "name: hd-dup\nsizes: [2, 4]\nprotocols: [tcp, udp]\nrates: [1M, 10M]\nduration: 1s\n" \
      "swarm: {networks: {isl: {subnet: 10.194.0.0/24}, ground: {subnet: 10.195.0.0/24}}}\n"
DUPLICATES = {
    "sizes": (EXP.replace("sizes: [2, 4]", "sizes: [2, 2]"), "sizes: 2 is given twice"),
    "rates": (EXP.replace("rates: [1M, 10M]", "rates: [1M, 1000k]"), "rates: '1000k' is '1M' again"),
    "protocols": (EXP.replace("protocols: [tcp, udp]", "protocols: [tcp, tcp]"), "protocols: 'tcp' is given twice"),
    "yaml_key": (EXP + "sizes: [8]\n", "line 7: duplicate key 'sizes' (first on line 2)"),
    "dds_sizes": ("type: ddsperf\nname: hd-dds\nsizes: [3, 3]\n", "sizes: 3 is given twice"),
    "dds_rates": ("type: ddsperf\nname: hd-dds\nsizes: [2]\nrates: [1kHz, 1kHz]\n", "rates: '1kHz' is given twice"),
}


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_duplicates_are_an_input_error(case, tmp_path):
    text, needle = DUPLICATES[case]
    (tmp_path / "e.yaml").write_text(text)
    res = swarm(["sweep", "e.yaml", "--results", str(tmp_path / "results")], tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in one_error_line(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


def test_duplicate_key_in_a_swarm_spec_names_key_and_line(tmp_path):
    (tmp_path / "s.yaml").write_text("name: hd-x\nnodes: 3\nnetworks:\n  isl: {subnet: 10.196.0.0/24, subnet: 10.197.0.0/24}\n")
    res = swarm(["up", "--check", "s.yaml"], tmp_path)
    assert res.returncode == 2
    assert "s.yaml: line 4" in one_error_line(res) and "duplicate key 'subnet'" in res.stderr


# ---- 7. errors echoed a 5-10 KB value (sometimes twice)
HUGE = "x" * 6000
LONG_VALUES = {
    "node_name": ("swarm", "up", f"name: hd-x\nnode_list: [{{name: '{HUGE}'}}, {{name: b}}]\n"),
    "subnet": ("swarm", "up", f"name: hd-x\nnodes: 2\nnetworks: {{isl: {{subnet: '{HUGE}'}}}}\n"),
    "swarm_name": ("swarm", "up", f"name: '{HUGE}'\nnodes: 2\n"),
    "unknown_key": ("swarm", "up", f"name: hd-x\nnodes: 2\n{HUGE[:1000]}: 1\n"),
    "backend": ("swarm", "up", f"name: hd-x\nnodes: 2\nbackend: '{HUGE}'\n"),
    "env_key": ("swarm", "up", f"name: hd-x\nnodes: 2\ndefaults:\n  env:\n    '{HUGE[:1000]}-': v\n"),  # YAML keys stop at 1024
    "rate": ("exp", "sweep", f"name: hd-x\nsizes: [2]\nprotocols: [udp]\nrates: ['{HUGE}']\n"),
    "duration": ("exp", "sweep", f"name: hd-x\nsizes: [2]\nprotocols: [tcp]\nduration: '{HUGE}'\n"),
    "memory": ("swarm", "up", f"name: hd-x\nnodes: 2\ndefaults: {{resources: {{memory: '{HUGE}'}}}}\n"),
}


@pytest.mark.parametrize("case", sorted(LONG_VALUES))
def test_long_values_are_cut_and_echoed_once(case, tmp_path):
    _, command, text = LONG_VALUES[case]
    (tmp_path / "f.yaml").write_text(text)
    res = swarm([command, *(["--check"] if command == "up" else []), "f.yaml"], tmp_path)
    assert res.returncode == 2, res.stderr[:300]
    line = one_error_line(res)
    assert len(line) < 450, line[:500]
    assert "characters)" in line and line.count("x" * 99) == 1, line


def test_show_cuts_a_value_with_its_length():
    from swarm.spec.validation import show

    assert show("abc") == "'abc'"
    assert show("y" * 200) == "'" + "y" * 99 + "... (202 characters)"


# ---- 8. a misspelt nested key was reported as a missing one; a links: error did not name the file
MISSPELT = {
    "nested": ("name: hd-x\nnodes: 2\nnetworks: {isl: {subent: 10.196.0.0/24}}\n",
               "networks.isl: unknown field 'subent'; did you mean 'subnet'?"),
    "top": ("name: hd-x\nnodez: 2\n", "top level: unknown field 'nodez'; did you mean 'nodes'?"),
    "group": ("name: hd-x\ngroups: [{prefix: a, count: 2, resorces: {cpus: 1}}]\n",
              "groups[0]: unknown field 'resorces'; did you mean 'resources'?"),
    "deep": ("name: hd-x\nnodes: 2\ndefaults: {resources: {cpu: 1}}\n",
             "defaults.resources: unknown field 'cpu'; did you mean 'cpus'?"),
    "links": ("name: hd-x\nnodes: 2\nlinks: {default: {los: 1%}}\n", "links.default: unknown field 'los'; did you mean 'loss'?"),
    "mesh": ("name: hd-x\nnodes: 2\nmesh: {protocl: batman}\n", "mesh: unknown field 'protocl'; did you mean 'protocol'?"),
    "nothing_close": ("name: hd-x\nnodes: 2\nnetworks: {isl: {zzz: 1, subnet: 10.196.0.0/24}}\n",
                      "networks.isl: unknown field 'zzz'"),
}


@pytest.mark.parametrize("case", sorted(MISSPELT))
def test_misspelt_key_is_named_with_a_suggestion(case, tmp_path):
    text, needle = MISSPELT[case]
    (tmp_path / "s.yaml").write_text(text)
    res = swarm(["up", "--check", "s.yaml"], tmp_path)
    assert res.returncode == 2
    line = one_error_line(res)
    assert line == f"error: s.yaml: {needle}" or (case == "nothing_close" and needle in line and "did you mean" not in line), line


def test_misspelt_experiment_key(tmp_path):
    (tmp_path / "e.yaml").write_text("name: hd-x\nsizes: [2]\nprotocols: [tcp]\niperf3: {lenght: 1400}\n")
    res = swarm(["sweep", "e.yaml"], tmp_path)
    assert res.returncode == 2 and "iperf3: unknown field 'lenght'; did you mean 'length'?" in one_error_line(res)


def test_links_error_at_check_names_the_file(tmp_path, caps):
    if caps.sch_netem:
        pytest.skip("this host can apply a delay: no error to name")
    (tmp_path / "s.yaml").write_text("name: hd-x\nnodes: 2\nbackend: netns\nlinks: {engine: nft, default: {delay: 10ms}}\n")
    res = swarm(["up", "--check", "s.yaml"], tmp_path)
    assert res.returncode == 2 and one_error_line(res).startswith("error: s.yaml: links")


# ---- 9. `sweep --check`; an overlap with a host interface found before any run folder is made
def host_subnet():
    from swarm.runtime.runner import Runner
    from swarm.runtime.swarm import host_networks

    nets = [n for ifname, n in host_networks(Runner()) if n.prefixlen >= 8 and n.prefixlen <= 29]
    if not nets:
        pytest.skip("no host interface with an IPv4 subnet")
    return nets[0]


def experiment_text(isl: str) -> str:
    return (f"name: hd-chk\nsizes: [2, 3]\nprotocols: [tcp]\nduration: 1s\nbackend: netns\n"
            f"swarm: {{networks: {{isl: {{subnet: {isl}}}, ground: {{subnet: 10.199.0.0/24}}}}}}\n")


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_sweep_finds_a_host_subnet_overlap_before_creating_anything(check, tmp_path, need_netns):
    net = host_subnet()
    (tmp_path / "e.yaml").write_text(experiment_text(str(net)))
    res = swarm(["sweep", *(["--check"] if check else []), "e.yaml", "--results", str(tmp_path / "results")], tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"overlaps {net}" in one_error_line(res) and "e.yaml" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


def test_sweep_check_of_a_valid_experiment_creates_nothing(tmp_path, need_netns):
    (tmp_path / "e.yaml").write_text(experiment_text("10.198.0.0/24"))
    res = swarm(["sweep", "--check", "e.yaml", "--results", str(tmp_path / "results")], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "e.yaml: valid" in res.stdout and "2 tests" in res.stdout and "sizes 2, 3" in res.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


# ---- generated compose files piled up in the checkout
@pytest.mark.parametrize("keep", [False, True])
def test_down_removes_the_compose_file_it_generated(keep, tmp_path):
    compose = tmp_path / "compose"
    compose.mkdir()
    (compose / "hd-gen.yml").write_text("# Generated by swarm-emu from s.yaml. Edit the spec, not this file.\nversion: '2.4'\n")
    (compose / "hd-mine.yml").write_text("# my own file\nversion: '2.4'\n")
    res = swarm(["down", "hd-gen", *(["--keep-compose"] if keep else [])], tmp_path)
    assert res.returncode == 0, res.stderr
    assert (compose / "hd-gen.yml").exists() == keep
    assert swarm(["down", "hd-mine"], tmp_path).returncode == 0
    assert (compose / "hd-mine.yml").exists()  # not generated by the framework: never removed
