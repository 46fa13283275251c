"""Fuzzed input of every experiment type (issue 29, "Fuzzers for every input kind"): seeded mutations of the
shipped examples of each type (traffic, ddsperf, app, dtn, orbits) through `sweep --check` / `run --check`.
Every case ends in exit 0 (a valid plan) or exit 2 with one line starting `error: `, never a traceback, and
creates nothing. The cases run in one child process under an address-space limit (bounded memory: an input that
makes the CLI allocate without bound fails its case instead of eating the machine) and a time limit.

Why seeded mutations and not hypothesis: hypothesis is no dependency of the project; the mutator of
test_fuzz_input.py (values swapped, keys dropped or misspelt, lists grown, scalars and containers exchanged, text
truncated or with stray characters) shrinks nothing but reproduces exactly from its seed and case number, which
is what a failure report needs here, and it adds no package."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_fuzz_input import VALUES, mutate, text_of

REPO = Path(__file__).resolve().parents[2]
SEED = 20261125
MEMORY_LIMIT = 1 << 30  # bytes of address space for the child running every case
#: type -> (command, example files that are its bases, cases)
TYPES = {
    "traffic": ("sweep", ["quick.yaml", "mesh-faults.yaml"], 80),
    "ddsperf": ("sweep", ["ddsperf.yaml"], 80),
    "app": ("run", ["dds-faults.yaml", "dds-mesh-faults.yaml"], 100),
    "dtn": ("run", ["dtn-chain.yaml", "dtn-contacts.yaml", "dtn-ltp-delay.yaml", "dtn-lunar.yaml"], 140),
    "orbits": ("run", ["walker-dtn.yaml"], 100),
}
EXTRA_VALUES = ["5s", "1e400s", "9" * 400, "-2s", "max", "0B", "1kB", "64kB", "tcp", "ltp", "http", "epidemic",
                "static", "chain", "all-to-ground", "2026-03-20T12:00:00Z", "550km", "53deg", 1e400, -0.0, 10 ** 400,
                {"walker": {"total": 10 ** 6}}, "contacts/chain-gap.txt", "/dev/zero", "/proc/self/environ", "x\n"]

CHILD = r"""
import io, json, resource, sys
from contextlib import redirect_stderr, redirect_stdout
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from swarm.cli.main import main
for line in sys.stdin:
    args = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # what the CLI's handler let through: a failure of the case
            code, _ = -1, err.write(f"escaped {type(exc).__name__}: {exc}"[:500])
    print(json.dumps({"code": code, "err": err.getvalue()[-1500:]}), flush=True)
"""


def cases(kind: str) -> list[tuple[int, str, str]]:
    """(case number, base file, YAML text) of `kind`'s fuzzed documents, from the fixed seed."""
    command, bases, count = TYPES[kind]
    rng = random.Random(f"{SEED}-{kind}")
    docs = {b: yaml.safe_load((REPO / "experiments" / b).read_text()) for b in bases}
    saved = list(VALUES)
    VALUES.extend(EXTRA_VALUES)  # the shared mutator draws from VALUES
    try:
        out = []
        for i in range(count):
            base = bases[i % len(bases)]
            doc = mutate(rng, docs[base]) if rng.random() < 0.92 else docs[base]
            out.append((i, base, text_of(rng, doc)))
        return out
    finally:
        VALUES[:] = saved


def run_cases(tmp_path: Path, command: str, texts: list[str]) -> list[dict]:
    """Each text as an experiment file through `swarm COMMAND --check`, in one child under the memory limit."""
    lines = []
    for i, text in enumerate(texts):
        path = tmp_path / f"case{i}.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        lines.append(json.dumps([command, "--check", str(path), *(["--results", str(tmp_path / "results")]
                                                                    if command == "sweep" else [])]))
    res = subprocess.run([sys.executable, "-c", CHILD, str(MEMORY_LIMIT)], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env={**os.environ, "SWARM_WORKDIR": str(tmp_path)})
    got = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert len(got) == len(texts), f"the child stopped after {len(got)} cases: {res.stderr[-2000:]}"
    return got


@pytest.mark.parametrize("kind", list(TYPES))
def test_fuzzed_experiments_are_a_valid_plan_or_one_line(kind, tmp_path):
    command = TYPES[kind][0]
    shutil.copytree(REPO / "experiments" / "contacts", tmp_path / "contacts")  # the bases' relative plan files
    bases = TYPES[kind][1]
    todo = cases(kind)
    results = run_cases(tmp_path, command, [(REPO / "experiments" / b).read_text() for b in bases] +
                        [text for _, _, text in todo])
    assert [r["code"] for r in results[:len(bases)]] == [0] * len(bases), results[:len(bases)]  # bases: valid
    results = results[len(bases):]
    outcomes = {0: 0, 2: 0}
    for (i, base, text), r in zip(todo, results):
        where = f"{kind} case {i} (from {base}):\n{text[:700]}\n--- stderr:\n{r['err'][-800:]}"
        assert r["code"] in (0, 2), where
        assert "Traceback" not in r["err"], where
        if r["code"] == 2:
            lines = r["err"].strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 600, where
        outcomes[r["code"]] += 1
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("case") and p.name != "contacts")
    assert left == [], left  # nothing created: no results folder, no state
    assert outcomes[0] >= 3 and outcomes[2] >= len(todo) // 3, outcomes  # both outcomes exercised
