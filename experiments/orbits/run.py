"""`swarm run` of an `orbits` experiment: a swarm whose links follow an orbit plan live.

```yaml
type: orbits              # experiments/walker-dtn.yaml
name: walker-dtn
backend: netns
speedup: 1                # time compression: plan second t is applied at wall second t / speedup
orbits: {...}             # netem.spec.orbits: satellites, ground stations, link policy, duration, step
swarm: {mesh: ...}        # any other swarm spec fields; the nodes are the plan's (satellites + stations)
probes: [[sat01, gs01]]   # pairs pinged all along (optional): does the link follow the plan?
probe_interval: 200ms
contact_plan_numbers: {sat01: 1, ...}   # optional: ION/HDTN node numbers (default: plan order from 1)
dtn:                      # optional: a dtn7-rs agent in every node and bundle traffic (experiments/orbits/traffic.py)
  agent: {cla: tcp, routing: epidemic, peers: auto, peer_timeout: 2s}
  flows: [{from: satellites, to: gs01, rate: 0.5, size: 1kB}]
```
The run folder gets, before the clock starts (so a DTN setup can load them): timeline.csv, contacts.csv,
contact-plan.ion (with `@` = the release instant, times compressed by `speedup`), contact-plan.hdtn.json
(relative times) and contact-plan.hdtn.unix.json (Unix seconds: HDTN's --use-unix-timestamp);
then links.csv (one row per link update: scheduled, applied, lag), probes.csv and raw/probe-*.txt (ping's
own output), run.json (release time, driver summary), and report/ (availability, delay, passes, lag).
With `dtn:` also contact-plan.exact.ion (the same timeline at ms resolution: the bundles' yardstick),
bundles.csv (experiments/orbits/bundles.py: each bundle against the plan's earliest delivery, and the earliest a
router loading contact-plan.ion would plan), store.csv,
raw/dtn/ (the traffic programs' events and the agents' logs) and run.json's "dtn" summary.
"""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pandas as pd

from experiments.orbits.model import OrbitsExperiment
from flightsw import protocol as proto
from experiments.orbits.traffic import RELEASE_LEAD_S, DtnTraffic
from experiments.store import ResultsStore, host_facts
from experiments.orbits.bundles import router_plan
from netem.orbits.export import node_numbers, to_hdtn_json, to_ion, to_ion_exact
from netem.orbits.planner import Plan, plan as make_plan
from netem.orbits.records import LINK_COLUMNS, PROBE_COLUMNS, against_plan, parse_ping, ping_argv
from netem.runtime.orbits import LinkTimelineDriver
from experiments.loop import RunContext, Loop, run_tests
from swarm.runtime.swarm import Swarm


EXACT_PLAN = "contact-plan.exact.ion"  # the same timeline at ms resolution, node names: what bundles are judged on
ION_PLAN = "contact-plan.ion"  # what ION's routers would be given: router_earliest_s per bundle


def write_contact_plans(plan: Plan, out: Path, release_ts: Optional[float], speedup: float,
                        numbers: Optional[dict[str, int]]) -> None:
    origin = datetime.fromtimestamp(release_ts, timezone.utc) if release_ts else None
    (out / ION_PLAN).write_text(to_ion(plan, numbers, speedup=speedup, origin=origin))
    (out / "contact-plan.hdtn.json").write_text(to_hdtn_json(plan, numbers, speedup=speedup))
    if origin is not None:  # the same in Unix seconds, for HDTN's --use-unix-timestamp
        (out / "contact-plan.hdtn.unix.json").write_text(to_hdtn_json(plan, numbers, speedup=speedup, origin=origin))
    (out / EXACT_PLAN).write_text(to_ion_exact(plan, speedup=speedup))


# ------------------------------------------------------------------------------------------------ run
def run_orbits_experiment(exp: OrbitsExperiment, results_root: Path | None = None, *,
                          store: ResultsStore | None = None, backend: str | None = None,
                          message: Callable[[str], None] = lambda m: None,
                          progress: Callable[[float, float, str], None] = lambda d, t, w: None) -> Path:
    if store is None:
        Swarm(exp.swarm_spec(), backend=backend or exp.backend).backend.check_available()
        store = ResultsStore.create(Path(results_root or "results"), exp, host_facts())
    return run(RunContext(exp, store, backend=backend, message=message, progress=progress))


def run(ctx: RunContext) -> Path:
    """The `orbits` type's run (experiments/registry.py): plan, then one swarm and one timed test through the one
    run loop, then the probes' table."""
    exp, store, message, progress = ctx.exp, ctx.store, ctx.message, ctx.progress
    progress(0, 1, "planning")
    plan = make_plan(exp.orbits_spec())
    for w in plan.warnings:
        message(f"warning: {w}")
    plan.timeline.to_csv(store.dir / "timeline.csv", index=False)
    plan.contacts().to_csv(store.dir / "contacts.csv", index=False)
    message(f"run folder: {store.dir}")
    message(f"plan: {len(plan.nodes)} nodes, {len(plan.links())} links ever up, {len(plan.timeline)} timeline rows, "
            f"{plan.duration:g} s of orbit at x{exp.speedup:g} = {plan.duration / exp.speedup:.0f} s")
    probes: list[tuple[str, str, Any, Path]] = []
    run_tests(ctx, Loop(
        tests=[SimpleNamespace(test_id="orbits")], swarm_of=lambda _t: exp.swarm_spec(), resumable=False,
        announce_up=False, run_test=lambda swarm, _t: _follow(ctx, swarm, plan, probes),
        starting=lambda *_: progress(0, plan.duration / exp.speedup, "bringing the swarm up")))
    _tidy_probes(store, plan, exp, probes)
    return store.dir


def _follow(ctx: RunContext, swarm: Swarm, plan: Plan, probes: list) -> dict:
    """The links follow the plan from one release instant, with the probes and the bundle traffic beside them;
    run.json. Everything started here is stopped before the swarm goes down (also on an error)."""
    exp, store, message = ctx.exp, ctx.store, ctx.message
    driver = None
    traffic = None
    try:
        (store.dir / "host.json").write_text(json.dumps(host_facts(swarm), indent=1))
        driver = LinkTimelineDriver(swarm.links, plan, speedup=exp.speedup, workers=exp.workers, message=message,
                                    run_id=store.run_id, on_rows=lambda rows: store.append("links.csv",
                                                                                            LINK_COLUMNS, rows),
                                    orbits=exp.orbits_spec())  # the live view's map
        initial_s = driver.prepare()
        # contact plans, probes and bundles start at one known instant
        release = time.time() + (RELEASE_LEAD_S if exp.dtn else 1.0)
        write_contact_plans(plan, store.dir, release, exp.speedup, exp.contact_plan_numbers)
        wall = plan.duration / exp.speedup
        if exp.dtn is not None:
            traffic = DtnTraffic(exp, swarm, store, message)
            traffic.start(release, wall)
        for a, b in exp.probes:
            raw = store.raw_path("probes", f"{a}__{b}").with_suffix(".txt")
            argv = swarm.backend.exec_prefix(swarm.name, a) + proto.labelled(ping_argv(
                swarm.node(b).isl_ip, exp.probe_interval, wall + 1.0, swarm.node(a).isl_ip), proto.label(swarm.name, a))
            probes.append((a, b, swarm.runner.start(argv, stdout_path=str(raw)), raw))
        (store.dir / "run.json").write_text(json.dumps({"release_ts": release, "speedup": exp.speedup,
                                                        "duration_plan_s": plan.duration, "wall_s": wall,
                                                        "initial_s": round(initial_s, 3),
                                                        "backend": swarm.backend.name}))
        summary = driver.run(release=release, progress=ctx.progress)
        meta = json.loads((store.dir / "run.json").read_text()) | {"driver": summary}
        if traffic is not None:
            meta["dtn"] = _judge_bundles(ctx, plan, traffic, summary, release)
        (store.dir / "run.json").write_text(json.dumps(meta, indent=1))
        message(f"driver: {summary}")
    finally:
        if traffic is not None:
            traffic.stop()
        if driver is not None:
            driver.close()
        for _a, _b, proc, _raw in probes:
            if proc.poll() is None:
                try:
                    proc.wait(timeout=3)
                except Exception:
                    proc.terminate()
                    proc.wait(timeout=5)
    return {}


def _judge_bundles(ctx: RunContext, plan: Plan, traffic: DtnTraffic, summary: dict, release: float) -> dict:
    """Wait for the bundle traffic to end, judge every bundle against the plan; run.json's "dtn" summary."""
    exp, store = ctx.exp, ctx.store
    traffic.wait(ctx.progress)
    # a link goes down at most the slowest update's lag late: bundles are judged with that slack
    tolerance = (summary.get("step_lag_ms_max") or 0.0) / 1000 + 0.05
    routers, refused = router_plan((store.dir / ION_PLAN).read_text(),
                                   node_numbers(plan, exp.contact_plan_numbers), release, ION_PLAN)
    dtn = traffic.collect(store.dir / EXACT_PLAN, tolerance, routers) | {
        "tolerance_s": round(tolerance, 3), "router_plan_refused": refused}
    ctx.message("dtn: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in dtn.items()))
    return dtn


def _tidy_probes(store: ResultsStore, plan: Plan, exp: OrbitsExperiment, probes) -> None:
    if not probes or not (store.dir / "run.json").exists():
        return
    meta = json.loads((store.dir / "run.json").read_text())
    frames = []
    margin = (exp.probe_interval + 1.0 + 0.2) * exp.speedup + plan.step  # probe timeout + driver lag, in plan s
    for a, b, _proc, raw in probes:
        samples = parse_ping(raw.read_text() if raw.exists() else "", exp.probe_interval)
        frames.append(against_plan(samples, plan.timeline, a, b, meta["release_ts"], exp.speedup, margin))
    probes_df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=PROBE_COLUMNS)
    probes_df["run_id"] = store.run_id
    probes_df = probes_df[(probes_df["t_plan_s"] >= 0) & (probes_df["t_plan_s"] < plan.duration)]
    store.append("probes.csv", PROBE_COLUMNS, probes_df[PROBE_COLUMNS].to_dict("records"))


__all__ = ["run_orbits_experiment", "write_contact_plans", "EXACT_PLAN"]
