"""The fault timeline of an experiment: events (cut, heal, partition, node actions, impairments) at
times relative to the traffic's start, checked against the swarm, run in a thread through the link
controller, and recorded (planned vs applied time) in faults.csv rows."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from experiments.fault_schedule import POLL_S, EngineFaults, link_only
from experiments.fault_schedule import apply_event as plan_event
from netem.spec.links import LinkOverride
from netem.state import LinkState, check_partition, span
from swarm.errors import RuntimeFailure, SpecError
from swarm.mesh.plan import healed_pairs
from netem.runtime.links import LinkController
from swarm.units import parse_duration


def _parse_at(v: Any) -> float:
    if v in (0, "0", "0s", "0ms"):
        return 0.0
    return parse_duration(v, "at")


class FaultEvent(BaseModel):
    """One timeline entry: at `at` seconds after the traffic starts, exactly one of
    cut: [a, b] | heal: all or [a, b] | partition: [[a, b], [c, d]] | node: n + action | impair: {between|node, values}."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: float
    cut: Optional[list[str]] = None
    heal: Optional[Union[Literal["all"], list[str]]] = None
    partition: Optional[list[list[str]]] = None
    node: Optional[str] = None
    action: Optional[Literal["stop", "kill", "pause", "unpause", "restart"]] = None
    impair: Optional[LinkOverride] = None

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, v: Any) -> float:
        return _parse_at(v)

    @model_validator(mode="after")
    def _one(self) -> "FaultEvent":
        kinds = [k for k in ("cut", "heal", "partition", "node", "impair") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of cut, heal, partition, node (+ action), impair (got {', '.join(kinds) or 'none'})")
        if (self.node is None) != (self.action is None):
            raise ValueError("node and action go together, e.g. {node: sat02, action: restart}")
        for key in ("cut", "heal"):
            pair = getattr(self, key)
            if isinstance(pair, list) and (len(pair) != 2 or pair[0] == pair[1]):
                raise ValueError(f"{key} {pair!r}: expected two different nodes [a, b]")
        return self

    @property
    def kind(self) -> str:
        return "node" if self.node is not None else next(k for k in ("cut", "heal", "partition", "impair") if getattr(self, k) is not None)

    @property
    def args(self) -> str:
        if self.node is not None:
            return f"{self.node} {self.action}"
        if self.cut is not None:
            return " ".join(self.cut)
        if self.heal is not None:
            return "all" if self.heal == "all" else " ".join(self.heal)
        if self.partition is not None:
            return " | ".join(",".join(g) for g in self.partition)
        ov = self.impair
        assert ov is not None  # exactly one action per event (validated)
        target = f"between {' '.join(ov.between)} ({ov.direction})" if ov.between else f"node {ov.node} ({ov.direction})"
        return f"{target}: {ov.impairment().describe()}"

    def nodes(self) -> list[str]:
        if self.node is not None:
            return [self.node]
        if self.cut is not None:
            return list(self.cut)
        if isinstance(self.heal, list):
            return list(self.heal)
        if self.partition is not None:
            return [n for g in self.partition for n in g]
        return self.impair.named_nodes() if self.impair else []


def check_timeline(events: list[FaultEvent], nodes: list[str], duration: float, where: str = "faults",
                   note: str = "") -> None:
    """SpecError (one line) for a fault after the end, an unknown node, a bad partition. `note` is added to
    messages about nodes (e.g. ' at size 2' in a sweep)."""
    known = set(nodes)
    for i, ev in enumerate(events):
        here = f"{where}[{i}]"
        if ev.at >= duration:
            raise SpecError(f"{here}.at {ev.at:g}s: at or after the experiment's end (duration {duration:g} s)")
        if ev.partition is not None:
            check_partition(ev.partition, nodes, f"{here}.partition{note}")
        for name in ev.nodes():
            if name not in known:
                raise SpecError(f"{here}.{ev.kind}: node {name!r}: no such node{note} (nodes: {span(nodes)})")
        if ev.impair is not None:
            ev.impair.impairment()


def apply_event(ctl: LinkController, ev: FaultEvent) -> None:
    """Apply one timeline entry now (its events in the swarm's log say the fault timeline caused them)."""
    _apply_event(ctl.caused_by("fault timeline"), ev)


def _apply_event(ctl: LinkController, ev: FaultEvent) -> None:
    if ev.cut is not None:
        ctl.cut(*ev.cut)
    elif ev.heal is not None:
        ctl.heal(*(ev.heal if isinstance(ev.heal, list) else []))
    elif ev.partition is not None:
        ctl.partition(ev.partition)
    elif ev.node is not None and ev.action is not None:
        ctl.node_action(ev.node, ev.action)
    else:
        ov = ev.impair
        assert ov is not None  # exactly one action per event (validated)
        ctl.impair(ov.impairment(), between=ov.between, node=ov.node, direction=ov.direction)


FAULT_COLUMNS = ["run_id", "test_id", "index", "at_s", "planned_ts", "applied_ts", "offset_s", "took_s", "kind",
                 "args", "ok", "error", "first_packet_s", "applied_by"]


class FaultTimeline:
    """Runs a list of FaultEvents in a thread, each at t0 + at, and records when each really took effect.

    `applied_ts` is the epoch time the change was complete (the call that applied it returned);
    `offset_s` = applied_ts - t0, to be compared with `at_s`; `first_packet_s` (userspace engine): from the
    command to the first packet that met the new conditions (engine's clock; empty: no packet before the next
    event or the end, or another engine)."""

    def __init__(self, ctl: LinkController, events: list[FaultEvent], test_id: str = "", run_id: str = "",
                 message: Callable[[str], None] = lambda m: None):
        self.ctl = ctl
        self.events = sorted(enumerate(events), key=lambda item: item[1].at)
        self.test_id, self.run_id = test_id, run_id
        self.message = message
        self.rows: list[dict] = []
        self.t0: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.watcher: Any = None  # a swarm.runtime.mesh.MeshWatcher: convergence after each fault, when the swarm has a mesh
        self._pending: tuple[dict, float, dict] | None = None  # (row, command time, {node: engine generation})
        self.engine_faults: EngineFaults | None = None  # the engines apply the timeline (start() decides)
        self._prepared = False
        self._planned: tuple[EngineFaults, int] | None = None  # planned by prepare() for the engines: (plan, pre-armed)
        self._why = ""  # why the driver applies the timeline, not the engines
        self.failure = ""  # why the engines stopped applying it before its end (a later window refused)
        self.plan_s: float | None = None  # how long planning it for the engines took (prepare)

    def prepare(self) -> None:
        """Decide who applies the timeline and, for the engines, plan it from instant 0, before the run fixes
        its release instant (start() shifts the plan there): a long contact plan takes a while to plan, and
        planned after the release its first changes would be late. Links the timeline changes that have no
        conditions are pre-armed here. Called by start() when the run did not."""
        if self._prepared:
            return
        self._prepared = True
        if not self.events:
            return
        if not getattr(getattr(self.ctl, "engine", None), "schedules", False):
            self._why = f"link engine {getattr(getattr(self.ctl, 'engine', None), 'name', '?')!r}"
            return
        if not link_only([ev for _, ev in self.events]):
            self._why = "a node action is in the timeline (the engine changes links only)"
            return
        began = time.monotonic()
        ef = EngineFaults(self.ctl, self.events)
        why = ef.usable()
        if not why:
            ef.build()
            why = ef.holds()
        self.plan_s = time.monotonic() - began
        armed = 0
        if not why:
            try:
                armed = ef.arm()
            except RuntimeFailure as exc:
                why = f"pre-arming the links with no conditions failed: {exc}"
        if why:
            self._why = why
        else:
            self._planned = (ef, armed)

    def start(self, t0: float) -> None:
        """Start the timeline relative to epoch `t0` (e.g. the traffic's release instant). A timeline of link
        events only, on the userspace engine, is handed to the engines ahead of time, planned by prepare()
        (experiments.fault_schedule; a schedule they refuse is a SpecError naming the entry, nothing of it kept);
        else this driver's thread applies each event. The run's output says which."""
        self.t0 = t0
        self.prepare()
        target = self._run
        if self._planned is not None:
            ef, armed = self._planned
            self._planned = None
            ef.shift_to(t0)
            self._why = ef.too_soon()
            if not self._why:
                n = ef.hand_over()
                self.engine_faults, target = ef, self._run_engine
                windows = ef.windows_total()
                pre = (f"; {armed} link(s) with no conditions at the start pre-armed as pass-through (every packet "
                       "of those links, and only those, now crosses the engine's NFQUEUE)" if armed else "")
                win = (f", handed over in {windows} windows of up to {ef.window:,} changes" if windows > len(ef.windows)
                       else "")
                self.message(f"fault timeline: {len(self.events)} event(s) handed to the userspace link engine "
                             f"ahead of time ({n} link change(s){win}, planned in {self.plan_s or 0:.2f} s before "
                             "the release); it applies each at its instant (applied_by=engine)" + pre)
        if self._why:
            self.message(f"fault timeline: the driver applies each event ({self._why})")
        self._thread = threading.Thread(target=target, name="fault-timeline", daemon=True)
        self._thread.start()

    def _run_engine(self) -> None:
        """Follow the engines' schedule log until the last instant is applied (or stopped); rows as instants
        complete; at the end the controller's saved state is the timeline's (as far as it got)."""
        ef = self.engine_faults
        assert ef is not None and self.t0 is not None
        end = self.t0 + ef.instants[-1].at if ef.instants else self.t0
        done_instants = 0
        planned_cuts = LinkState(cuts=set(ef.start_state.cuts), base=dict(ef.start_state.base))  # replayed as rows come
        by_index = dict(self.events)
        try:
            while True:
                stopped = self._stop.wait(min(POLL_S, max(0.0, end - time.time()) + 0.02))
                pending = ef.collect()
                while done_instants < len(ef.instants):
                    inst = ef.instants[done_instants]
                    times = [ef.event_applied(done_instants, i) for i in inst.events]
                    if any(t is None for t, _ in times):
                        break
                    for index, (applied, note) in zip(inst.events, times):
                        ev = by_index[index]
                        planned = self.t0 + ev.at
                        row = self._row(index, ev, planned, applied, (applied or planned) - planned, True, "")
                        row["applied_by"] = "engine" if not note else "engine (nothing to change)"
                        self.rows.append(row)
                        cuts_before = set(planned_cuts.cuts)
                        plan_event(planned_cuts, ev, ef.names)  # instants hold the events in timeline order
                        if self.watcher:  # the saved link state lags the engine's schedule: judge by this event's
                            now = LinkState(cuts=set(planned_cuts.cuts), base=dict(planned_cuts.base),
                                            node_faults=dict(ef.start_state.node_faults))
                            self.watcher.event(ev.kind, ev.args, applied, healed_pairs(cuts_before, planned_cuts.cuts),
                                               now)
                    done_instants += 1
                try:
                    ef.send_windows()
                except (SpecError, RuntimeFailure) as exc:
                    self.failure = f"a later window of the timeline was refused: {exc}"
                    self.message(f"fault timeline: {self.failure}")
                    break
                if done_instants == len(ef.instants) or stopped or (pending == 0 and time.time() > end + 1.0):
                    break
        finally:
            ef.clear()
            ef.save_final(done_instants)

    def _run(self) -> None:
        assert self.t0 is not None  # start() sets it before the thread runs
        for index, ev in self.events:
            planned = self.t0 + ev.at
            if self._stop.wait(max(0.0, planned - time.time())):
                break
            self._settle()
            gens_before = self._gens()
            began = time.time()
            error = ""
            cuts_before = self.ctl.load().cuts if self.watcher else set()
            try:
                apply_event(self.ctl, ev)
            except Exception as exc:  # recorded in the results, the test goes on
                error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.message(f"fault {ev.kind} {ev.args} at {ev.at:g}s failed: {error}")
            done = time.time()
            self.rows.append(self._row(index, ev, planned, done, done - began, not error, error))
            changed = {n: g for n, g in self._gens().items() if gens_before.get(n) != g}
            if changed and not error:
                self._pending = (self.rows[-1], began, changed)
            if self.watcher and not error:
                self.watcher.event(ev.kind, ev.args, done, healed_pairs(cuts_before, self.ctl.load().cuts))

    def _gens(self) -> dict[str, int]:
        """Per node, the userspace engine's configuration generation (empty for other engines)."""
        if not getattr(getattr(self.ctl, "engine", None), "schedules", False):
            return {}
        return {n: c["gen"] for n, c in self.ctl.last_change().items()}

    def _settle(self) -> None:
        """Fill in the pending row's first_packet_s: the earliest first packet under the new conditions among
        the nodes the event changed (asked of their engines before the next change overwrites it)."""
        if self._pending is None:
            return
        row, began, gens = self._pending
        self._pending = None
        try:
            firsts = [ns / 1e9 for n, ns in self.ctl.first_packet_after(list(gens)).items() if ns]
        except Exception:  # the result is a measurement: a node that cannot answer leaves it empty
            firsts = []
        if firsts:
            row["first_packet_s"] = round(min(firsts) - began, 6)

    def _row(self, index, ev, planned, applied, took, ok, error) -> dict:
        return {"run_id": self.run_id, "test_id": self.test_id, "index": index, "at_s": ev.at,
                "planned_ts": round(planned, 6) if planned else "", "applied_ts": round(applied, 6) if applied else "",
                "offset_s": round(applied - self.t0, 6) if applied and self.t0 else "",
                "took_s": round(took, 6) if took is not None else "", "kind": ev.kind, "args": ev.args,
                "ok": ok, "error": error, "first_packet_s": "", "applied_by": "driver" if applied else ""}

    def finish(self, restore: bool = True, timeout: float | None = None) -> list[dict]:
        """Wait for the timeline to end (or stop it), put the swarm back to its spec's conditions; rows by index."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._stop.set()
                self._thread.join()
        self._settle()
        done = {r["index"] for r in self.rows}
        reason = ("the test's traffic never started" if self.t0 is None
                  else self.failure or "not reached: the test ended first")
        for index, ev in self.events:
            if index not in done:
                self.rows.append(self._row(index, ev, (self.t0 or 0) + ev.at if self.t0 else None, None, None, False, reason))
        if restore:
            self.ctl.restore()
        return sorted(self.rows, key=lambda r: r["index"])

    def stop(self) -> None:
        self._stop.set()
