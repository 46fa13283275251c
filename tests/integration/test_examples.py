"""The shipped examples and the README's specs validate, and the README's quick tour commands run.

Nothing else in the suite ran `experiments/*.yaml`: every `type: dtn` example and `ddsperf.yaml` were refused or
crashed while the suite was green (issue 29, defects 1 and 2). Each example is loaded by the model (no I/O), then
`--check`ed through the CLI as a user would (the backend answers, subnets are free, engines exist), which creates
nothing. A new example that does not validate fails here.
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments import registry
from netem.spec.orbits import parse_orbits
from swarm.spec.model import spec_from_dict

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "experiments").glob("*.yaml")) + sorted((REPO / "bench").glob("*.yaml"))  # bench-only too
SWARM = [sys.executable, "-m", "swarm"]
#: agents the user builds that examples name, and the variable giving their install prefix
USER_BUILDS = {"ion": "SWARM_ION_INSTALL", "hdtn": "SWARM_HDTN_INSTALL"}
ISS_TLE = ["1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927",
           "2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537"]


def _is_swarm_spec(path: Path) -> bool:
    """A swarm spec (for `swarm up`) rather than an experiment: it names its nodes and has no experiment keys."""
    data = yaml.safe_load(path.read_text())
    return isinstance(data, dict) and "type" not in data and "sizes" not in data


def _cli(*args: str, cwd: Path = REPO, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*SWARM, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _unreachable_second_host(out: str) -> bool:
    """The two-host examples name a second Docker Engine started by hand (tests/hosts/second_engine.py); where
    it is not running, `--check` must fail on exactly that and nothing else."""
    return bool(re.search(r"hosts\[1\] \('host2'\)\.endpoint .*: unreachable", out))


def test_there_are_examples():
    assert len(EXAMPLES) >= 20, [p.name for p in EXAMPLES]
    assert any(p.name.startswith("dtn-") for p in EXAMPLES)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_model_validates(path: Path):
    """Pure validation (no backend): every experiment's model and each swarm it brings up, or the swarm spec."""
    if _is_swarm_spec(path):
        spec_from_dict(yaml.safe_load(path.read_text()), str(path))
        return
    kind, exp = registry.load(path)
    swarms = kind.swarms(exp)
    assert swarms, f"{path.name}: a {kind.name} experiment that brings up no swarm"
    for spec in swarms:
        assert spec.resolved_nodes(), f"{path.name}: swarm {spec.name!r} has no nodes"


@pytest.mark.docker
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_checks_through_the_cli(path: Path, need_docker, need_netns):
    """`swarm up|sweep|run --check FILE` exits 0 with its `valid` line (creates nothing)."""
    if _is_swarm_spec(path):
        args = ["up", "--check", str(path)]
    else:
        kind, _ = registry.load(path)
        args = [kind.command, "--check", str(path)]
    res = _cli(*args)
    out = (res.stdout + res.stderr).strip()
    if res.returncode != 0 and path.name.startswith("two-hosts") and _unreachable_second_host(out):
        assert res.returncode == 2 and len(out.splitlines()) == 1, out
        return
    for agent, variable in USER_BUILDS.items():
        if res.returncode != 0 and f"agent: {agent}" in path.read_text() and not os.environ.get(variable):
            # ION and HDTN are the user's builds (docs/DTN.md): without one, `--check` refuses on exactly that, in
            # one line
            assert res.returncode == 2 and len(out.splitlines()) == 1 and variable in out, out
            return
    assert res.returncode == 0, out
    assert "Traceback" not in out, out
    assert "valid" in out, out


def _readme_yaml_blocks() -> list[tuple[str, dict]]:
    """Every YAML block of README.md and the feature pages in docs/, as ("FILE:LINE", data); README's first."""
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in re.finditer(r"```yaml\n(.*?)```", text, re.S):
            where = f"{path.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}"
            blocks.append((where, yaml.safe_load(m.group(1))))
    return blocks


README_BLOCKS = _readme_yaml_blocks()
# Keys of README fragments that belong to an experiment, not a swarm spec (checked by the experiments above).
EXPERIMENT_ONLY = {"faults", "dtn_flows"}


def _merge(base: dict, piece: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in piece.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def test_readme_first_spec_is_complete():
    line, spec = README_BLOCKS[0]
    assert line.startswith("README.md:"), line
    assert {"name", "nodes"} <= set(spec), line
    spec_from_dict(spec, line)


@pytest.mark.parametrize("line,piece", README_BLOCKS[1:], ids=lambda x: x if isinstance(x, str) else "")
def test_readme_spec_fragments_validate(line: str, piece: dict, tmp_path: Path):
    """Each README or docs/ fragment of a swarm spec, put into the README's first spec, validates (pure model)."""
    base = dict(README_BLOCKS[0][1])
    piece = dict(piece)
    for key in EXPERIMENT_ONLY & set(piece):
        piece.pop(key)
    if "dtn" in piece and "flows" in piece["dtn"]:  # an orbits experiment's dtn part: into walker-dtn.yaml
        walker = REPO / "experiments" / "walker-dtn.yaml"
        data = {**yaml.safe_load(walker.read_text()), "dtn": piece["dtn"]}
        kind = registry.type_of_document(data, line)
        kind.from_dict(data, str(walker))
        return
    if "cfs" in piece.get("defaults", {}):  # a cFS tree the user built: point it at a minimal one
        exe = tmp_path / "cpu1"
        exe.mkdir()
        (exe / "core-cpu1").write_text("#!/bin/sh\n")
        (exe / "core-cpu1").chmod(0o755)
        piece = _merge(piece, {"defaults": {"cfs": {"install": str(exe)}}})
    data = _merge(base, piece)
    if "node_list" in data:
        data.pop("nodes", None)
    if "orbits" in data:  # the README elides the TLE ("..."): a real one in its place; nodes are what it flies
        for sat in data["orbits"].get("satellites", []):
            if "tle" in sat:
                sat["tle"] = ISS_TLE
        data.pop("nodes", None)
        data["node_list"] = [{"name": n} for n in parse_orbits(data["orbits"], "orbits").node_names()]
    spec_from_dict(data, line)


@pytest.mark.docker
def test_readme_tour_commands_that_finish_in_seconds(tmp_path: Path, need_docker):
    """The five-minute tour's commands that need no running swarm: init, up --check, schema, probe, list,
    wipe --dry-run."""
    assert _cli("init", "my-swarm", "--nodes", "8", cwd=tmp_path).returncode == 0
    assert (tmp_path / "my-swarm.yaml").exists()
    res = _cli("up", "--check", "my-swarm.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    for args in (["schema"], ["probe"], ["probe", "--json"], ["list"], ["wipe", "--dry-run"]):
        res = _cli(*args, cwd=tmp_path, timeout=120)
        assert res.returncode == 0, (args, res.stdout + res.stderr)
        assert "Traceback" not in res.stdout + res.stderr
        if args == ["probe"]:  # the verdict for a person; the facts for scripts with --json
            assert res.stdout.startswith("backends "), res.stdout
        if args == ["probe", "--json"]:
            facts = json.loads(res.stdout)
            assert {"docker", "sch_netem", "impairment_engine", "link_engines", "dtn_agents"} <= set(facts)
