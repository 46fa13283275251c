"""What the live tests of the DTN agents a user builds share when they run a `type: dtn` experiment: the run and its
tables, and the check of a run on experiments/contacts/chain-gap.txt (no sat01-ground contact, sat02-ground cut
from 5 s to 15 s), which an agent that routes by the run's contact plan (ION, HDTN) must route round and wait out."""
from __future__ import annotations

import csv
import subprocess
from pathlib import Path

from ltp_capture import ENV, REPO, SWARM

#: The contact plan of the gap test.
CHAIN_GAP = REPO / "experiments" / "contacts" / "chain-gap.txt"


def run_experiment(exp: Path, results: Path) -> Path:
    """`swarm run` of the experiment file `exp` into `results` (asserted to succeed); its run folder."""
    res = subprocess.run(SWARM + ["run", str(exp), "--results", str(results), "--no-report"], capture_output=True,
                         text=True, env=ENV, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    runs = sorted(p.parent for p in results.rglob("tests.csv"))
    assert runs, list(results.rglob("*"))[:20]
    return runs[-1]


def table(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def assert_gap_held(run: Path, least_sent: int, least_in_gap: int) -> list[dict]:
    """The run's one test delivered every bundle it sent (at least `least_sent`) exactly once, and none made in the
    gap (at least `least_in_gap` of them) before the gap closed: contacts are whole seconds, so 15 s +- 0.5 from the
    first bundle, which leaves at the release. Its bundles.csv rows."""
    row = table(run / "tests.csv")[0]
    bundles = table(run / "bundles.csv")
    assert int(row["bundles_sent"]) >= least_sent and row["bundles_delivered"] == row["bundles_sent"], row
    assert all(int(b["copies"]) == 1 for b in bundles), [b for b in bundles if b["copies"] != "1"][:3]
    t0 = min(float(b["created_ts"]) for b in bundles)
    gap = [b for b in bundles if t0 + 6 <= float(b["created_ts"]) <= t0 + 13.5]
    early = [b for b in gap if float(b["delivered_ts"]) < t0 + 14.5]
    assert len(gap) >= least_in_gap and not early, early[:3]
    return bundles
