"""`swarm run`: the reference swarm app on a swarm, under a fault timeline, into a results store and a report.

```yaml
type: app                 # experiments/dds-faults.yaml
name: dds-faults
nodes: 4
duration: 30s             # measured time, from t0 (after `warmup`)
warmup: 5s                # after `up`, before t0: DDS discovery
backend: netns
app: {rate_hz: 10}        # swarm.spec.apps.AppSettings
swarm: {networks: ...}    # any other swarm spec fields
faults:                   # experiments.timeline, `at` seconds after t0
  - {at: 10s, partition: [[sat01, sat02], [sat03, sat04]]}
  - {at: 20s, heal: all}
```
Every node's app writes <node>.peers.csv and <node>.plans.csv as it runs: with the netns backend straight into
the run folder's nodes/ (a crash loses nothing written), with compose into the container, copied out before
the swarm is removed (also after Ctrl-C). The run folder then gets the tidy tables peers.csv (one row per
directed pair and window), plans.csv (per node and cycle), agreement.csv (per cycle: the share of nodes
holding the most common plan), faults.csv and run.json (t0), and report/ (tables, a time-series plot of
delivery ratio and agreement with the faults marked).
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from experiments.app.model import AppExperiment
from experiments.app.parse import tidy_tables
from experiments.loop import RunContext, Loop, run_tests
from experiments.store import ResultsStore, host_facts
from experiments.timeline import FaultTimeline
from swarm.mesh.plan import mesh_row
from swarm.runtime.mesh import MeshWatcher
from swarm.runtime.swarm import Swarm

NODE_FILES = ("peers", "plans")


def run_app_experiment(exp: AppExperiment, results_root: Path | None = None, *, store: ResultsStore | None = None,
                       backend: str | None = None, message: Callable[[str], None] = lambda m: None,
                       progress: Callable[[float, float, str], None] = lambda d, t, w: None) -> Path:
    """Bring the swarm up with the app, run the fault timeline for `duration`, collect, tear down; the run
    folder (`store`'s, or a new one under `results_root` once the backend answered)."""
    if store is None:
        Swarm(exp.swarm_spec(), backend=backend or exp.backend).backend.check_available()
        store = ResultsStore.create(Path(results_root or "results"), exp, host_facts())
    return run(RunContext(exp, store, backend=backend, message=message, progress=progress))


def run(ctx: RunContext) -> Path:
    """The `app` type's run (experiments/registry.py), through the one run loop: one swarm, one timed test."""
    exp, store = ctx.exp, ctx.store
    probe = ctx.swarm(exp.swarm_spec())
    nodes_dir = store.dir / "nodes"
    nodes_dir.mkdir()
    direct = not probe.backend.traits.containers  # nodes write straight into the run folder
    ctx = dataclasses.replace(ctx, backend=probe.backend.name)

    def one(swarm: Swarm, _test: object) -> dict:
        try:
            _timed(ctx, swarm)
        finally:
            if not direct:
                collect_from_nodes(swarm, nodes_dir)
        return {}

    run_tests(ctx, Loop(
        tests=[SimpleNamespace(test_id="app")], resumable=False, announce_up=False, run_test=one,
        swarm_of=lambda _t: exp.swarm_spec(str(nodes_dir.resolve()) if direct else None),
        starting=lambda *_: ctx.message(f"run folder: {store.dir}"),
        up={"ready_timeout": 60 + 2 * exp.nodes}))  # every node starts a DDS participant: slow on a small host
    tidy_tables(store.dir)
    return store.dir


def _timed(ctx: RunContext, swarm: Swarm) -> None:
    """Warm-up, then the fault timeline for `duration` from t0; faults.csv and run.json (t0)."""
    exp, store, progress = ctx.exp, ctx.store, ctx.progress
    timeline = None
    try:
        (store.dir / "host.json").write_text(json.dumps(host_facts(swarm), indent=1))
        if swarm.mesh_result is not None:  # a swarm with a mesh: its convergence after up, then per fault
            store.append_mesh(mesh_row(store.run_id, "app", exp.nodes, swarm.mesh.implementation or "", "up", "",
                                       swarm.mesh_result))
        end_warmup = time.time() + exp.warmup
        while (left := end_warmup - time.time()) > 0:
            progress(exp.warmup - left, exp.warmup, "warm-up (DDS discovery)")
            time.sleep(min(0.5, left))
        timeline = FaultTimeline(swarm.links, list(exp.faults), "app", store.run_id, ctx.message)
        timeline.prepare()  # planned before t0 is fixed
        t0 = time.time()
        (store.dir / "run.json").write_text(json.dumps({"t0": t0, "duration": exp.duration,
                                                        "backend": swarm.backend.name}))
        if swarm.spec.mesh.enabled:
            timeline.watcher = MeshWatcher(swarm.mesh, store.append_mesh, store.run_id, "app", exp.nodes)
        timeline.start(t0)
        while (elapsed := time.time() - t0) < exp.duration:
            done = len(timeline.rows)
            progress(elapsed, exp.duration, f"running, {done}/{len(exp.faults)} faults applied")
            time.sleep(min(0.5, exp.duration - elapsed))
        progress(exp.duration, exp.duration, "collecting")
        store.append_faults(timeline.finish(restore=False))
        if timeline.watcher:
            timeline.watcher.finish()
        timeline = None
    finally:
        if timeline is not None:
            timeline.stop()
            store.append_faults(timeline.finish(restore=False, timeout=5))


def collect_from_nodes(swarm, nodes_dir: Path) -> None:
    """Copy every node's record files out of its container (the app writes them into /run/swarm)."""
    for node in swarm.nodes:
        for kind in NODE_FILES:
            res = swarm.backend.exec(swarm.name, node.name, ["cat", f"/run/swarm/{node.name}.{kind}.csv"], check=False,
                                     timeout=60)
            if res.ok:
                (nodes_dir / f"{node.name}.{kind}.csv").write_text(res.stdout)


