"""Orbit plans executed by the userspace link engine: instead of the driver waking at each step and
reconfiguring every node it touches (a controller round trip per node, measured 60-110 ms p99 at 100 nodes),
the whole timeline is handed to swarm-linkd ahead of time (`sched`, in windows for long plans) and the engine
applies each change at its instant from its own clock. The engine measures every change's lag (applied - due)
and the driver reads it back (`schedlog`) into links.csv, so the figure is the engine's, not the driver's.

Pure parts (entries, rows) are separate from `EngineSchedule`, which talks to the engines through
`netem.engines.drivers.linkd.Linkd`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from netem.engines.userspace import linkd_line
from netem.spec.links import Impairment
from swarm.errors import SpecError

#: "0" makes the driver apply each step itself even where the engine could (for comparisons)
ENV = "SWARM_ORBITS_ENGINE_SCHEDULE"
#: changes handed over per message and engine; the next window goes when fewer than half are pending
WINDOW = 10_000
#: the schedule starts this long after it is handed over when the caller gives no release time
LEAD_S = 0.5
POLL_S = 0.5
SEND_MARGIN_S = 1.0  # an entry already due when its window is sent: due this long after (send_windows); 0.2 was
# not enough for the switch's engine serving 1,001 queues, which read a first window 0.34 s after it was sent


@dataclass
class Target:
    """Where one node's received links are changed: its engine (`group`, reached through node `via`) and
    its queue there."""
    group: str
    via: str
    queue: int


@dataclass
class Change:
    """One planned row of the timeline: both directions' engine entries and, once applied, their times."""
    step: int
    t: float
    row: object
    ab: Impairment
    ba: Impairment
    scheduled: float
    applied: dict[str, float] = field(default_factory=dict)  # "ab"/"ba" -> applied unix time


def engine_target(ctl: Any, plan: Any, rec: dict, targets: dict[str, Target]) -> Target:
    """Where the links into node `plan` are changed (its engine and queue there), remembered in `targets`:
    the one engine at a forwarding hop serves every node ("switch"), else each node has its own. `ctl`: the
    swarm's netem.runtime.links.LinkController; `rec`: the node's record in the link state (its interface)."""
    node = plan.name
    if node not in targets:
        iface = rec.get("iface") or ctl.isl_iface(plan)
        hop = ctl.linkd.hop(plan, iface)
        queue = ctl.linkd.hold(plan, iface).queue
        group = "switch" if hop else node
        via = next((t.via for t in targets.values() if t.group == group), node)
        targets[node] = Target(group, via, queue)
    return targets[node]


def entry_line(due_ns: int, queue: int, src_mac: str, imp: Impairment) -> str:
    """One `sched` entry (pure): the receiver's queue, the sender's MAC and the link's new conditions (no
    conditions: the engine passes its packets straight through)."""
    line = linkd_line(src_mac, imp) if not imp.empty else f"link {src_mac.lower()}"
    return f"{due_ns} {queue} {line}"


def not_before_ns(lines: list[str], floor_ns: int) -> list[str]:
    """Entry lines (in due order) with every one due before `floor_ns` due at it instead (pure), one ns apart in
    their order: the engine refuses a link that changes twice at one instant, and keeps them in order."""
    out, k = [], 0
    for line in lines:
        due, rest = line.split(" ", 1)
        if int(due) < floor_ns:
            line, k = f"{floor_ns + k} {rest}", k + 1
        out.append(line)
    return out


def link_rows(changes: list[Change], run_id: str, apply_delay: bool) -> list[dict]:
    """links.csv rows of changes whose both directions the engine applied (pure); applied = the later one."""
    out = []
    for c in changes:
        r = c.row
        done = len(c.applied) == 2
        applied = max(c.applied.values()) if c.applied else c.scheduled
        out.append({"run_id": run_id, "step": c.step, "t_plan_s": c.t, "scheduled_ts": round(c.scheduled, 6),
                    "applied_ts": round(applied, 6), "lag_ms": round((applied - c.scheduled) * 1000, 3),
                    "a": r.a, "b": r.b, "kind": r.kind, "up": bool(r.up),  # type: ignore[attr-defined]
                    "delay_ms": "" if r.delay_ms != r.delay_ms else r.delay_ms,  # type: ignore[attr-defined]
                    "rate": int(r.rate), "delay_applied": bool(r.up) and apply_delay,  # type: ignore[attr-defined]
                    "coalesced": False, "ok": done,
                    "error": "" if done else "not applied by the engine (stopped, or the engine restarted)",
                    "applied_by": "engine"})
    return out


def wanted() -> bool:
    return os.environ.get(ENV, "1") != "0"


class EngineSchedule:
    """One run of a plan by the engines of a swarm (one engine at the switch on netns, else one per node)."""

    def __init__(self, driver: Any, t0: float):
        """`driver`: the netem.runtime.orbits.LinkTimelineDriver running the plan (its plan, conditions, links
        state and row sink; not imported here, which would be a cycle)."""
        self.d = driver
        self.t0 = t0
        self.linkd = driver.ctl.linkd
        self.targets: dict[str, Target] = {}
        self.entries: dict[str, list[tuple[str, Change, str]]] = {}  # group -> (line, change, "ab"/"ba")
        self.sent: dict[str, int] = {}  # group -> entries handed over
        self.ids: dict[tuple[str, int], tuple[Change, str]] = {}
        self.changes: list[Change] = []
        self.pending: dict[str, int] = {}
        self.lags_ms: list[float] = []  # each applied change's lag (both directions applied - due), for progress

    def _target(self, node: str) -> Target:
        return engine_target(self.d.ctl, self.d.by_name[node], self.d.recs.setdefault(node, {}), self.targets)

    def build(self) -> bool:
        """Every change of the plan as engine entries; False when a link the plan changes is not held by an
        engine now (its packets are not queued to one: the driver then applies the steps itself)."""
        d = self.d
        for t, rows in d.plan.steps():
            if t <= 0:
                continue
            scheduled = self.t0 + t / d.speedup
            due_ns = int(round(scheduled * 1e9))
            for r in rows.itertuples(index=False):
                if (r.a, r.b) not in d.eff[r.b] or (r.b, r.a) not in d.eff[r.a]:
                    return False
                ab, ba = d.conditions(r.a, r.b, bool(r.up), r.delay_ms, int(r.rate))
                c = Change(int(round(t / d.plan.step)), t, r, ab, ba, scheduled)
                self.changes.append(c)
                for src, dst, imp, way in ((r.a, r.b, ab, "ab"), (r.b, r.a, ba, "ba")):
                    tg = self._target(dst)
                    self.entries.setdefault(tg.group, []).append(
                        (entry_line(due_ns, tg.queue, d.by_mac[src], imp), c, way))
        return True

    def shift(self, by: float) -> None:
        """Move the whole plan `by` seconds later (pure but for the clock it reads nothing): a plan of thousands
        of changes takes longer to build than LEAD_S, and its first entries would reach the engines in the past."""
        self.t0 += by
        for c in self.changes:
            c.scheduled += by
        for group, entries in self.entries.items():
            self.entries[group] = [(f"{int(round(c.scheduled * 1e9))} {line.split(' ', 1)[1]}", c, way)
                                   for line, c, way in entries]

    def not_before(self, earliest: float) -> int:
        """Entries due before `earliest` (wall clock) become due then (pure): a release fixed before the plan could
        be handed over (its contact plans and traffic programs already have it) is not refused by the engines
        as in the past; those changes are applied at once, and their lag (applied - scheduled, each change keeps
        its plan instant) says how late. Returns how many changes moved."""
        at_ns = int(round(earliest * 1e9))
        moved: set[int] = set()
        for group, entries in self.entries.items():
            lines = not_before_ns([line for line, _c, _w in entries], at_ns)
            moved |= {id(c) for (old, c, _w), new in zip(entries, lines) if new != old}
            self.entries[group] = [(new, c, way) for new, (_old, c, way) in zip(lines, entries)]
        return len(moved)

    def _via(self, group: str) -> str:
        return next(t.via for t in self.targets.values() if t.group == group)

    def send_windows(self) -> None:
        """Hand each engine its next window while fewer than half a window is pending there. An entry already due
        when its window goes (a hand-over slower than its lead, a host too busy to keep windows ahead) is sent
        due SEND_MARGIN_S from now, so the engine applies it late (its lag says so) instead of refusing the window."""
        for group, entries in self.entries.items():
            start = self.sent.get(group, 0)
            if start >= len(entries) or self.pending.get(group, 0) > WINDOW // 2:
                continue
            window = entries[start:start + WINDOW]
            lines = not_before_ns([e[0] for e in window], time.time_ns() + int(SEND_MARGIN_S * 1e9))
            reply = self.linkd.schedule(self._via(group), lines)
            first = int(reply.get("first_id", 0))
            for k, (_, c, way) in enumerate(window):
                self.ids[(group, first + k)] = (c, way)
            self.sent[group] = start + len(window)
            self.pending[group] = int(reply.get("pending", 0))

    def collect(self) -> list[Change]:
        """Read what the engines applied since the last call; returns the changes now complete."""
        done = []
        for group in self.entries:
            pending, applied = self.linkd.schedule_log(self._via(group))
            self.pending[group] = pending
            for id_, _due, at_ns in applied:
                c, way = self.ids.pop((group, id_), (None, ""))
                if c is None:
                    continue
                c.applied[way] = at_ns / 1e9
                if len(c.applied) == 2:
                    done.append(c)
        return done

    def clear(self) -> None:
        for group in self.entries:
            self.linkd.schedule_clear(self._via(group))

    def run(self, progress: Callable[[float, float, str], None], stop) -> list[Change]:
        """Hand the plan over, follow it until it ends (or `stop` is set), record every change as it completes.
        Returns the changes never applied (stopped)."""
        d = self.d
        try:
            self.send_windows()
        except SpecError:
            self.clear()  # nothing of the plan stays in any engine
            raise
        wall_len = d.plan.duration / d.speedup
        end = self.t0 + wall_len
        while not stop.is_set():
            left = end - time.time()
            if left <= 0 or stop.wait(min(POLL_S, left)):
                break
            self._record(self.collect())
            self.send_windows()
            progress(min(wall_len, max(0.0, time.time() - self.t0)), wall_len,
                     f"engine schedule: {len(self.lags_ms)} of {len(self.changes)} link changes applied"
                     + lag_so_far(self.lags_ms))
        self.clear()
        self._record(self.collect())
        missing = [c for c in self.changes if len(c.applied) < 2]
        if missing:
            d.on_rows(link_rows(missing, d.run_id, d.apply_delay))
        return missing

    def _record(self, done: list[Change]) -> None:
        if not done:
            return
        for c in done:
            d = self.d
            d._set(c.row.a, c.row.b, c.ab, c.ba)  # type: ignore[attr-defined]
            if len(c.applied) == 2:
                self.lags_ms.append((max(c.applied.values()) - c.scheduled) * 1000)
        rows = link_rows(done, self.d.run_id, self.d.apply_delay)
        self.d.on_rows(rows)
        self.d._events(rows)


def lag_so_far(lags_ms: list[float]) -> str:
    """`, lag p50 0.12 ms, p99 0.31 ms` of the changes applied so far (pure; "" before the first)."""
    if not lags_ms:
        return ""
    xs = sorted(lags_ms)
    return (f", lag p50 {xs[len(xs) // 2]:.2f} ms, p99 {xs[min(len(xs) - 1, int(0.99 * len(xs)))]:.2f} ms"
            f", max {xs[-1]:.2f} ms")


def step_summary(changes: list[Change], step_s: float) -> dict:
    """Per-step lag (the step's last change applied - due) and the share of steps done within one step."""
    by_step: dict[float, float] = {}
    for c in changes:
        if len(c.applied) == 2:
            lag = (max(c.applied.values()) - c.scheduled) * 1000
            by_step[c.t] = max(by_step.get(c.t, 0.0), lag)
    lags = sorted(by_step.values())
    if not lags:
        return {"batches": 0, "steps_finished_before_next": None, "step_lag_ms_p50": None, "step_lag_ms_p99": None,
                "step_lag_ms_max": None}

    def q(p: float) -> float:
        return round(lags[min(len(lags) - 1, int(p * len(lags)))], 3)

    return {"batches": len(lags), "steps_finished_before_next": round(sum(x < step_s * 1000 for x in lags) / len(lags), 4),
            "step_lag_ms_p50": q(0.5), "step_lag_ms_p99": q(0.99), "step_lag_ms_max": round(lags[-1], 3)}

