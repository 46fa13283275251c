"""Bundle traffic of an orbits run with `dtn:`: every node's agent (started by `swarm up` from the spec's
`dtn:` piece, swarm.dtn) gets the DTN experiment's traffic program (flightsw/dtn_traffic.py) with its plan;
all start at the run's release instant, while the link-timeline driver makes the links follow the orbit.
Afterwards the programs' events and the agents' logs go to raw/dtn/ verbatim, and bundles.csv gets one
row per bundle judged against the exact contact plan (experiments.orbits.bundles); store.csv the stores.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from experiments.dtn.parse import STORE_COLUMNS, bundle_rows, read_events, store_rows
from experiments.dtn.run import TrafficReader, start_program
from experiments.orbits.bundles import ORBIT_BUNDLE_COLUMNS, judge, last_hops, summary
from experiments.orbits.model import OrbitsExperiment
from experiments.orbits.plan import traffic_plans
from swarm.dtn.contacts import ContactPlan, parse_contact_plan

if TYPE_CHECKING:
    from experiments.store import ResultsStore
    from swarm.runtime.swarm import Swarm

RELEASE_LEAD_S = 2.0  # plans handed out -> release: every program and agent connection is ready by then


class DtnTraffic:
    """The traffic programs of one run: start at the release, wait for their end, collect and judge."""

    def __init__(self, exp: OrbitsExperiment, swarm: "Swarm", store: "ResultsStore",
                 message: Callable[[str], None] = lambda m: None):
        self.exp, self.swarm, self.store, self.message = exp, swarm, store, message
        self.raw = store.dir / "raw" / "dtn"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.procs: dict = {}
        self.readers: dict[str, TrafficReader] = {}
        self.release = 0.0
        self.until = 0.0

    def start(self, release: float, wall_s: float) -> None:
        agents = self.swarm.dtn
        port = int(agents.client(agents.nodes[0].name).get("port", 0))  # each program's client is set at its start
        self.release = release
        plans = traffic_plans(self.exp, release, wall_s, port)
        self.until = release + max(p["duration"] + p["drain"] for p in plans.values())
        for node, plan in plans.items():
            self.procs[node], self.readers[node] = start_program(self.swarm, node, plan,
                                                                self.raw / f"{node}.traffic.jsonl")

    def wait(self, progress: Callable[[float, float, str], None] = lambda d, t, w: None) -> None:
        """Until every program ended (they stop at their plan's end), at most a minute past it."""
        while any(p.poll() is None for p in self.procs.values()):
            left = self.until - time.time()
            if left < -60:
                self.message("dtn: traffic programs still running a minute after their end: stopped")
                break
            progress(max(0.0, -left), max(0.0, -left) + max(left, 0.0), "DTN: receivers draining")
            time.sleep(0.5)
        for r in self.readers.values():
            r.join(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()

    def collect(self, exact_plan: Path, tolerance_s: float, routers: Optional[ContactPlan] = None) -> dict:
        """raw/dtn/ (programs' events, agents' logs), bundles.csv and store.csv; returns the summary.
        `routers`: what the routers' contact plan gives them (bundles.router_plan), judged beside the links."""
        agents = self.swarm.dtn
        for node, proc in self.procs.items():
            if proc.returncode not in (0, -15, None):
                err = proc.stderr.read() if proc.stderr else ""
                self.message(f"dtn: traffic program on {node} exited {proc.returncode}: {err.strip()[-300:]}")
        logs = {}
        for n in agents.nodes:
            text = agents.log(n.name)
            (self.raw / f"{n.name}.dtnd.log").write_text(text)
            logs[n.name] = agents.log_events(n.name, text)
        events = {n: read_events("".join(r.lines)) for n, r in self.readers.items()}
        rows = bundle_rows(events, events, logs, self.store.run_id, "dtn")
        agent_nodes = frozenset(n.name for n in agents.nodes)  # a path through a node without an agent is none
        plan = parse_contact_plan(exact_plan.read_text(), exact_plan.name).among(agent_nodes)
        routers = routers.among(agent_nodes) if routers is not None else None
        hops = last_hops(logs, {n.name: n.isl_ip for n in self.swarm.nodes})
        judged = judge(rows, plan, self.release, tolerance_s, hops, routers)
        self.store.append("bundles.csv", ORBIT_BUNDLE_COLUMNS, judged)
        self.store.append("store.csv", STORE_COLUMNS, store_rows(events, self.release, self.store.run_id, "dtn"))
        return summary(judged)


__all__ = ["DtnTraffic", "traffic_plans", "RELEASE_LEAD_S"]
