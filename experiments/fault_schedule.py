"""Fault timelines executed by the userspace link engine (issue 27 item 3): when every event of a timeline is a
link event (cut, heal, partition, impair) and the swarm's engine is the userspace one, the whole timeline is
handed to the engines ahead of time as `sched` entries (netem.runtime.orbit_schedule: entry_line, engine_target)
and each engine applies each change at its instant from its own clock; faults.csv then carries the engine's
measured applied time (applied_by=engine) instead of the driver's. Anything else (node actions, other engines,
$SWARM_FAULTS_ENGINE_SCHEDULE=0, a stopped or paused node, a first event due too soon) stays with the Python
driver of experiments.timeline, and the run says which one applies the timeline. Links the timeline changes that
have no conditions at the start (e.g. a DTN contact plan's links that are up at the release) are pre-armed first:
held by their receivers' engines as pass-through links (LinkController.prearm), so the engine sees their packets
when their change is due; only those links pay for the pass-through (every packet through NFQUEUE).

Pure parts: `states_after` (the link state after each event, as the link controller would make it) and
`plan_entries` (each instant's changed directed links and their new engine lines). `EngineFaults` talks to the
engines through the controller's netem.runtime.linkd.Linkd.
"""
from __future__ import annotations

import copy
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from netem.runtime.orbit_schedule import Target, engine_target, entry_line
from netem.spec.links import NONE, Impairment
from netem.state import LinkState
from swarm.errors import SpecError

#: an experiments.timeline.FaultEvent (not imported here: timeline imports this module)
FaultEvent = Any

#: "0": the Python driver applies every fault event itself even where the engine could (for comparisons)
ENV = "SWARM_FAULTS_ENGINE_SCHEDULE"
#: the first change must be due at least this long after the hand-over, else the driver applies the timeline
MIN_LEAD_S = 0.1
POLL_S = 0.2


def wanted() -> bool:
    return os.environ.get(ENV, "1") != "0"


def link_only(events: list[FaultEvent]) -> bool:
    """Whether every event changes links only (no node actions, which the engine cannot do)."""
    return all(ev.node is None for ev in events)


def state_after(state: LinkState, ev: FaultEvent, names: list[str]) -> LinkState:
    """The link state after one event (pure; `state` is not changed), with the link controller's meaning:
    cut adds both directions to the cuts, heal removes one pair's or all, partition cuts every link between
    groups, impair lays its values over the selected links' configured conditions."""
    out = copy.deepcopy(state)
    if ev.cut is not None:
        a, b = ev.cut
        out.cuts |= {(a, b), (b, a)}
    elif ev.heal is not None:
        if ev.heal == "all":
            out.cuts = set()
        else:
            a, b = ev.heal
            out.cuts -= {(a, b), (b, a)}
    elif ev.partition is not None:
        where = {n: i for i, g in enumerate(ev.partition) for n in g}
        out.cuts |= {(s, d) for s in names for d in names if s != d and where[s] != where[d]}
    elif ev.impair is not None:
        ov = ev.impair
        values = ov.impairment()
        for pair in ov.targets(names):
            merged = out.base.get(pair, NONE).merge(values)
            merged.check_consistent(f"link {pair[0]}->{pair[1]}")
            out.base[pair] = merged
        out.base = {p: imp for p, imp in out.base.items() if imp.values()}
    else:
        raise SpecError(f"fault {ev.kind} {ev.args}: not a link event (the engine cannot apply it)")
    return out


def states_after(state: LinkState, events: list[FaultEvent], names: list[str]) -> list[LinkState]:
    """The state after each event in turn (events in timeline order), starting from `state` (pure)."""
    out = []
    for ev in events:
        state = state_after(state, ev, names)
        out.append(state)
    return out


def changed_links(before: LinkState, after: LinkState) -> dict[tuple[str, str], Impairment]:
    """The directed links whose effective conditions differ, with their new ones (NONE: no conditions)."""
    b, a = before.effective(), after.effective()
    return {p: a.get(p, NONE) for p in sorted(set(b) | set(a)) if b.get(p, NONE) != a.get(p, NONE)}


@dataclass
class Instant:
    """One instant of the timeline: its events (indices into the timeline) and the engine changes it makes."""
    at: float
    events: list[int]
    links: dict[tuple[str, str], Impairment]  # the instant's changed directed links, their final conditions
    per_event: dict[int, set[tuple[str, str]]] = field(default_factory=dict)  # what each event itself changed


def plan_instants(start: LinkState, events: list[tuple[int, FaultEvent]], names: list[str]
                  ) -> tuple[list[Instant], LinkState]:
    """Events grouped by instant (the engine takes one change per link and instant: events at the same time
    are merged, the last one's conditions win), and the final state (pure)."""
    instants: list[Instant] = []
    state = start
    for index, ev in events:
        after = state_after(state, ev, names)
        if not instants or instants[-1].at != ev.at:
            instants.append(Instant(ev.at, [], {}, {}))
            inst_start = state
        cur = instants[-1]
        cur.events.append(index)
        cur.per_event[index] = set(changed_links(state, after))
        cur.links = changed_links(inst_start, after)
        state = after
    return instants, state


def not_held(start: LinkState, instants: list[Instant]) -> list[tuple[str, str]]:
    """Directed links the timeline changes that no engine holds at the start (no conditions then: their packets
    are not queued to the engine, so a scheduled change could not reach them): the links to pre-arm."""
    held = start.effective()
    return sorted({p for inst in instants for p in inst.links if p not in held})


def plan_entries(instants: list[Instant], t0: float, by_mac: dict[str, str], target: Callable[[str], Target]
                 ) -> dict[str, list[tuple[str, int, tuple[str, str]]]]:
    """Per engine group, its `sched` lines in order: (line, instant number, directed link) (pure given `target`)."""
    out: dict[str, list[tuple[str, int, tuple[str, str]]]] = {}
    for k, inst in enumerate(instants):
        due_ns = int(round((t0 + inst.at) * 1e9))
        for (src, dst), imp in inst.links.items():
            tg = target(dst)
            out.setdefault(tg.group, []).append((entry_line(due_ns, tg.queue, by_mac[src], imp), k, (src, dst)))
    return out


class EngineFaults:
    """One fault timeline run by a swarm's userspace engines: hand-over, following, rows."""

    def __init__(self, ctl: Any, events: list[tuple[int, FaultEvent]], t0: float):
        self.ctl = ctl
        self.t0 = t0
        self.events = events
        self.names = [n.name for n in ctl.swarm.nodes]
        self.by_name = {n.name: n for n in ctl.swarm.nodes}
        self.by_mac = {n.name: n.isl_mac for n in ctl.swarm.nodes}
        self.start_state = ctl.load()
        self.instants, self.final = plan_instants(self.start_state, events, self.names)
        #: links the timeline changes that no engine holds at the start: pre-armed as pass-through (arm)
        self.armed = not_held(self.start_state, self.instants)
        self.targets: dict[str, Target] = {}
        self.entries: dict[str, list[tuple[str, int, tuple[str, str]]]] = {}
        self.ids: dict[tuple[str, int], tuple[int, tuple[str, str]]] = {}
        self.applied: dict[tuple[int, tuple[str, str]], float] = {}  # (instant, link) -> engine's applied time

    def usable(self) -> str:
        """'' when the engine can run this timeline, else why not (said in the run's output). Links it changes
        that no engine holds at the start (`armed`) are pre-armed by `arm` first."""
        if self.ctl.engine.name != "userspace":
            return f"the link engine is {self.ctl.engine.name!r}, not 'userspace'"
        if not wanted():
            return f"${ENV}=0"
        if self.start_state.node_faults:
            return "a node is stopped or paused by a fault"
        return self.too_soon()

    def too_soon(self) -> str:
        if self.instants and self.t0 + self.instants[0].at < time.time() + MIN_LEAD_S:
            return f"the first event is due in less than {MIN_LEAD_S:g} s"
        return ""

    def arm(self) -> int:
        """Hold the links the timeline changes that have no conditions at the start as pass-through links in
        their receivers' engines, before the hand-over (LinkController.prearm); returns how many."""
        if self.armed:
            self.ctl.prearm(self.armed)
        return len(self.armed)

    def _target(self, node: str) -> Target:
        return engine_target(self.ctl, self.by_name[node], self.start_state.nodes.get(node, {}), self.targets)

    def _via(self, group: str) -> str:
        return next(t.via for t in self.targets.values() if t.group == group)

    def hand_over(self) -> int:
        """Every change to its engine, all or nothing: a refusal (SpecError naming the entry) clears what other
        engines took. Returns the entries handed over."""
        self.entries = plan_entries(self.instants, self.t0, self.by_mac, self._target)
        done: list[str] = []
        try:
            for group, entries in self.entries.items():
                reply = self.ctl.linkd.schedule(self._via(group), [e[0] for e in entries])
                done.append(group)
                first = int(reply.get("first_id", 0))
                for k, (_, inst, link) in enumerate(entries):
                    self.ids[(group, first + k)] = (inst, link)
        except SpecError as exc:
            for group in done:
                self.ctl.linkd.schedule_clear(self._via(group))
            raise SpecError(self._name_entry(group, str(exc))) from None
        return sum(len(e) for e in self.entries.values())

    def _name_entry(self, group: str, msg: str) -> str:
        """The engine's refusal with the fault event(s) its entry came from named first (one line)."""
        m = re.search(r"entry (\d+)", msg)
        entries = self.entries.get(group, [])
        if not m or not 1 <= int(m.group(1)) <= len(entries):
            return msg
        inst = self.instants[entries[int(m.group(1)) - 1][1]]
        by_index = dict(self.events)
        named = "; ".join(f"faults[{i}] {by_index[i].kind} {by_index[i].args} at {by_index[i].at:g}s" for i in inst.events)
        return f"{named}: {msg}"

    def collect(self) -> int:
        """Read what the engines applied since the last call; returns the changes still pending."""
        pending = 0
        for group in self.entries:
            left, applied = self.ctl.linkd.schedule_log(self._via(group))
            pending += left
            for id_, _due, at_ns in applied:
                key = self.ids.pop((group, id_), None)
                if key is not None:
                    self.applied[key] = at_ns / 1e9
        return pending

    def clear(self) -> None:
        for group in self.entries:
            self.ctl.linkd.schedule_clear(self._via(group))

    def event_applied(self, inst_no: int, index: int) -> tuple[float | None, str]:
        """(when the engine had applied every change of event `index`, error): None when one is missing."""
        inst = self.instants[inst_no]
        links = inst.per_event.get(index, set()) & set(inst.links) or set(inst.links)
        if not links:
            return self.t0 + inst.at, "nothing to change: the links were already in that state"
        times = [self.applied.get((inst_no, p)) for p in links]
        if any(t is None for t in times):
            return None, "not applied by the engine (stopped, or the engine restarted)"
        return max(t for t in times if t is not None), ""

    def save_final(self, applied_upto: int | None = None) -> None:
        """The controller's saved state := the timeline's state after its last applied instant (every node's
        record marked stale: the engines' configurations moved on without it, so the next change re-plans)."""
        state = self.start_state
        n = len(self.instants) if applied_upto is None else applied_upto
        if n:
            state_list = states_after(self.start_state, [ev for _, ev in self.events], self.names)
            last_index = self.instants[n - 1].events[-1]
            pos = [i for i, _ in self.events].index(last_index)
            state = state_list[pos]
        with self.ctl.transaction() as saved:
            saved.base, saved.cuts = state.base, state.cuts
            for rec in saved.nodes.values():
                rec["stale"] = True
