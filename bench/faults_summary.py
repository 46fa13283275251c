"""A run folder's fault/contact timeline, summarised from its faults.csv (issue 40 item 4): how many events,
who applied them (applied_by), what was not applied and why, and the lag (applied_ts - planned_ts) of the
engine-applied ones, p50/p99/max in ms. The contact plan's cuts before the release (index -1) are left out.

    .venv/bin/python bench/faults_summary.py results/<run>
"""
from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path


def summary(run: Path) -> dict:
    rows = [r for r in csv.DictReader((run / "faults.csv").open()) if r["index"] != "-1"]
    lags = sorted((float(r["applied_ts"]) - float(r["planned_ts"])) * 1000 for r in rows
                  if r["applied_by"] == "engine" and r["applied_ts"] and r["planned_ts"])

    def q(p: float) -> float:
        return round(lags[min(len(lags) - 1, int(p * len(lags)))], 3) if lags else float("nan")

    return {"events": len(rows), "applied_by": dict(Counter(r["applied_by"] or "-" for r in rows)),
            "not_applied": dict(Counter(r["error"] for r in rows if r["ok"] != "True")),
            "lag_ms_p50": q(0.5), "lag_ms_p99": q(0.99), "lag_ms_max": round(lags[-1], 3) if lags else float("nan"),
            "lag_over_5ms": sum(x > 5 for x in lags),
            "last_applied_at_s": max((float(r["at_s"]) for r in rows if r["ok"] == "True"), default=None)}


if __name__ == "__main__":
    for name, value in summary(Path(sys.argv[1])).items():
        print(f"{name}: {value}")
