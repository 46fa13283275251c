"""The ddsperf sweep (`type: ddsperf` experiments): DDS throughput and latency by sample size, rate and swarm size.

Debian's `ddsperf` (cyclonedds-tools 0.10.x, on the host and in the node image) runs in the nodes, bound to
the ISL interface (CYCLONEDDS_URI), on its own DDS domain (`domain_id`, default 1, so a reference app on
domain 0 is not disturbed). Each test is one measure on one swarm size, sample size, rate and repeat:
- throughput: the first node publishes (`pub RATE size S`, best effort unless `reliable`), every other node
  subscribes (`sub`); one row per subscriber: samples/s, Mb/s and samples lost, over the whole seconds the
  publisher ran (ddsperf's first and last per-second lines are partial and left out);
- latency: the first node pings (`ping RATE size S`, `inf`: the next ping when every pong came back), every
  other node answers (`pong`); one row per answering node: round-trip mean and percentiles.
ddsperf's output is kept verbatim under raw/<test>/<node>.txt as it is written; rows go to ddsperf.csv and
tests.csv of the results store (experiments.store.ResultsStore) when each test ends, so `--resume` runs only the
rest. Both ends are ddsperf (C, Cyclone 0.10); the Python binding of the reference app (Cyclone 11.0.1) is
never a party, so the two need not interoperate on the wire, and that was not tested. Checked here: a ddsperf
`sub` started in the app's domain next to running app nodes listed no app participant (ddsperf reports only
ddsperf peers), and the sweep uses its own domain anyway.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from experiments.loop import RunContext, Loop, run_tests
from experiments.store import host_facts
from flightsw import protocol as proto

from experiments.ddsperf.model import DdsperfExperiment, parse_sample_size
from experiments.ddsperf.parse import parse_ping, parse_sub, participant_name
from experiments.ddsperf.plan import (DdsTest, ddsperf_argv, initwait, pid_file, plan_tests,
                                      remembering_pid, stop_remembered)

ROW_COLUMNS = ["run_id", "test_id", "size", "measure", "sample_size", "sample_bytes", "rate", "repeat", "sender", "node",
               "ok", "error", "samples_per_s", "mbps", "received", "lost", "lost_percent", "seconds",
               "count", "mean_us", "min_us", "p50_us", "p90_us", "p99_us", "max_us"]
TEST_COLUMNS = ["run_id", "test_id", "size", "measure", "sample_size", "rate", "repeat", "nodes_ok", "receivers",
                "sender_rc", "wall_s"]


def run_test(swarm, exp: DdsperfExperiment, test: DdsTest, raw_dir: Path, run_id: str) -> tuple[list[dict], dict]:
    """Run one test on a swarm that is up; returns (rows per receiver, the test row)."""
    started = time.monotonic()
    raw_dir.mkdir(parents=True, exist_ok=True)
    sender, receivers = swarm.nodes[0], swarm.nodes[1:test.size]
    prefix = lambda n: swarm.backend.exec_prefix(swarm.name, n.name)  # noqa: E731
    unicast = [n.isl_ip for n in swarm.nodes[:test.size]] if not swarm.backend.traits.isl_multicast else None
    pidfile = lambda n: pid_file(swarm.backend.traits, swarm.workdir, swarm.name, n.name)  # noqa: E731
    tag = lambda n: proto.label(swarm.name, n.name)  # noqa: E731  (ps names the swarm)
    procs = {n.name: swarm.runner.start(prefix(n) + proto.labelled(
        remembering_pid(pidfile(n), ddsperf_argv(exp, test, n, False, unicast)), tag(n)),
        stdout_path=str(raw_dir / f"{n.name}.txt")) for n in receivers}
    timeout = initwait(test.size) + exp.duration + 30
    res = swarm.runner.run(prefix(sender) + proto.labelled(ddsperf_argv(exp, test, sender, True, unicast), tag(sender)),
                           check=False,
                           timeout=timeout)
    (raw_dir / f"{sender.name}.txt").write_text(res.stdout + res.stderr)
    time.sleep(1.5)  # the subscribers' last per-second line
    # Stop the receivers inside their nodes (ddsperf ends cleanly on SIGTERM and flushes): signalling the local
    # `docker exec` would leave them running in the container, where the next test would find them as peers.
    for n in receivers:
        swarm.runner.run(prefix(n) + stop_remembered(pidfile(n)), check=False, timeout=30)
    for proc in procs.values():
        try:
            proc.wait(timeout=15)
        except Exception:
            proc.kill()
            proc.wait()
    base = {"run_id": run_id, "test_id": test.test_id, "size": test.size, "measure": test.measure,
            "sample_size": test.sample_size, "sample_bytes": parse_sample_size(test.sample_size), "rate": test.rate,
            "repeat": test.repeat, "sender": sender.name}
    sender_error = "" if res.ok else f"sender ddsperf exited {res.returncode}: {(res.stdout + res.stderr).strip()[-200:]}"
    pings = parse_ping(res.stdout) if test.measure == "latency" else {}
    rows = []
    for n in receivers:
        text = (raw_dir / f"{n.name}.txt").read_text(errors="replace")
        if test.measure == "throughput":
            fig = parse_sub(text)
            ok = fig["received"] > 0
        else:
            fig = pings.get(participant_name(text) or "?", {})
            ok = bool(fig)
        error = "" if ok else (sender_error or f"no {'samples' if test.measure == 'throughput' else 'pongs'} measured")
        rows.append({**base, "node": n.name, "ok": ok, "error": error, **fig})
    test_row = {**base, "nodes_ok": sum(r["ok"] for r in rows), "receivers": len(rows), "sender_rc": res.returncode,
                "wall_s": round(time.monotonic() - started, 3)}
    return rows, test_row


def run_ddsperf_sweep(exp: DdsperfExperiment, store, *, backend: str | None = None,
                      progress: Callable[[float, float, str], None] = lambda d, t, w: None,
                      message: Callable[[str], None] = lambda m: None) -> list[dict]:
    """Run every test of `exp` missing from `store` (experiments.store.ResultsStore); returns the test rows written."""
    return sweep(RunContext(exp, store, backend=backend, message=message, progress=progress))


def run(ctx: RunContext) -> Path:
    """The `ddsperf` type's run (experiments/registry.py): the sweep into the context's run folder."""
    sweep(ctx)
    return ctx.store.dir


def sweep(ctx: RunContext) -> list[dict]:
    """The sweep through the one run loop: a bring-up per size, the tests of that size on it."""
    exp, store = ctx.exp, ctx.store

    def on_up(swarm, _first: DdsTest) -> None:
        if "backend" not in json.loads((store.dir / "host.json").read_text() or "{}"):
            (store.dir / "host.json").write_text(json.dumps(host_facts(swarm), indent=1))

    def one(swarm, test: DdsTest) -> dict:
        rows, test_row = run_test(swarm, exp, test, store.dir / "raw" / test.test_id, store.run_id)
        store.append("ddsperf.csv", ROW_COLUMNS, rows)
        store.append("tests.csv", TEST_COLUMNS, [test_row])
        return test_row

    return run_tests(ctx, Loop(
        tests=plan_tests(exp), swarm_of=lambda t: exp.swarm_spec(t.size), share=lambda t: t.size, run_test=one,
        on_up=on_up, done_line=lambda t, row: f"{t.test_id}: {row['nodes_ok']}/{row['receivers']} receivers measured",
        settle=exp.settle))
