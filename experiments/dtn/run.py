"""Running a `dtn` experiment: per test a fresh swarm with its agents, bundle traffic from every source, the
contact plan and faults on a timeline, then the tables.

Per test:
1. the test's swarm comes up (netns or compose) with a dtnd on every node and waits until all agents answer and
   list their peers (swarm.runtime.dtn);
2. links not in contact at time 0 are cut (contact plan), then every node's traffic program
   (flightsw/dtn_traffic.py) gets its plan: the bundles it sends (a fixed count at a fixed rate, or as many as its
   agent accepts), what it receives, its store sampling and the UDP probe beside each flow; all start at one
   release instant; the contact plan's later events and the experiment's faults run on the fault timeline
   from that instant;
3. the programs' JSON lines go to raw/<test>/<node>.traffic.jsonl as they arrive; the agents' logs are copied
   to raw/<test>/<node>.dtnd.log; bundles.csv, store.csv, ip.csv, faults.csv and a tests.csv row are appended;
4. the swarm goes down (also on Ctrl-C or an error: everything the test made is removed).
"""
from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from experiments.dtn.model import MAX_RATE, DtnExperiment, DtnTest, flows, swarm_nodes
from experiments.dtn.parse import (IP_COLUMNS, BUNDLE_COLUMNS, STORE_COLUMNS, bundle_rows, figures, first_failure,
                                   ip_rows, read_events, store_rows)
from experiments.dtn.plan import traffic_plans
from experiments.loop import RunContext, Loop, run_tests
from experiments.store import HostSampler, ResultsStore, host_facts
from experiments import fault_schedule
from experiments.fault_schedule import hold_check, link_only, plan_instants, timeline_windows, window_size
from experiments.timeline import FaultEvent, FaultTimeline
from swarm.dtn.contacts import down_windows
from swarm.dtn.plan import node_rtts
from swarm.runtime.dtn import link_delays_ms
from swarm.errors import RuntimeFailure, SpecError
from flightsw import protocol as proto
from swarm.runtime.swarm import Swarm
from swarm.spec.model import SwarmSpec
from netem.state import LinkState

RELEASE_LEAD_S = 2.0  # between handing out the plans and the release: every program is running by then
DTN_TEST_COLUMNS = ["run_id", "test_id", "pattern", "size", "nodes", "cla", "routing", "profile", "bundle_size",
                    "rate", "repeat", "flows", "duration_s", "drain_s", "release_ts", "bundles_sent", "bundles_delivered",
                    "delivery_ratio", "latency_p50_s", "latency_p95_s", "latency_max_s", "latency_min_s", "goodput_bps",
                    "total_rate_bps", "bundle_rate", "offered_bundle_rate", "span_s", "duplicates", "send_errors",
                    "store_peak_bundles", "hops_mean", "ip_sent", "ip_lost", "cpu_busy_pct", "cpu_busy_max_pct",
                    "mem_used_peak_mib", "agents_ready_s", "setup_s", "wall_s", "ltp_segment", "isl_mtu", "src_agent",
                    "dst_agent", "failure"]
#: matrix_gaps.csv: the cells of an interop matrix (`agents`) that are not run, and why (DtnExperiment.matrix_gaps)
MATRIX_GAPS = "matrix_gaps.csv"
MATRIX_GAP_COLUMNS = ["src_agent", "dst_agent", "cla", "bundle_size", "reason"]
#: BPv7 header bytes dtn7-rs's /send adds to a payload (primary block with its CRC-32C, payload and hop-count
#: block headers): 100,082 - 100,000 measured on recorded bundles of the published crate, + 5 for the CRC the
#: patch adds (images/dtn/dtn7-0.21.0.patch item 6).
BUNDLE_OVERHEAD = 87


#: ltp.csv: swarm-ltpcla's counters per node at the end of a test (cla: ltp)
LTP_COLUMNS = ["run_id", "test_id", "node", "blocks_queued", "blocks_sent", "blocks_done", "blocks_received",
               "bytes_sent", "bytes_received", "segments_out", "segments_in", "retransmitted_segments",
               "retransmitted_bytes", "cancels", "recv_cancels", "refused", "dropped", "send_would_block",
               "sndbuf", "rcvbuf", "dtnd_handed_over", "lost_in_dtnd_channel", "cpu_s"]


class TrafficReader(threading.Thread):
    """Copies one traffic program's output to its raw file as it arrives and keeps the events."""

    def __init__(self, proc, path: Path):
        super().__init__(daemon=True)
        self.proc, self.path = proc, path
        self.lines: list[str] = []
        self.finished_receiving = False  # the program's receiver stopped (every expected bundle, or quiet)

    def run(self) -> None:
        with self.path.open("w") as f:
            for line in self.proc.stdout:
                f.write(line)
                f.flush()
                self.lines.append(line)
                if proto.is_event(line, proto.EV_RECV_DONE):
                    self.finished_receiving = True


def start_program(swarm: Swarm, node: str, plan: dict, out: Path) -> tuple[Any, TrafficReader]:
    """Start `node`'s traffic program with its plan on stdin, told how to talk to the node's agent (its adapter's
    client); a reader copies its output to `out` as it arrives."""
    proc = swarm.runner.popen(swarm.dtn.traffic_argv(node, proto.DTN_RUN, proto.STDIN))
    stdin = proc.stdin
    assert stdin is not None  # the runner's popen opens stdin
    stdin.write(proto.dumps({**plan, **swarm.dtn.client(node)}))
    stdin.close()
    reader = TrafficReader(proc, out)
    reader.start()
    return proc, reader


def _cut_before_release(links, initial, run_id: str, test_id: str) -> list[dict]:
    """Cut the links the contact plan has down at 0, before the release, so no bundle sees them; faults.csv rows."""
    rows = []
    for e in initial:
        began = time.time()
        links.cut(e.a, e.b)
        rows.append({"run_id": run_id, "test_id": test_id, "index": -1, "at_s": 0.0,
                     "planned_ts": "", "applied_ts": round(time.time(), 6), "offset_s": "",
                     "took_s": round(time.time() - began, 6), "kind": "cut", "args": f"{e.a} {e.b}",
                     "ok": True, "error": "contact plan: not in contact at 0"})
    return rows


def _record_ltp(agents, dtnd_logs: dict[str, str], raw: Path, store: ResultsStore, test_id: str,
                message: Callable[[str], None]) -> None:
    """cla: ltp: each node's record of blocks, retransmissions and cancels (raw/), and one ltp.csv row of its
    counters beside what dtnd handed over, so bundles dtnd dropped in its ECLA channel are counted, not silent."""
    ltp_rows = []
    for n in agents.nodes:
        (raw / f"{n.name}.ltp.csv").write_text(agents.ltp_record(n.name))
        counters = agents.ltp_status(n.name)
        handed = agents.handovers(n.name, dtnd_logs[n.name], "ltp")
        queued = counters.get("blocks_queued")
        ltp_rows.append({"run_id": store.run_id, "test_id": test_id, "node": n.name,
                         **{k: counters.get(k, "") for k in LTP_COLUMNS[3:-3]}, "dtnd_handed_over": handed,
                         "lost_in_dtnd_channel": handed - queued if isinstance(queued, int) else "",
                         "cpu_s": agents.ltp_cpu_seconds(n.name) or ""})
        if isinstance(queued, int) and handed > queued:
            message(f"{test_id}: {n.name}: dtnd handed {handed} bundles to its ltp module, which "
                    f"received {queued}: {handed - queued} lost in dtnd's 100-slot ECLA channel")
    store.append("ltp.csv", LTP_COLUMNS, ltp_rows)


class DtnCase:
    """One test of a `dtn` experiment on its swarm, once that is up: the traffic programs, the contact plan and
    faults on a timeline from one release instant, then the tables (`run`)."""

    def __init__(self, ctx: RunContext):
        self.ctx, self.exp, self.store = ctx, ctx.exp, ctx.store
        self.wall = time.time()  # when the test's swarm started coming up (its setup_s and wall_s count from here)

    def starting(self, test: DtnTest, i: int, n: int) -> None:
        self.wall = time.time()
        (self.store.dir / "raw" / test.test_id).mkdir(parents=True, exist_ok=True)
        self.ctx.progress(0, self.exp.duration + self.exp.drain, f"{test.test_id}: swarm up")
        self.ctx.message(f"test {i}/{n}: {test.test_id}")

    def run(self, swarm: Swarm, test: DtnTest) -> dict:
        """One test, start to finish on a swarm that is up; returns its tests.csv row."""
        exp, store = self.exp, self.store
        raw = store.dir / "raw" / test.test_id
        procs: dict = {}
        timeline = None
        try:
            if not (store.dir / "swarm.json").exists():
                (store.dir / "host.json").write_text(json.dumps(host_facts(swarm), indent=1))
                (store.dir / "swarm.json").write_text(json.dumps({"backend": swarm.backend.name}))
            nodes = swarm_nodes(test.size)
            contact = exp.contact_events(nodes)
            initial, later = split_contacts(exp, contact)
            fault_rows = _cut_before_release(swarm.links, initial, store.run_id, test.test_id)
            setup = time.time() - self.wall
            timeline = FaultTimeline(swarm.links, list(exp.faults) + later, test.test_id, store.run_id, self.ctx.message)
            timeline.prepare()  # planned before the release is fixed: a long contact plan never eats its lead
            release = time.time() + RELEASE_LEAD_S
            if contact and swarm.dtn.ltp:  # cla: ltp: no sending and retransmission timers suspended while down
                swarm.dtn.set_ltp_down(down_windows(contact, exp.duration + exp.drain), release)
            if contact and exp.contacts is not None:  # agents that route by a contact plan (ION) are given it
                plan = exp.contact_plan(nodes)
                assert plan is not None
                for note in swarm.dtn.load_contacts(plan, release, exp.contacts.others):
                    self.ctx.message(f"{test.test_id}: contact plan not taken whole: {note}")
            plans, readers = self._start_programs(swarm, test, release, raw, procs)
            timeline.start(release)
            with HostSampler() as sampler:
                self._wait(test, plans, procs, readers, release, timeline)
            for r in readers.values():
                r.join(10)
            fault_rows += timeline.finish(restore=False, timeout=5)
            timeline = None
            return self._tables(swarm, test, procs, readers, fault_rows, release, sampler.summary(), setup)
        finally:
            if timeline is not None:
                timeline.stop()
                timeline.finish(restore=False, timeout=5)
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()

    def _start_programs(self, swarm: Swarm, test: DtnTest, release: float, raw: Path,
                        procs: dict) -> tuple[dict[str, dict], dict[str, TrafficReader]]:
        """Every node's traffic program with its plan (nodes with nothing to send, receive or sample get none)."""
        agents, nodes = swarm.dtn, swarm_nodes(test.size)
        isl = {n.name: n.isl_ip for n in swarm.nodes}
        port = int(agents.client(nodes[0]).get("port", 0))  # each program's own client is set at its start
        rtt = max(node_rtts(nodes, link_delays_ms(swarm.spec.links, nodes)).values(), default=0.0)
        plans = traffic_plans(self.exp, test, isl, release, port, rtt, {n: agents.app_eid(n) for n in nodes})
        readers = {}
        for node, plan in plans.items():
            if not plan["flows"] and not plan["receive"] and not self.exp.store_interval:
                continue
            procs[node], readers[node] = start_program(swarm, node, plan, raw / f"{node}.traffic.jsonl")
        return plans, readers

    def _wait(self, test: DtnTest, plans: dict[str, dict], procs: dict, readers: dict[str, TrafficReader],
              release: float, timeline: FaultTimeline) -> None:
        """Until every program ended: once every receiver finished (after the sending time), a last store
        sample or two, then the rest is stopped; RuntimeFailure a minute past the horizon."""
        exp = self.exp
        horizon = exp.duration + exp.drain
        receivers = [n for n, p in plans.items() if p["receive"] and n in procs]
        while any(p.poll() is None for p in procs.values()):
            elapsed = time.time() - release
            if elapsed > exp.duration + 1 and receivers and all(readers[n].finished_receiving for n in receivers):
                time.sleep(min(2.0, exp.store_interval * 2))  # a last store sample or two, then stop the rest
                for p in procs.values():
                    if p.poll() is None:
                        p.terminate()
                continue
            if elapsed > horizon + 60:
                raise RuntimeFailure(f"test {test.test_id}: traffic programs still running {horizon + 60:.0f} s "
                                     "after the release")
            self.ctx.progress(max(0.0, min(elapsed, horizon)), horizon, f"{test.test_id}: {len(timeline.rows)} faults applied")
            time.sleep(0.5)

    def _tables(self, swarm: Swarm, test: DtnTest, procs: dict, readers: dict[str, TrafficReader],
                fault_rows: list[dict], release: float, host: dict, setup: float) -> dict:
        """raw/ (agents' logs), bundles.csv, store.csv, ip.csv, faults.csv, ltp.csv and the tests.csv row."""
        exp, store, message = self.exp, self.store, self.ctx.message
        agents, raw, nodes = swarm.dtn, store.dir / "raw" / test.test_id, swarm_nodes(test.size)
        for node, proc in procs.items():
            err = proc.stderr.read() if proc.stderr else ""
            if proc.returncode not in (0, -15):  # -15: stopped by us once every bundle had arrived
                message(f"{test.test_id}: traffic program on {node} exited {proc.returncode}: {err.strip()[-300:]}")
        logs, texts = {}, {}
        for n in agents.nodes:
            text = texts[n.name] = agents.log(n.name)
            (raw / f"{n.name}.dtnd.log").write_text(text)
            logs[n.name] = agents.log_events(n.name, text)
        if agents.ltp:
            _record_ltp(agents, texts, raw, store, test.test_id, message)
        events = {n: read_events("".join(r.lines)) for n, r in readers.items()}
        bundles = bundle_rows(events, events, logs, store.run_id, test.test_id)
        stores = store_rows(events, release, store.run_id, test.test_id)
        ips = ip_rows(events, events, release, store.run_id, test.test_id)
        store.append("bundles.csv", BUNDLE_COLUMNS, bundles)
        store.append("store.csv", STORE_COLUMNS, stores)
        if ips:
            store.append("ip.csv", IP_COLUMNS, ips)
        if fault_rows:
            store.append_faults(fault_rows)
        m = figures(bundles, stores, BUNDLE_OVERHEAD)
        pairs = flows(exp.pattern, nodes)
        failure = ""
        if m["bundles_delivered"] < m["bundles_sent"] or m.get("send_errors"):
            failure = _failure(agents, pairs, texts, bundles, release) or (
                f"{m['bundles_sent'] - m['bundles_delivered']} not delivered within the drain ({exp.drain:g} s); no "
                "failure in the agents' logs")
        spec = exp.swarm_spec(test)  # the test's swarm as the experiment wrote it (segment, MTU)
        row = {"run_id": store.run_id, "test_id": test.test_id, "pattern": exp.pattern, "size": test.size,
               "nodes": len(nodes), "cla": test.cla, "routing": test.routing, "profile": test.profile,
               "bundle_size": test.bundle_size, "rate": "max" if test.rate == MAX_RATE else test.rate,
               "repeat": test.repeat, "flows": len(flows(exp.pattern, nodes)), "duration_s": exp.duration,
               "drain_s": exp.drain, "release_ts": round(release, 6), **_rounded(m),
               "ip_sent": sum(r["sent"] for r in ips), "ip_lost": sum(r["lost"] for r in ips),
               **host, "agents_ready_s": round(swarm.dtn_seconds or 0.0, 3),
               "setup_s": round(setup, 3), "wall_s": round(time.time() - self.wall, 3),
               "ltp_segment": (spec.defaults.dtn.ltp.segment if test.cla == "ltp" and spec.defaults.dtn else ""),
               "isl_mtu": spec.networks.isl.mtu, "src_agent": agents.agent(pairs[0][0]).name,
               "dst_agent": agents.agent(pairs[0][1]).name, "failure": failure}
        store.append("tests.csv", DTN_TEST_COLUMNS, [row])
        return row


def _failure(agents, pairs: list[tuple[str, str]], texts: dict[str, str], bundles: list[dict], release: float) -> str:
    """What went wrong in a test that lost bundles, in the peers' own words: the first failure line of the
    receivers' agent logs since the release, then the senders', then the others'; else the first send error."""
    order = list(dict.fromkeys([d for _, d in pairs] + [s for s, _ in pairs] + [n.name for n in agents.nodes]))
    failure = first_failure({n: agents.failure_lines(n, texts[n]) for n in order if n in texts}, order, release)
    return failure or next((f"{b['src']}: {b['error']}" for b in bundles if b["error"]), "")


def _rounded(m: dict) -> dict:
    return {k: (round(v, 6) if isinstance(v, float) and not math.isnan(v) else ("" if isinstance(v, float) else v))
            for k, v in m.items()}


def run_dtn_experiment(exp: DtnExperiment, store: ResultsStore, *, backend: Optional[str] = None,
                       message: Callable[[str], None] = lambda m: None,
                       progress: Callable[[float, float, str], None] = lambda d, t, w: None) -> Path:
    """Every test of the sweep missing from `store`, in order (`run --resume` runs only those an interrupted run
    did not finish), into `store`; returns the run folder."""
    return run(RunContext(exp, store, backend=backend, message=message, progress=progress))


def run(ctx: RunContext) -> Path:
    """The `dtn` type's run (experiments/registry.py), through the one run loop: a fresh swarm per test."""
    exp = ctx.exp
    case = DtnCase(ctx)

    def after(_test: DtnTest, row: dict) -> None:
        ctx.message(f"  delivered {row['bundles_delivered']}/{row['bundles_sent']} bundles, "
                    f"goodput {row['goodput_bps'] / 1e6:.1f} Mbit/s, latency p95 {row['latency_p95_s']} s")

    gaps = exp.matrix_gaps()  # an interop matrix's cells that cannot run, and why: the report shows them
    if gaps and not (ctx.store.dir / MATRIX_GAPS).exists():
        ctx.store.append(MATRIX_GAPS, MATRIX_GAP_COLUMNS, gaps)
    done = ctx.store.completed_tests()  # `run --resume`: the tests an interrupted run finished are kept, not rerun
    run_tests(ctx, Loop(tests=[t for t in exp.tests() if t.test_id not in done], swarm_of=exp.swarm_spec,
                        run_test=case.run, resumable=False, starting=case.starting, after=after, announce_up=False))
    return ctx.store.dir


def split_contacts(exp: DtnExperiment, contact: list) -> tuple[list, list[FaultEvent]]:
    """(the links down at the release, cut before it; the later changes, as fault events of the timeline)."""
    initial = [e for e in contact if e.at == 0 and e.action == "down"]
    later = [FaultEvent(at=e.at, **({"cut": [e.a, e.b]} if e.action == "down" else {"heal": [e.a, e.b]}))
             for e in contact if not (e.at == 0 and e.action == "down") and e.at < exp.duration + exp.drain]
    return initial, later


def plan_check(exp: DtnExperiment, schedules: bool = True) -> str:
    """For `run --check`: how long the largest test's timeline (faults and contact changes) takes to plan for
    the engine (experiments.fault_schedule.plan_instants), "" without one; on an engine that takes schedules
    (`schedules`, the userspace one) also how many link changes it hands over and in how many windows, and a
    SpecError when one engine could not hold them even in windows (its --max-sched bound). A run plans the
    timeline before fixing its release instant (FaultTimeline.prepare)."""
    nodes = swarm_nodes(max(exp.sizes))
    _initial, later = split_contacts(exp, exp.contact_events(nodes))
    events = sorted(enumerate(list(exp.faults) + later), key=lambda item: item[1].at)
    if not events or not link_only([ev for _, ev in events]):
        return ""
    t = time.monotonic()
    instants, _ = plan_instants(LinkState(), events, nodes)
    said = f"timeline of {len(events)} events planned in {time.monotonic() - t:.2f} s"
    if not schedules:
        return said
    bound = fault_schedule.MAX_SCHED
    dues, bounds = timeline_windows(instants, window_size(bound))
    why = hold_check(dues, bounds, bound)
    if why:
        raise SpecError(f"contacts/faults: the timeline of {len(events)} events: {why}")
    return (f"{said}, {len(dues):,} link changes handed to the engine "
            + (f"in {len(bounds)} windows of up to {window_size(bound):,}" if len(bounds) > 1 else "at once"))


def test_swarms(exp: DtnExperiment) -> list[SwarmSpec]:
    """The distinct swarms of the experiment's tests, in test order: a swarm depends on the size, CLA, routing
    and link profile, not on bundle size, rate or repeat, so each such combination is built once."""
    seen: dict[tuple, SwarmSpec] = {}
    for test in exp.tests():
        key = (test.size, test.cla, test.routing, test.profile, test.segment, test.mtu, test.src_agent, test.dst_agent)
        if key not in seen:
            seen[key] = exp.swarm_spec(test)
    return list(seen.values())

