"""Sweep executor (the results store it writes into is experiments/store.py; one test: the tool's runner in
experiments/traffic/tools/; the loop over sizes and tests: experiments/loop.py).

For each swarm size the swarm is brought up once; each test then
1. starts the tool's receivers on every destination and its senders on every source, held until one release
   instant the host picks once every node is ready (iperf3: servers stopped with SIGSTOP, clients parked on
   them; mux: one engine per node, bound and connected), so that process start-up is paid before the test;
2. at the release every flow starts; each flow's data start is measured (mux: stamped at the first send;
   iperf3: inferred from its exit less the test length, pessimistically), so start skew and the concurrent
   window are measured, not assumed;
3. writes every flow's raw record verbatim under raw/ as it arrives, reads it into the tool-neutral FlowResult
   and appends one row per flow (errors included) to flows.csv and one row per test to tests.csv, flushed to
   disk at once.
A crash or Ctrl-C loses nothing already measured; `resume` runs only the tests missing from tests.csv.
"""
from __future__ import annotations

import json
import math
from typing import Callable

from experiments.loop import RunContext, Loop, run_tests
from experiments.store import ResultsStore, host_facts
from experiments.traffic.model import ExperimentSpec, TestCase, plan_tests
from experiments.traffic.tools import DEFAULT_TOOL, TOOLS, Tool
from experiments.traffic.tools.runner import ToolRunner
from experiments.traffic.tools.runners import RUNNERS
from swarm.errors import RuntimeFailure
from swarm.mesh.plan import mesh_row
from swarm.runtime.runner import Runner
from swarm.runtime.swarm import Swarm

SweepProgress = Callable[[float, float, str], None]

__all__ = ["run_sweep", "sweep", "window_note", "SweepProgress"]


def run_sweep(exp: ExperimentSpec, store: ResultsStore, *, backend: str | None = None,
              progress: SweepProgress = lambda d, t, w: None, message: Callable[[str], None] = lambda m: None,
              swarm_progress=None, abort_on_error: bool = False, runner: Runner | None = None) -> list[dict]:
    """Run every test of `exp` missing from `store`; returns the test rows written by this call."""
    return sweep(RunContext(exp, store, backend=backend, message=message, progress=progress,
                            abort_on_error=abort_on_error, runner=runner, swarm_progress=swarm_progress))


def run(ctx: RunContext):
    """The `traffic` type's run (experiments/registry.py): the sweep into the context's run folder."""
    sweep(ctx)
    return ctx.store.dir


def window_note(row: dict, duration: float, tool: Tool | None = None) -> str:
    """A console line for a test without a usable concurrent window (every flow never ran at once), which the
    report marks 'not measured' in every concurrent-window table, with the tool's advice; "" when the window is
    usable. `tool`: the experiment's (default: the default tool)."""
    window, skew = row.get("window_s", math.nan), row.get("skew_s", math.nan)
    if window > 0:
        return ""
    advice = (tool or TOOLS[DEFAULT_TOOL]).no_window_advice
    return (f"{row['test_id']}: no concurrent window (start skew {skew:.1f} s >= {duration:g} s duration): only "
            "whole-test figures, not concurrent ones; the report marks it 'not measured: no concurrent window'"
            + (f"; {advice}" if advice else ""))


def sweep(ctx: RunContext) -> list[dict]:
    """The sweep through the one run loop: a bring-up per size, the tests of that size on it."""
    exp, store = ctx.exp, ctx.store
    for line in store.drop_incomplete_flows():
        ctx.message(line)
    current: dict[str, ToolRunner] = {}  # the tool's runner on the swarm that is up
    tool = TOOLS[exp.engine]

    def on_up(swarm: Swarm, first: TestCase) -> None:
        if swarm.mesh_result is not None:
            store.append_mesh(mesh_row(store.run_id, "", first.size, swarm.mesh.implementation or "", "up", "",
                                       swarm.mesh_result))
        if not (store.dir / "host.json").exists() or "backend" not in json.loads((store.dir / "host.json").read_text()):
            facts = {**host_facts(swarm), "traffic_engine": exp.engine}
            (store.dir / "host.json").write_text(json.dumps(facts, indent=1))
        current["runner"] = RUNNERS[tool.name](swarm, exp, store, ctx.message)

    def done_line(test: TestCase, row: dict) -> str:
        clocks = row.get("clock_uncertainty_s")
        return (f"{test.test_id}: {row['flows_ok']}/{row['flows']} flows ok, skew {row['skew_s'] * 1000:.0f} ms"
                + (f" (clocks of the hosts agree to ±{clocks * 1000:.2f} ms)" if clocks else ""))

    def after(test: TestCase, row: dict) -> None:
        if (note := window_note(row, exp.duration, tool)):
            ctx.message(note)
        if ctx.abort_on_error and row["flows_ok"] < row["flows"]:
            raise RuntimeFailure(f"test {test.test_id}: {row['flows'] - row['flows_ok']} flows failed (--abort-on-error)")

    return run_tests(ctx, Loop(
        tests=plan_tests(exp), swarm_of=lambda t: exp.swarm_spec(t.size), share=lambda t: t.size,
        run_test=lambda _swarm, test: current["runner"].run(test), on_up=on_up, done_line=done_line,
        after=after, settle=exp.settle))
