"""One test of the traffic sweep on a swarm that is up: the iperf3 engine (`TestRunner`: parked iperf3 clients
released at one instant) and the multiplexing engine (`MuxTestRunner`: one traffic process per node). The sweep
loop around them is experiments/traffic/run.py; what the host says to the in-node programs is flightsw/protocol.py.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Callable

from experiments.store import HostSampler, ResultsStore
from experiments.timeline import FaultTimeline
from experiments.traffic.iperf3 import FlowResult, concurrent_window, parse_client_json, start_skew, window_figures
from experiments.traffic.model import ExperimentSpec, Flow, TestCase, client_argv, plan_flows, server_ip
from experiments.traffic.mux import engine_plans, flow_result
from flightsw import protocol as proto
from swarm.errors import CommandError
from swarm.mesh.plan import healed_pairs, mesh_row
from swarm.runtime.mesh import MeshWatcher
from swarm.runtime.clocks import NodeClocks
from swarm.runtime.swarm import Swarm

# ------------------------------------------------------------------------------------------ running
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


def _release_lead(flow_count: int) -> float:
    """Seconds between sending the release instant and the instant itself."""
    return 0.3 + 0.0002 * flow_count


class TestRunner:
    """Runs the tests of one size on one swarm that is up."""

    def __init__(self, swarm: Swarm, exp: ExperimentSpec, store: ResultsStore, message: Callable[[str], None]):
        self.swarm = swarm
        self.exp = exp
        self.store = store
        self.message = message
        self.workers = max(4, min(32, len(swarm.nodes)))
        self.on_release: Callable[[float], None] | None = None  # called with the release instant (fault timeline)
        self.clocks = NodeClocks({})  # node clocks against this machine's, measured per test (multi-host swarms)

    def measure_clocks(self) -> None:
        """Each node's clock offset, measured now (one probe conversation per host; nothing on one host)."""
        self.clocks = self.swarm.node_clocks()

    def _agent(self, node: str, *args: str) -> list[str]:
        return self.swarm.backend.agent_argv(self.swarm.name, node, *args)

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
        release = time.time() + _release_lead(len(flows))
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

    def cleanup(self) -> None:
        """Kill every traffic process the agents started; a node that does not answer in time is reported
        (its leftovers die with the swarm at `down`), not fatal to the sweep."""
        def clean(node) -> str:
            try:
                self.swarm.runner.run(self._agent(node.name, proto.CLEANUP), check=False, timeout=120)
            except CommandError as exc:
                return f"cleanup on {node.name}: {exc}"
            return ""

        with ThreadPoolExecutor(self.workers) as pool:
            for problem in pool.map(clean, self.swarm.nodes):
                if problem:
                    self.message(problem)

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

    def _timeline(self, test: TestCase) -> FaultTimeline | None:
        """The test's fault timeline (None without faults), with a mesh watcher when the swarm has a mesh."""
        if not self.exp.faults:
            return None
        timeline: Any = FaultTimeline(self.swarm.links, self.exp.faults, test.test_id, self.store.run_id, self.message)
        if self.swarm.spec.mesh.enabled:
            timeline.watcher = MeshWatcher(self.swarm.mesh, self.store.append_mesh, self.store.run_id,
                                           test.test_id, test.size)
        return timeline

    def _finish_timeline(self, timeline, test: TestCase) -> None:
        """Back to the spec's conditions (nodes restarted, cuts healed) before the next test, and the mesh
        settled again, so that the next test starts on a converged mesh."""
        if not timeline:
            return
        cuts = self.swarm.links.load().cuts
        self.store.append_faults(timeline.finish(timeout=self.exp.duration + 30))
        if timeline.watcher:
            self._mesh_restored(timeline.watcher, test, cuts)

    def _mesh_restored(self, watcher, test: TestCase, cuts_before: set) -> None:
        watcher.finish()
        mesh = self.swarm.mesh
        timing = mesh.wait_converged(time.time(), direct=healed_pairs(cuts_before, self.swarm.links.load().cuts))
        self.store.append_mesh(mesh_row(self.store.run_id, test.test_id, test.size, mesh.implementation or "", "restore",
                                        "after the test", timing))
        if not timing["converged"]:
            self.message(f"{test.test_id}: mesh not converged after restoring the links ({timing.get('problem', '')})")

    def _record(self, test, flows, parsed, release, release_spread, sampler, setup_s, wall_s) -> dict:
        """Write one row per flow and the test's row; `parsed` is {flow id: (Flow, record, FlowResult)}."""
        ok = [r for _, _, r in parsed.values() if r.ok]
        t0, t1 = concurrent_window(ok)
        window_s = (t1 - t0) if not math.isnan(t0) else 0.0
        skew = start_skew([r.spawn_ts for r in ok])  # spawn_ts holds each flow's inferred data start
        rows = []
        for f, rec, r in parsed.values():
            win = window_figures(r, t0, t1) if r.ok and window_s > 0 else {}
            rows.append({
                "run_id": self.store.run_id, "test_id": test.test_id, "size": test.size, "protocol": test.protocol,
                "rate_bps": test.rate_bps if test.rate_bps is not None else "", "repeat": test.repeat,
                "src": f.src.name, "dst": f.dst.name, "port": f.port, "start_ts": r.spawn_ts if r.spawn_ts is not None else "",
                "release_ts": rec.get("release_ts", ""),
                "exit_ts": rec.get("exit_ts", ""), "ok": r.ok, "error": r.error,
                "bits_per_second": r.bits_per_second, "sent_bits_per_second": r.sent_bits_per_second,
                "lost_percent": r.lost_percent,
                "lost_packets": r.lost_packets, "packets": r.packets, "jitter_ms": r.jitter_ms,
                "window_bits_per_second": win.get("bits_per_second", math.nan),
                "window_lost_percent": win.get("lost_percent", math.nan),
                "skew_s": round(skew, 6), "window_s": round(window_s, 6), "duration_s": self.exp.duration,
                # bits_per_second is bytes over the receiver's seconds: a receiver reading late (busy host) or
                # link delay and queueing stretch them past the sender's
                "receiver_s": r.duration, "sender_s": r.sent_seconds,
            })
        self.store.append_flows(rows)
        test_row = {"run_id": self.store.run_id, "test_id": test.test_id, "size": test.size,
                    "protocol": test.protocol, "rate_bps": test.rate_bps or "", "repeat": test.repeat,
                    "flows": len(flows), "flows_ok": len(ok), "duration_s": self.exp.duration,
                    "release_ts": round(release, 6), "release_spread_s": round(release_spread, 6),
                    "skew_s": round(skew, 6), "window_s": round(window_s, 6),
                    "window_fraction": round(window_s / self.exp.duration, 4), **sampler.summary(),
                    "setup_s": round(setup_s, 3), "wall_s": round(wall_s, 3),
                    # stamps of different hosts compare only to within this: a smaller skew is not resolved
                    "clock_uncertainty_s": round(self.clocks.resolution_s, 6)}
        self.store.append_test(test_row)
        return test_row


class MuxTestRunner(TestRunner):
    """Runs tests with the multiplexing engine (`engine: mux`): one traffic process per node.

    Steps: every node's engine binds its receiver and says so; TCP flows connect (and identify
    themselves) while nothing is sent yet; the host sends one release instant; every engine starts all
    its flows at that instant on the shared clock and stamps each flow's real first and last send.
    """

    _SETUP_TIMEOUT_S = 120.0
    node_engines: dict[str, str]  # {node: the engine its "connected" reply named}

    def run(self, test: TestCase) -> dict:
        t_start = time.monotonic()
        self.node_engines = {}
        self.measure_clocks()
        flows = plan_flows(self.swarm.nodes, self.exp.pattern, self.exp.base_port)
        plans = engine_plans(flows, self.exp, test)
        procs = {node: self.swarm.runner.popen(self._agent(node, proto.MUX)) for node in plans}
        failed: dict[str, str] = {}
        timeline = None
        try:
            slowest_step = self._connect(procs, failed, plans)
            setup_s = time.monotonic() - t_start
            timeline = self._timeline(test)
            with HostSampler() as sampler:
                # The instant must reach every engine before it passes: through `docker exec` on a loaded
                # host that took seconds, so the lead grows with the slowest set-up round trip.
                release = time.time() + min(30.0, max(_release_lead(len(flows)), 2 * slowest_step))
                if timeline:
                    timeline.start(release)
                for node, proc in procs.items():
                    if node not in failed:
                        self._send(proc, node, proto.mux_release_line(self.clocks.to_node(node, release), self.exp.duration),
                                   failed)
                reports = self._collect(procs, failed, timeout=self.exp.duration + 60 + len(flows) * 0.01)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
            self._finish_timeline(timeline, test)
            self.cleanup()
        wakes = [r[proto.RELEASE_TS] for r in reports.values() if proto.RELEASE_TS in r]
        spread = (max(wakes) - min(wakes)) if wakes else math.nan
        parsed = self._results(test, flows, reports, failed, release)
        return self._record(test, flows, parsed, release, spread, sampler, setup_s, time.monotonic() - t_start)

    def _results(self, test: TestCase, flows: list[Flow], reports: dict[str, dict], failed: dict[str, str],
                 release: float) -> dict:
        """{flow id: (Flow, record, FlowResult)} from the engines' reports; each flow's raw record written."""
        parsed = {}
        for f in flows:
            send = reports.get(f.src.name, {}).get((proto.SEND, f.flow_id))
            recv = reports.get(f.dst.name, {}).get((proto.RECV, f.flow_id))
            result = flow_result(test.protocol, send, recv, release, self.exp.duration, self.exp.iperf3.interval)
            if not result.ok and (f.src.name in failed or f.dst.name in failed):
                result = dataclasses.replace(result, error=failed.get(f.src.name) or failed[f.dst.name])
            self.store.raw_path(test.test_id, f.flow_id).write_text(
                json.dumps({"engine": "mux", "sender_engine": self.node_engines.get(f.src.name, ""),
                            "receiver_engine": self.node_engines.get(f.dst.name, ""), "release": release, "send": send, "recv": recv}))
            rec = {"release_ts": reports.get(f.src.name, {}).get(proto.RELEASE_TS, ""),
                   "exit_ts": (send or {}).get("last_send_ts") or ""}
            parsed[f.flow_id] = (f, rec, result)
        return parsed

    def _connect(self, procs, failed: dict[str, str], plans: dict[str, dict]) -> float:
        """Steps 1 and 2 of the engine protocol (plans -> listening, connect -> connected); the slowest step (s)."""
        step_start = time.monotonic()
        self._step(procs, failed, {n: proto.dumps(p) for n, p in plans.items()}, proto.LISTENING)
        slowest_step = time.monotonic() - step_start
        step_start = time.monotonic()
        connected = self._step(procs, failed, {n: proto.CONNECT for n in procs}, proto.CONNECTED)
        slowest_step = max(slowest_step, time.monotonic() - step_start)
        for reply in connected.values():
            for fid, error in (reply.get(proto.ERRORS) or {}).items():
                self.message(f"{fid}: {error}")
        # which engine each node ran (Rust or Python), kept in every flow's raw record
        self.node_engines = {node: reply.get(proto.ENGINE, "") for node, reply in connected.items()}
        return slowest_step

    def _send(self, proc, node: str, line: str, failed: dict[str, str]) -> None:
        try:
            proc.stdin.write(line if line.endswith("\n") else line + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            failed[node] = f"traffic engine on {node} went away"

    def _step(self, procs, failed: dict[str, str], lines: dict[str, str], expect: str) -> dict[str, dict]:
        """Send each node its line, wait for every engine's `expect` reply (in parallel)."""
        for node, line in lines.items():
            if node not in failed:
                self._send(procs[node], node, line, failed)

        def reply(node: str) -> tuple[str, dict | None, str]:
            line = procs[node].stdout.readline()
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and expect in doc:
                return node, doc, ""
            return node, None, f"traffic engine on {node}: {(line + procs[node].stderr.read()).strip()[-300:] or 'no reply'}"

        alive = [n for n in lines if n not in failed]
        out: dict[str, dict] = {}
        with ThreadPoolExecutor(self.workers) as pool:
            for node, doc, error in pool.map(reply, alive):
                if error or doc is None:
                    failed[node] = error
                else:
                    out[node] = doc
        return out

    def _collect(self, procs, failed: dict[str, str], timeout: float) -> dict[str, dict]:
        """{node: {"release_ts": t, ("send"|"recv", flow id): record}} from every engine's final lines."""
        deadline = time.monotonic() + timeout

        def read(node: str) -> tuple[str, dict]:
            got: dict = {}
            proc = procs[node]
            for line in proc.stdout:
                doc = json.loads(line) if line.startswith("{") else {}
                if proto.SIDE in doc:
                    got[(doc[proto.SIDE], doc[proto.ID])] = self.clocks.fix(node, doc)
                elif proto.RELEASE_TS in doc:
                    got[proto.RELEASE_TS] = self.clocks.from_node(node, doc[proto.RELEASE_TS])
                elif doc.get(proto.DONE):
                    break
                if time.monotonic() > deadline:
                    break
            return node, got

        alive = [n for n in procs if n not in failed]
        pool = ThreadPoolExecutor(self.workers)
        futures = {pool.submit(read, n): n for n in alive}
        done, late = wait(futures, timeout=max(1.0, deadline - time.monotonic()))
        for fut in late:  # a hung engine: kill it so its reader returns
            procs[futures[fut]].kill()
        pool.shutdown(wait=True)
        reports = {futures[fut]: fut.result()[1] for fut in done}
        for node in procs:
            if node not in failed and proto.RELEASE_TS not in reports.get(node, {}):
                proc = procs[node]
                if proc.poll() is None:
                    proc.kill()
                why = (proc.stderr.read() or "").strip().splitlines()[-1:] or ["no output"]
                failed[node] = f"traffic engine on {node} gave no report: {why[0][-300:]}"
        return reports


TEST_RUNNERS = {"iperf3": TestRunner, "mux": MuxTestRunner}
