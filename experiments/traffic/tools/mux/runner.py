"""One test with the multiplexing tool (`MuxRunner`): one traffic process per node carries all of its flows."""
from __future__ import annotations

import dataclasses
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor, wait

from experiments.store import HostSampler
from experiments.traffic.model import Flow, TestCase, plan_flows
from experiments.traffic.tools.mux import Mux
from experiments.traffic.tools.mux.plan import engine_plans
from experiments.traffic.tools.mux.result import flow_result
from experiments.traffic.tools.runner import ToolRunner, release_lead
from flightsw import protocol as proto


class MuxRunner(ToolRunner):
    """Runs tests with the multiplexing engine (`engine: mux`): one traffic process per node.

    Steps: every node's engine binds its receiver and says so; TCP flows connect (and identify
    themselves) while nothing is sent yet; the host sends one release instant; every engine starts all
    its flows at that instant on the shared clock and stamps each flow's real first and last send.
    """

    tool = Mux()
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
                release = time.time() + min(30.0, max(release_lead(len(flows)), 2 * slowest_step))
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
                json.dumps(self.tool.raw_record(send, recv, release, self.node_engines.get(f.src.name, ""),
                                                self.node_engines.get(f.dst.name, ""))))
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
