"""One test with iperf3 (`Iperf3Runner`): one one-off iperf3 server per directed flow on its destination, started
and stopped (SIGSTOP: its socket still accepts connections); every node's agent starts its clients, which
connect and wait on the stopped servers; at one release instant the servers continue and every flow starts.
Each flow's data start is inferred from its exit less the test length iperf3 reports.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from experiments.store import HostSampler
from experiments.traffic.model import Flow, TestCase, plan_flows, server_ip
from experiments.traffic.tools.iperf3 import Iperf3
from experiments.traffic.tools.iperf3.parse import parse_client_json
from experiments.traffic.tools.iperf3.plan import client_argv
from experiments.traffic.tools.result import FlowResult
from experiments.traffic.tools.runner import ToolRunner, release_lead
from flightsw import protocol as proto


def with_inferred_start(result: FlowResult, exit_ts: float | None) -> FlowResult:
    """The flow with its data start inferred as (client exit) - (test length iperf3 reports).

    Clients start before the release and wait on stopped servers, so no process start marks a flow's
    real start; its exit does, less the test length. The end-of-test result exchange (normally a few ms,
    more on a saturated host) makes this an upper bound on each start, so the skew it gives is pessimistic.
    """
    if exit_ts is None or not result.ok:
        return result
    length = result.intervals[-1].end if result.intervals else result.duration
    if length is None or math.isnan(length):
        return result
    return dataclasses.replace(result, spawn_ts=float(exit_ts) - float(length))


def stopped_servers(netns_ids: set[str]) -> list[int]:
    """PIDs of stopped iperf3 processes in the given network namespaces (the sweep's parked servers)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            comm, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
            if comm == "iperf3" and state == "T" and os.readlink(f"/proc/{entry.name}/ns/net") in netns_ids:
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


def continue_at(pids: list[int], instant: float) -> float:
    """Sleep until `instant` (epoch s), SIGCONT every pid, return the epoch time the last one was sent.

    Every process woken preempts the waker, so on a small host a plain loop over ~1000 servers took
    25 s: the flows already released starved it. The loop runs as a real-time (SCHED_FIFO) task where
    allowed, which ordinary tasks cannot preempt.
    """
    with _realtime():  # also while waiting: a starved waker would start late
        delay = instant - time.time()
        if delay > 0:
            time.sleep(delay)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return time.time()


@contextlib.contextmanager
def _realtime():
    """Run the block as SCHED_FIFO (priority 50) if the host allows it, else as it is."""
    try:
        previous = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    except (OSError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, previous[0], previous[1])


class Iperf3Runner(ToolRunner):
    """Runs tests with iperf3: parked clients released at one instant."""

    tool = Iperf3()

    def start_servers(self, flows: list[Flow]) -> dict[str, str]:
        """Start every flow's server; returns {dst node: error} for destinations whose servers failed."""
        by_dst: dict[str, list[Flow]] = {}
        for f in flows:
            by_dst.setdefault(f.dst.name, []).append(f)

        def start(dst: str) -> tuple[str, str]:
            node = self.swarm.node(dst)
            ports = ",".join(str(f.port) for f in by_dst[dst])
            res = self.swarm.runner.run(self._agent(dst, proto.SERVERS, "--bind", server_ip(node, self.exp.network),
                                                    "--ports", ports), check=False, timeout=120)
            return dst, "" if res.ok else f"servers on {dst} failed: {(res.stderr or res.stdout).strip()[-300:]}"

        with ThreadPoolExecutor(self.workers) as pool:
            return {dst: error for dst, error in pool.map(start, by_dst) if error}

    def run_clients(self, test: TestCase, flows: list[Flow]) -> tuple[dict[str, dict], float, float]:
        """Start clients, release at one instant, collect.

        Returns ({flow_id: agent record}, the release instant, the spread of the nodes' actual releases).
        """
        by_src: dict[str, list[Flow]] = {}
        for f in flows:  # every node holding servers runs `clients` too: it releases them
            by_src.setdefault(f.src.name, []).append(f)
            by_src.setdefault(f.dst.name, [])
        procs, failed = self._park(test, by_src)
        records: dict[str, dict] = {}
        releases: dict[str, float] = {}
        stopped = stopped_servers(self.swarm.backend.netns_ids(self.swarm.name)) if os.geteuid() == 0 else []
        release = time.time() + release_lead(len(flows))
        if self.on_release is not None:
            self.on_release(release)
        for src, proc in procs.items():
            if src not in failed:
                try:
                    proc.stdin.write(proto.release_line(self.clocks.to_node(src, release)))
                    proc.stdin.close()
                except BrokenPipeError:
                    failed[src] = f"agent on {src} went away before the release"

        # The host continues every stopped server itself, in one tight loop at the release instant: the
        # agents would do it too, but once the first flows run they can be starved for seconds on a
        # small host. (Their own SIGCONT then finds the servers already running.)
        host_release = continue_at(stopped, release) if stopped else math.nan

        def collect(item: tuple[str, object]) -> tuple[str, list[dict], str]:
            src, got, err, released = self._reports(*item)
            if released is not None:
                releases[src] = released
            return src, got, err

        with ThreadPoolExecutor(self.workers) as pool:
            for src, got, err in pool.map(collect, procs.items()):
                for rec in got:
                    records[rec["id"]] = rec
                if err and src not in failed:
                    failed[src] = err
        for src, error in failed.items():
            for f in by_src[src]:
                records.setdefault(f.flow_id, {"id": f.flow_id, "error": error})
        if stopped:
            spread = host_release - release
        else:
            spread = (max(releases.values()) - min(releases.values())) if releases else math.nan
        return records, release, spread

    def _park(self, test: TestCase, by_src: dict[str, list[Flow]]) -> tuple[dict, dict[str, str]]:
        """Start every node's `clients` with its flows and wait until each parked them: (procs, {node: error})."""
        procs: dict[str, Any] = {src: self.swarm.runner.popen(self._agent(src, proto.CLIENTS)) for src in by_src}
        for src, proc in procs.items():
            payload = [proto.client_flow(f.flow_id, client_argv(f, self.exp, test)) for f in by_src[src]]
            proc.stdin.write(proto.dumps(payload) + "\n")
            proc.stdin.flush()
        failed: dict[str, str] = {}
        for src, proc in procs.items():  # wait until every agent parked its clients
            line = proc.stdout.readline()
            if not proto.is_parked(line):
                failed[src] = f"agent on {src} did not park its clients: {(line + proc.stderr.read()).strip()[-300:]}"
        return procs, failed

    def _reports(self, src: str, proc) -> tuple[str, list[dict], str, float | None]:
        """One agent's flow reports (clocks fixed), its error ('' if it exited 0) and its actual release."""
        got, released = [], None
        for line in proc.stdout:
            if proto.is_flow_report(line):
                got.append(self.clocks.fix(src, json.loads(line)))
            elif proto.is_release_report(line):
                released = self.clocks.from_node(src, json.loads(line)[proto.RELEASE_TS])
        proc.wait()
        err = "" if proc.returncode == 0 else f"agent on {src} exited {proc.returncode}: {proc.stderr.read().strip()[-300:]}"
        return src, got, err, released

    def run(self, test: TestCase) -> dict:
        """Run one test end to end; rows go to the store before this returns."""
        t_start = time.monotonic()
        self.measure_clocks()
        flows = plan_flows(self.swarm.nodes, self.exp.pattern, self.exp.base_port)
        server_errors = self.start_servers(flows)
        setup_s = time.monotonic() - t_start
        runnable = [f for f in flows if f.dst.name not in server_errors]
        timeline = self._timeline(test)
        self.on_release = timeline.start if timeline else None
        try:
            with HostSampler() as sampler:
                records, release, release_spread = (self.run_clients(test, runnable) if runnable
                                                else ({}, time.time(), math.nan))
        finally:
            self._finish_timeline(timeline, test)
        self.cleanup()
        parsed = {}
        for f in flows:
            rec = records.get(f.flow_id)
            if rec and "output" in rec:
                self.store.raw_path(test.test_id, f.flow_id).write_text(rec["output"])
                result = with_inferred_start(parse_client_json(rec["output"]), rec.get("exit_ts"))
            else:
                error = server_errors.get(f.dst.name) or (rec or {}).get("error") or "no result from agent"
                result = FlowResult(error=error)
            parsed[f.flow_id] = (f, rec or {}, result)
        return self._record(test, flows, parsed, release, release_spread, sampler, setup_s,
                            time.monotonic() - t_start)
