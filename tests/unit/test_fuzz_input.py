"""Fuzzed input (issue 11): random mutations of valid swarm specs and experiments, with a fixed seed, through
`swarm up --check` and `swarm sweep --check` in this process. Every case ends in exit 0 (valid) or exit 2
with exactly one line on stderr starting `error: ` (never a traceback, never exit 1), and creates nothing:
no file beside the input, no state, no run folder."""
from __future__ import annotations

import copy
import io
import random
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from swarm.cli.main import main

SEED = 20261122
CASES = 320

SPECS = [
    {"name": "hd-fz", "nodes": 3, "backend": "netns",
     "networks": {"isl": {"subnet": "10.190.0.0/24", "mtu": 1500}, "ground": {"subnet": "10.191.0.0/24"}}},
    {"name": "hd-fz", "backend": "netns", "groups": [{"prefix": "relay", "count": 2, "role": "relay",
                                                     "resources": {"cpus": 0.5, "memory": "128m"}},
                                                    {"prefix": "obs", "count": 2, "env": {"SENSOR": "camera"}}],
     "networks": {"isl": {"subnet": "10.192.0.0/24"}, "ground": {"subnet": "10.193.0.0/24"}}},
    {"name": "hd-fz", "backend": "netns", "node_list": [{"name": "alpha"}, {"name": "beta", "command": ["sleep", "9"]}],
     "links": {"default": {"loss": "1%"}, "overrides": [{"between": ["alpha", "beta"], "rate": "2Mbit"}]},
     "networks": {"isl": {"subnet": "10.194.0.0/24"}, "ground": {"subnet": "10.195.0.0/24"}}},
]
EXPERIMENTS = [
    {"name": "hd-fx", "sizes": [2, 3], "protocols": ["tcp", "udp"], "rates": ["1M", "10M"], "duration": "2s",
     "backend": "netns", "swarm": {"networks": {"isl": {"subnet": "10.196.0.0/24"}, "ground": {"subnet": "10.197.0.0/24"}}}},
    {"name": "hd-fx", "sizes": [2], "protocols": ["udp"], "rates": ["100k"], "duration": 3, "engine": "mux",
     "backend": "netns", "iperf3": {"length": "1200", "interval": 0.5},
     "faults": [{"at": "1s", "cut": ["sat01", "sat02"]}, {"at": "2s", "heal": "all"}],
     "swarm": {"networks": {"isl": {"subnet": "10.198.0.0/24"}, "ground": {"subnet": "10.199.0.0/24"}}}},
    {"type": "ddsperf", "name": "hd-fd", "sizes": [2, 3], "rates": ["1kHz"], "backend": "netns",
     "swarm": {"networks": {"isl": {"subnet": "10.196.0.0/24"}, "ground": {"subnet": "10.197.0.0/24"}}}},
]
VALUES = [None, 0, -1, 1, 2, 7, 65536, 10 ** 12, 0.5, -3.5, float("inf"), True, False, "", " ", "x", "sat01", "abc def",
          "$(id)", "$HOME", "../../etc", "10.190.0.0/24", "10.0.0.0/8", "256.1.1.1/24", "1M", "-5M", "0", "inf", "1e9",
          "ünïcødé", "a" * 3000, [], [1, 2], ["x", "x"], {}, {"a": 1}, {"subnet": "10.1.0.0/24"}, [{"name": "q"}]]
KEYS = ["name", "nodes", "node_list", "groups", "networks", "isl", "ground", "subnet", "mtu", "backend", "links",
        "sizes", "protocols", "rates", "duration", "engine", "faults", "swarm", "iperf3", "env", "count", "prefix",
        "subent", "nodez", "rats", "type", "mesh", "apps", "defaults", "resources"]


def paths(doc, prefix=()):
    """Every (path to a value) inside a document."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, prefix + (i,))
    return out


def parent_of(doc, path):
    for key in path[:-1]:
        doc = doc[key]
    return doc


def mutate(rng: random.Random, doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        where = rng.choice(paths(doc) or [("name",)])
        parent, key = parent_of(doc, where), where[-1]
        op = rng.randrange(6)
        if op == 0:  # a value replaced
            parent[key] = copy.deepcopy(rng.choice(VALUES))
        elif op == 1 and isinstance(parent, dict):  # a key removed
            parent.pop(key, None)
        elif op == 2 and isinstance(parent, dict):  # a key misspelt or an unknown one added
            parent[rng.choice(KEYS)] = copy.deepcopy(rng.choice(VALUES + [parent.get(key)]))
        elif op == 3 and isinstance(parent[key], list) and parent[key]:  # a list entry repeated
            parent[key].append(copy.deepcopy(parent[key][0]))
        elif op == 4:  # a number scaled or negated
            if isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
                parent[key] = rng.choice([-parent[key], parent[key] * 1000, parent[key] + 1])
        else:  # a container where a scalar was, or the other way round
            parent[key] = [parent[key]] if not isinstance(parent[key], list) else {"x": parent[key]}
    return doc


def text_of(rng: random.Random, doc: dict) -> str:
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    r = rng.random()
    if r < 0.06:  # a line given twice: a duplicate key
        lines = text.splitlines()
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        text = "\n".join(lines) + "\n"
    elif r < 0.10:  # truncated
        text = text[: rng.randrange(1, len(text))]
    elif r < 0.13:  # stray characters
        i = rng.randrange(len(text))
        text = text[:i] + rng.choice(["{", "]", ":", "\t", "\x00", "- ", "&a *a"]) + text[i:]
    return text


def cases():
    rng = random.Random(SEED)
    out = []
    for i in range(CASES):
        experiment = i % 2 == 1
        base = rng.choice(EXPERIMENTS if experiment else SPECS)
        doc = mutate(rng, base) if rng.random() < 0.9 else copy.deepcopy(base)
        out.append((i, experiment, text_of(rng, doc)))
    return out


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_fuzzed_specs_and_experiments_exit_0_or_2_in_one_line_and_create_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_WORKDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    outcomes = {0: 0, 2: 0}
    for i, experiment, text in cases():
        path = tmp_path / f"case{i}.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        args = ["sweep", "--check", str(path), "--results", str(tmp_path / "results")] if experiment else \
            ["up", "--check", str(path)]
        code, _, err = run_cli(args)
        where = f"case {i} ({'experiment' if experiment else 'spec'}):\n{text[:600]}\n--- stderr:\n{err[:800]}"
        assert code in (0, 2), where
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), where
            assert len(lines[0]) < 600, where
        assert "Traceback" not in err, where
        assert sorted(p.name for p in tmp_path.iterdir()) == [path.name], where  # nothing created
        path.unlink()
        outcomes[code] += 1
    assert sum(outcomes.values()) == CASES >= 300
    assert outcomes[0] >= 10 and outcomes[2] >= 150, outcomes  # both kinds of outcome are exercised


@pytest.mark.parametrize("i", range(3))
def test_the_unmutated_bases_are_valid(i, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_WORKDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPECS[i]))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(EXPERIMENTS[i]))
    assert run_cli(["up", "--check", "s.yaml"])[0] == 0
    code, out, err = run_cli(["sweep", "--check", "e.yaml"])
    assert code == 0, err
    assert Path("e.yaml").exists()
