"""Fault-timeline lag, engine vs driver (issue 27 item 3): an 8-node netns swarm (links: delay 5 ms, userspace
engine), a timeline of 60 link events (cuts, heals, impairs) every 100 ms run once handed to the engine and once
by the Python driver ($SWARM_FAULTS_ENGINE_SCHEDULE=0); prints each run's lag (applied - planned) p50/p99/max
from its faults.csv rows. Run as root under `flock /tmp/swarm-emu-itest.lock`:

    .venv/bin/python bench/fault_schedule_bench.py [subnet prefix, default 10.172]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import swarm_up  # noqa: E402
from experiments.timeline import FaultEvent, FaultTimeline  # noqa: E402

N, EVENTS, STEP_S = 8, 60, 0.1


def timeline() -> list[FaultEvent]:
    names = [f"sat{i:02d}" for i in range(1, N + 1)]
    out = []
    for k in range(EVENTS):
        a, b = names[k % N], names[(k + 3) % N]
        at = f"{(k + 1) * STEP_S:.3f}s"
        doc = ({"cut": [a, b]} if k % 3 == 0 else {"heal": [names[(k - 1) % N], names[(k + 2) % N]]} if k % 3 == 1
               else {"impair": {"between": [a, b], "delay": f"{10 + k}ms"}})
        out.append(FaultEvent.model_validate({"at": at, **doc}))
    return out


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> None:
    net = sys.argv[1] if len(sys.argv) > 1 else "10.172"
    with swarm_up({"name": "faultsched-bench", "backend": "netns", "groups": [{"prefix": "sat", "count": N}],
                   "links": {"default": {"delay": "5ms"}, "engine": "userspace"},
                   "networks": {"isl": {"subnet": f"{net}.0.0/24"}, "ground": {"subnet": f"{net}.1.0/24"}}}) as swarm:
        for mode in ("1", "0"):
            os.environ["SWARM_FAULTS_ENGINE_SCHEDULE"] = mode
            swarm.links.restore()
            said: list[str] = []
            tl = FaultTimeline(swarm.links, timeline(), "bench", "bench", said.append)
            tl.start(time.time() + 0.5)
            rows = tl.finish(restore=True, timeout=30)
            lags = [(r["applied_ts"] - r["planned_ts"]) * 1000 for r in rows if r["ok"]]
            by = {r["applied_by"] for r in rows}
            print(f"applied_by={','.join(sorted(by))} events={len(rows)} ok={len(lags)} lag_ms p50={q(lags, 0.5):.3f} "
                  f"p99={q(lags, 0.99):.3f} max={max(lags):.3f}  ({said[0] if said else ''})")


if __name__ == "__main__":
    main()
