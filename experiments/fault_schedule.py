"""Fault timelines executed by the userspace link engine: when every event of a timeline is a
link event (cut, heal, partition, impair) and the swarm's engine is the userspace one, the whole timeline is
handed to the engines ahead of time as `sched` entries (netem.runtime.orbit_schedule: entry_line, engine_target)
and each engine applies each change at its instant from its own clock; faults.csv then carries the engine's
measured applied time (applied_by=engine) instead of the driver's. Anything else (node actions, other engines,
$SWARM_FAULTS_ENGINE_SCHEDULE=0, a stopped or paused node, a first event due too soon) stays with the Python
driver of experiments.timeline, and the run says which one applies the timeline. Links the timeline changes that
have no conditions at the start (e.g. a DTN contact plan's links that are up at the release) are pre-armed first:
held by their receivers' engines as pass-through links (LinkController.prearm), so the engine sees their packets
when their change is due; only those links pay for the pass-through (every packet through NFQUEUE).

The timeline is planned before the run fixes its release instant (FaultTimeline.prepare: relative to instant 0,
as the orbit path builds its plan in prepare()) and shifted to the release when it starts (`shift_entries`), so a
long plan never eats into the release's lead. It is handed over in windows of whole instants (`window_bounds`,
like the orbit path's send_windows): the next window goes when fewer than half a window is pending in that
engine or its first change is due within HORIZON_S, so the engine never holds more than its bound (--max-sched);
`hold_check` says, before anything runs, whether a timeline fits that bound even so (`run --check`).

Pure parts: `states_after` (the link state after each event, as the link controller would make it),
`plan_entries` (each instant's changed directed links and their new engine lines), `shift_entries`,
`window_bounds`, `hold_check`. `EngineFaults` talks to the engines through the controller's
netem.engines.drivers.linkd.Linkd.
"""
from __future__ import annotations

import bisect
import copy
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from netem.runtime.orbit_schedule import WINDOW, Target, engine_target, entry_line
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
#: the engine's bound on pending changes: swarm-linkd's --max-sched default (netem/linkd/src/main.rs), which
#: the framework does not change
MAX_SCHED = 1_000_000
#: a window is handed over at the latest when its first change is due within this long (and earlier when fewer
#: than half a window is pending in its engine)
HORIZON_S = 10.0


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
    apply_event(out, ev, names)
    return out


def touched_by(state: LinkState, ev: FaultEvent, names: list[str]) -> set[tuple[str, str]]:
    """The directed links an event may change (the only ones whose effective conditions can differ after it)."""
    if ev.cut is not None or (ev.heal is not None and ev.heal != "all"):
        a, b = ev.cut if ev.cut is not None else ev.heal
        return {(a, b), (b, a)}
    if ev.heal is not None:
        return set(state.cuts)
    if ev.partition is not None:
        where = {n: i for i, g in enumerate(ev.partition) for n in g}
        return {(s, d) for s in names for d in names if s != d and where[s] != where[d]}
    if ev.impair is not None:
        return set(ev.impair.targets(names))
    raise SpecError(f"fault {ev.kind} {ev.args}: not a link event (the engine cannot apply it)")


def apply_event(state: LinkState, ev: FaultEvent, names: list[str]) -> set[tuple[str, str]]:
    """`state_after` in place: changes `state` and returns the links it touched (`touched_by`), so a long
    timeline is planned in time proportional to what its events touch, not events x links."""
    touched = touched_by(state, ev, names)
    if ev.cut is not None or ev.partition is not None:
        state.cuts |= touched
    elif ev.heal is not None:
        state.cuts -= touched
    else:
        values = ev.impair.impairment()
        for pair in touched:
            merged = state.base.get(pair, NONE).merge(values)
            merged.check_consistent(f"link {pair[0]}->{pair[1]}")
            if merged.values():
                state.base[pair] = merged
            else:
                state.base.pop(pair, None)
    return touched


def effective_of(state: LinkState, pair: tuple[str, str], downs: dict[int, tuple[Impairment, Impairment]]
                 ) -> Impairment:
    """One directed link's entry of `state.effective()` (NONE when it has none), without building the rest;
    `downs` keeps each configured condition's cut version (id -> (condition, cut)), made once per condition."""
    imp = state.base.get(pair, NONE)
    if pair in state.cuts:
        known = downs.get(id(imp))
        if known is None or known[0] is not imp:
            known = downs[id(imp)] = (imp, imp.merge(Impairment(up=False)))
        imp = known[1]
    return NONE if imp.empty else imp


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
    are merged, the last one's conditions win), and the final state (pure: `start` is copied once, then
    each event compares only the links it touches)."""
    instants: list[Instant] = []
    state = copy.deepcopy(start)
    at_start: dict[tuple[str, str], Impairment] = {}  # the instant's touched links as they were before it
    downs: dict[int, tuple[Impairment, Impairment]] = {}
    for index, ev in events:
        if not instants or instants[-1].at != ev.at:
            instants.append(Instant(ev.at, [], {}, {}))
            at_start = {}
        cur = instants[-1]
        before = {p: effective_of(state, p, downs) for p in touched_by(state, ev, names)}
        touched = apply_event(state, ev, names)
        after = {p: effective_of(state, p, downs) for p in touched}
        cur.events.append(index)
        cur.per_event[index] = {p for p in touched if after[p] != before.get(p, NONE)}
        for p, now in after.items():
            at_start.setdefault(p, before.get(p, NONE))
            if now != at_start[p]:
                cur.links[p] = now
            else:
                cur.links.pop(p, None)
    for inst in instants:
        inst.links = dict(sorted(inst.links.items()))
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


Entry = tuple[str, int, tuple[str, str]]  # (sched line, instant number, directed link)


def shift_entries(entries: dict[str, list[Entry]], by: float) -> dict[str, list[Entry]]:
    """The same entries `by` seconds later (pure): a plan built from instant 0 moved to the release."""
    by_ns = int(round(by * 1e9))
    return {group: [(f"{int(line.split(' ', 1)[0]) + by_ns} {line.split(' ', 1)[1]}", k, link)
                    for line, k, link in lines] for group, lines in entries.items()}


def window_bounds(instant_of: list[int], size: int) -> list[tuple[int, int]]:
    """A group's entries (given by their instant numbers, in order) cut into windows [start, end) of at most
    `size` entries, never splitting an instant (pure): an instant is handed over whole or not at all, so no
    change of it can arrive after its siblings were applied. An instant larger than `size` is a window alone."""
    out, start, n = [], 0, len(instant_of)
    while start < n:
        end = min(start + size, n)
        if end < n and instant_of[end] == instant_of[end - 1]:
            first = bisect.bisect_left(instant_of, instant_of[end], start, end)  # where that instant begins
            if first > start:
                end = first
            else:
                end = bisect.bisect_right(instant_of, instant_of[end - 1], end, n)
        out.append((start, end))
        start = end
    return out


def hold_check(dues: list[float], bounds: list[tuple[int, int]], bound: int = MAX_SCHED,
               horizon: float = HORIZON_S) -> str:
    """'' when one engine can follow a group's entries (due times `dues`, in order, cut into windows `bounds`)
    without holding more than `bound` pending changes, else why not (pure). Window k goes at the latest
    `horizon` before its first change is due; then everything due in the `horizon` before that is still pending
    there, and the window comes on top: that sum must fit for every window, else windowing cannot help."""
    for start, end in bounds:
        first = dues[start]
        still = start - bisect.bisect_left(dues, first - horizon, 0, start)
        if still + end - start > bound:
            return (f"at {first:g} s the engine would hold {still + end - start:,} pending link changes "
                    f"({end - start:,} of that instant{'s' if len(set(dues[start:end])) > 1 else ''} and {still:,} due in "
                    f"the {horizon:g} s before), more than its bound ({bound:,}, swarm-linkd --max-sched) even "
                    "handed over in windows")
    return ""


def window_size(bound: int) -> int:
    """Changes per window for an engine holding at most `bound`: the orbit path's WINDOW, at most half the bound
    (a window on top of what is still pending must fit)."""
    return max(1, min(WINDOW, bound // 2))


def timeline_windows(instants: list[Instant], size: int) -> tuple[list[float], list[tuple[int, int]]]:
    """Every change of the timeline as if one engine served every node (the switch: the largest load one
    engine can get): their due times from instant 0 and their windows of `size` (pure; for `run --check`)."""
    dues, instant_of = [], []
    for k, inst in enumerate(instants):
        dues += [inst.at] * len(inst.links)
        instant_of += [k] * len(inst.links)
    return dues, window_bounds(instant_of, size)


class EngineFaults:
    """One fault timeline run by a swarm's userspace engines: planning (from instant 0, before the release is
    known), hand-over in windows, following, rows."""

    def __init__(self, ctl: Any, events: list[tuple[int, FaultEvent]], window: int | None = None,
                 bound: int | None = None, horizon: float | None = None):
        self.ctl = ctl
        self.t0 = 0.0  # the entries' instant 0 (epoch); the release once `shift_to` moved them there
        self.events = events
        self.bound = MAX_SCHED if bound is None else bound
        self.window = window_size(self.bound) if window is None else window
        self.horizon = HORIZON_S if horizon is None else horizon
        self.names = [n.name for n in ctl.swarm.nodes]
        self.by_name = {n.name: n for n in ctl.swarm.nodes}
        self.by_mac = {n.name: n.isl_mac for n in ctl.swarm.nodes}
        self.start_state = ctl.load()
        self.instants, self.final = plan_instants(self.start_state, events, self.names)
        #: links the timeline changes that no engine holds at the start: pre-armed as pass-through (arm)
        self.armed = not_held(self.start_state, self.instants)
        self.targets: dict[str, Target] = {}
        self.entries: dict[str, list[Entry]] = {}
        self.windows: dict[str, list[tuple[int, int]]] = {}  # group -> its entries' windows [start, end)
        self.sent: dict[str, int] = {}  # group -> windows handed over
        self.pending: dict[str, int] = {}  # group -> changes pending in its engine (its last answer + what we sent)
        self._window: tuple[str, int] = ("", 0)  # the window being handed over: (group, its first entry)
        self.ids: dict[tuple[str, int], tuple[int, tuple[str, str]]] = {}
        self.applied: dict[tuple[int, tuple[str, str]], float] = {}  # (instant, link) -> engine's applied time

    def build(self) -> None:
        """Every change as engine entries due from instant 0, and each group's windows (needs the engines up:
        a node's target is its engine and queue)."""
        self.entries = plan_entries(self.instants, 0.0, self.by_mac, self._target)
        self.windows = {g: window_bounds([e[1] for e in es], self.window) for g, es in self.entries.items()}

    def shift_to(self, release: float) -> None:
        """Move the built entries to start at epoch `release`."""
        self.entries = shift_entries(self.entries, release - self.t0)
        self.t0 = release

    def usable(self) -> str:
        """'' when the engine can run this timeline, else why not (said in the run's output). Links it changes
        that no engine holds at the start (`armed`) are pre-armed by `arm` first."""
        if not self.ctl.engine.schedules:
            return f"the link engine is {self.ctl.engine.name!r}, not 'userspace'"
        if not wanted():
            return f"${ENV}=0"
        if self.start_state.node_faults:
            return "a node is stopped or paused by a fault"
        return ""

    def holds(self) -> str:
        """'' when each engine can hold its part of the built timeline in windows, else why not."""
        for group, entries in self.entries.items():
            why = hold_check([self.instants[k].at for _, k, _ in entries], self.windows[group], self.bound,
                             self.horizon)
            if why:
                return f"engine {group!r}: {why}"
        return ""

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

    def hand_over(self, now: float | None = None) -> int:
        """Each engine its first window(s), all or nothing: a refusal (SpecError naming the entry) clears what
        other engines took. The rest follows in `send_windows`. Returns the entries of the whole timeline."""
        if not self.entries:
            self.build()
        done: list[str] = []
        group = ""
        try:
            for group in self.entries:
                self._send(group, now)
                done.append(group)
        except SpecError as exc:
            for g in done:
                self.ctl.linkd.schedule_clear(self._via(g))
            raise SpecError(self._name_entry(group, str(exc))) from None
        return sum(len(e) for e in self.entries.values())

    def send_windows(self, now: float | None = None) -> None:
        """Each engine's next window(s) that are due to go (see `_send`); a refusal is a SpecError naming the
        fault event of the refused entry."""
        for group in self.entries:
            try:
                self._send(group, now)
            except SpecError as exc:
                raise SpecError(self._name_entry(group, str(exc))) from None

    def _send(self, group: str, now: float | None) -> None:
        """Hand `group`'s engine its next windows while each fits its bound and is due to go: fewer than half a
        window pending there, or its first change due within the horizon."""
        entries, windows = self.entries[group], self.windows[group]
        now = time.time() if now is None else now
        while self.sent.get(group, 0) < len(windows):
            k = self.sent.get(group, 0)
            start, end = windows[k]
            pending = self.pending.get(group, 0)
            first_due = self.t0 + self.instants[entries[start][1]].at
            if pending + end - start > self.bound or (pending > self.window // 2 and first_due - self.horizon > now):
                return
            self._window = (group, start)
            reply = self.ctl.linkd.schedule(self._via(group), [e[0] for e in entries[start:end]])
            first = int(reply.get("first_id", 0))
            for j, (_, inst, link) in enumerate(entries[start:end]):
                self.ids[(group, first + j)] = (inst, link)
            self.sent[group] = k + 1
            self.pending[group] = int(reply.get("pending", pending + end - start))

    def windows_total(self) -> int:
        return sum(len(w) for w in self.windows.values())

    def all_sent(self) -> bool:
        return all(self.sent.get(g, 0) == len(w) for g, w in self.windows.items())

    def _name_entry(self, group: str, msg: str) -> str:
        """The engine's refusal with the fault event(s) its entry came from named first (one line)."""
        m = re.search(r"entry (\d+)", msg)
        entries = self.entries.get(group, [])
        offset = self._window[1] if self._window[0] == group else 0
        if not m or not 1 <= offset + int(m.group(1)) <= len(entries):
            return msg
        inst = self.instants[entries[offset + int(m.group(1)) - 1][1]]
        by_index = dict(self.events)
        named = "; ".join(f"faults[{i}] {by_index[i].kind} {by_index[i].args} at {by_index[i].at:g}s" for i in inst.events)
        return f"{named}: {msg}"

    def collect(self) -> int:
        """Read what the engines applied since the last call; returns the changes still pending or not yet
        handed over."""
        pending = 0
        for group in self.entries:
            if not self.sent.get(group):
                continue
            left, applied = self.ctl.linkd.schedule_log(self._via(group))
            self.pending[group] = left
            sent = self.windows[group][self.sent[group] - 1][1]
            pending += left + len(self.entries[group]) - sent
            for id_, _due, at_ns in applied:
                key = self.ids.pop((group, id_), None)
                if key is not None:
                    self.applied[key] = at_ns / 1e9
        return pending

    def clear(self) -> None:
        for group in self.entries:
            if self.sent.get(group):
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
        state = copy.deepcopy(self.start_state)
        n = len(self.instants) if applied_upto is None else applied_upto
        if n:
            last_index = self.instants[n - 1].events[-1]
            pos = [i for i, _ in self.events].index(last_index)
            for _, ev in self.events[:pos + 1]:  # replayed on one copy, not a copy per event
                apply_event(state, ev, self.names)
        with self.ctl.transaction() as saved:
            saved.base, saved.cuts = state.base, state.cuts
            for rec in saved.nodes.values():
                rec["stale"] = True
