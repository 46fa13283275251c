"""The part of running one test that every traffic tool shares (`ToolRunner`): the swarm, clocks of its
hosts, the fault timeline and the mesh around the test, cleanup, and the rows it writes (one per flow, one per
test) from the tool-neutral FlowResults. Each tool's runner (tools/<tool>/runner.py) subclasses it with `run`.
The sweep loop around them is experiments/traffic/run.py; what the host says to the in-node programs is
flightsw/protocol.py.
"""
from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from experiments.store import ResultsStore
from experiments.timeline import FaultTimeline
from experiments.traffic.model import ExperimentSpec, TestCase
from experiments.traffic.tools.base import Tool
from experiments.traffic.tools.result import concurrent_window, start_skew, window_figures
from flightsw import protocol as proto
from swarm.errors import CommandError
from swarm.mesh.plan import healed_pairs, mesh_row
from swarm.runtime.clocks import NodeClocks
from swarm.runtime.mesh import MeshWatcher
from swarm.runtime.swarm import Swarm


def release_lead(flow_count: int) -> float:
    """Seconds between sending the release instant and the instant itself."""
    return 0.3 + 0.0002 * flow_count


class ToolRunner(ABC):
    """Runs the tests of one size on one swarm that is up, with the tool `tool`."""

    tool: Tool

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

    @abstractmethod
    def run(self, test: TestCase) -> dict:
        """Run one test end to end; rows go to the store before this returns."""

    def _timeline(self, test: TestCase) -> FaultTimeline | None:
        """The test's fault timeline (None without faults), with a mesh watcher when the swarm has a mesh."""
        if not self.exp.faults:
            return None
        timeline: Any = FaultTimeline(self.swarm.links, self.exp.faults, test.test_id, self.store.run_id, self.message)
        if self.swarm.spec.mesh.enabled:
            timeline.watcher = MeshWatcher(self.swarm.mesh, self.store.append_mesh, self.store.run_id,
                                           test.test_id, test.size)
        timeline.prepare()  # planned before the test fixes its release
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
