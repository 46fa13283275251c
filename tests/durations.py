"""Seconds per live test file from a run's JUnit report, into tests/durations.json (the order tests/parallel.py hands
files out in) and a per-tier summary for docs/TESTING.md.

    python tests/durations.py .pytest-report.xml            # print the summary
    python tests/durations.py .pytest-report.xml --write    # and update tests/durations.json

A file's time is the sum of its tests' times as pytest reports them (setup, call and teardown, so a module's
bring-up counts once, in its first test). Serial files add to the wall time in full; the others share workers.
"""
from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import date
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def file_seconds(report: Path) -> dict[str, float]:
    """{'integration/test_x.py': seconds} for every test file in the JUnit report."""
    out: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        # classname: tests.integration.test_x[.Class]; the file is the first part starting with test_
        mod = next((i for i, p in enumerate(parts) if p.startswith("test_")), None)
        if mod is None or mod == 0:
            continue
        rel = "/".join(parts[1:mod + 1]) + ".py" if parts[0] == "tests" else "/".join(parts[:mod + 1]) + ".py"
        out[rel] += float(case.get("time") or 0)
    return dict(out)


def tiers(seconds: dict[str, float]) -> dict[str, tuple[int, float]]:
    """(files, seconds) per folder: unit, integration, kernel_lab."""
    out: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for rel, s in seconds.items():
        out[rel.split("/")[0]][0] += 1
        out[rel.split("/")[0]][1] += s
    return {k: (v[0], v[1]) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path)
    ap.add_argument("--write", action="store_true", help="update tests/durations.json")
    args = ap.parse_args()
    seconds = file_seconds(args.report)
    for tier, (n, s) in sorted(tiers(seconds).items()):
        print(f"{tier:12} {n:3} files {s / 60:6.1f} min of test time")
    for rel, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {s:7.1f} s  {rel}")
    if args.write:
        live = {k: round(v, 1) for k, v in sorted(seconds.items()) if not k.startswith("unit/")}
        (TESTS / "durations.json").write_text(json.dumps({"measured": str(date.today()), "files": live}, indent=1) + "\n")
        print(f"wrote {TESTS / 'durations.json'} ({len(live)} files)")


if __name__ == "__main__":
    main()
