"""The link-timeline driver: a running swarm's links follow an orbit plan (netem.orbits) live.

At each step of the plan only the links whose state changed are updated, through the swarm's link engine
(netem.runtime.links.LinkController's per-node apply of the engine's plan: kernel NetEm, nftables + HTB
where sch_netem is missing, or any other engine of the registry), in parallel across the nodes concerned. A node whose
tc tree keeps its shape (a rate or delay moved) gets `tc class/qdisc change` lines (netem.incremental)
instead of a rebuild, so a delay update does not flush the packets queued in the link. Each node's tc lines and
nft table go to one long-lived `tc -force -batch -` and `nft -i` process in the node (swarm.runtime.shell, opened
at `prepare()`, ended at the end of `run()` or by `close()`), a step's whole change for the node in one batch
with a sentinel after it, not a process per change (at load 16 a process in a node cost ~250 ms); only a forced
apply (the initial state, a node after a failure) still looks at the node's root qdisc with a process of its
own ($SWARM_ORBITS_SHELLS=0: a process per change, as before). A link's new conditions are the swarm's
configured conditions for it (`links:` of the spec) with the plan's laid over: down (up: false), or up with
the planned one-way delay and rate. A parameter the engine cannot apply here (delay without sch_netem) is
left out and said so once (`delay_applied` false in links.csv), never silently. With the userspace engine a
link out of sight drops its IP packets in the engine (a socket round trip per change), without the nftables
drop of its non-IP frames that `swarm fault cut` adds (a process per change: it was most of the lag); ARP
still crosses such a link, nothing above it does.

Timing: plan second t is due at wall time release + t / speedup (speedup > 1 compresses the orbit; delays
are not compressed). A step's updates start when it is due; if the previous step is still being applied when
later steps fall due, those steps are merged (the latest state of each link wins) and their rows say so
(`coalesced`). Every link update is one row of links.csv, written when its step finished:

    step, t_plan_s, scheduled_ts, applied_ts, lag_ms (applied - scheduled: both nodes of the link done),
    a, b, kind, up, delay_ms, rate, delay_applied, coalesced, ok, error

The initial state (t = 0: every pair of plan nodes down unless the plan has it up) is applied to every plan
node before the clock starts. With the userspace engine the pairs the plan never brings up are not listed:
each receiver's engine holds them as one condition (`others`: down, its catch-all default), and links.json
keeps them as one default (netem.state.DefaultLinks), so the initial state costs the links that exist
(~2,000 directed at any instant in a 1,000-satellite Walker shell), not the 1,001,000 pairs of the swarm.
The driver keeps the link state in memory and writes links.json (what `impair --show`, `clear` and `down`
read) after the initial state, every few seconds when a step leaves time, and at the end; `restore()` puts
the spec's conditions back.
"""
from __future__ import annotations

import csv
import itertools
import os
import threading
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Optional

from netem.incremental import tc_changes
from netem.spec.links import NONE, DirectedLinks, Impairment
from netem.orbits.planner import Plan
from netem.orbits.records import LINK_COLUMNS
from netem.runtime.orbit_batches import NodeBatch, PreparedStep, plan_node_batch
from netem.runtime.orbit_schedule import LEAD_S, EngineSchedule, step_summary, wanted
from netem.state import DefaultLinks, node_links, shared_default, signature
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.observe.events import BULK_LINKS, emit_many
from swarm.observe.track import ground_tracks, publish as publish_track
from swarm.runtime.shell import NFT, TC

if TYPE_CHECKING:
    from netem.runtime.links import LinkController

__all__ = ["LinkTimelineDriver", "LINK_COLUMNS", "check_plan_nodes", "links_csv_writer"]
DOWN = Impairment(up=False)
SAVE_EVERY_S = 5.0
#: "0": every tc/nft change of a step is a process of its own again (to compare with the batched shells)
SHELLS_ENV = "SWARM_ORBITS_SHELLS"


def check_plan_nodes(plan: Plan, swarm_nodes: list[str], where: str = "orbits") -> None:
    """Every node the plan flies must be a node of the swarm (the swarm may have more)."""
    known = set(swarm_nodes)
    missing = [n for n in plan.nodes if n not in known]
    if missing:
        shown = f"{swarm_nodes[0]}..{swarm_nodes[-1]}" if len(swarm_nodes) > 4 else ", ".join(swarm_nodes)
        raise SpecError(f"{where}: node {missing[0]!r} of the orbit plan is not a node of the swarm (nodes: {shown})"
                        + (f"; {len(missing) - 1} more" if len(missing) > 1 else ""))


def links_csv_writer(path: Path, keep: Optional[list[dict]] = None) -> Callable[[list[dict]], None]:
    """An `on_rows` that appends each batch of rows to links.csv at `path` (header first) and, given `keep`,
    to that list too: the one links.csv writer of `swarm orbits apply` and the benchmark."""
    def record(rows: list[dict]) -> None:
        first = not path.exists()
        with path.open("a", newline="") as f:
            w = csv.DictWriter(f, LINK_COLUMNS, extrasaction="ignore")
            if first:
                w.writeheader()
            w.writerows(rows)
        if keep is not None:
            keep.extend(rows)
    return record


class LinkTimelineDriver:
    """Drives one running swarm's links from a Plan, through its link controller (`swarm.links`).
    `on_rows(rows)` receives each step's links.csv rows."""

    def __init__(self, links: "LinkController", plan: Plan, *, speedup: float = 1.0, workers: int = 16,
                 on_rows: Callable[[list[dict]], None] = lambda rows: None,
                 message: Callable[[str], None] = lambda m: None, run_id: str = "", orbits=None):
        if not speedup > 0:
            raise SpecError(f"speedup {speedup!r}: must be positive")
        self.plan, self.speedup = plan, float(speedup)
        self.ctl = links
        swarm = links.swarm  # the swarm's context: its nodes
        self.engine = self.ctl.engine
        self.workers, self.on_rows, self.message, self.run_id = workers, on_rows, message, run_id
        self.orbits = orbits  # the OrbitsSpec the plan came from: its ground tracks go to the live view's map
        names = [n.name for n in swarm.nodes]
        check_plan_nodes(plan, names)
        self.by_name = {n.name: n for n in swarm.nodes}
        self.by_mac = {n.name: n.isl_mac for n in swarm.nodes}
        needs = self.engine.needs()
        self.apply_delay = "delay" not in needs
        self.apply_rate = "rate" not in needs
        self.base: DirectedLinks = self.ctl.spec_links()
        self.eff: dict[str, DirectedLinks] = {n: {} for n in plan.nodes}  # per node: directed links touching it
        self.recs: dict[str, dict] = {}
        self.stop_event = threading.Event()
        self.summary: dict = {}
        self._last_save = 0.0
        self._pool: Optional[ThreadPoolExecutor] = None
        self.initial_s: Optional[float] = None
        self.tc_applied: dict[str, list[list[str]]] = {}  # per node: the tc plan in place (for in-place changes)
        self.counts = {"tc_in_place": 0, "tc_rebuilt": 0, "nft": 0}
        self._count_lock = threading.Lock()
        self.shell_stats: dict[str, int | float] = {}
        self._downs: dict[int, tuple[Impairment, Impairment]] = {}  # id(condition) -> (it, it down), see _down
        self._schedule: Optional[tuple[EngineSchedule, bool]] = None  # built by prepare(), see _build_schedule
        #: with an engine that holds_others: the condition of every pair of plan nodes not in `eff` (the never-up
        #: ones, down), given to the engine once per node (prepare); None: every pair is in `eff`
        self.others: Optional[Impairment] = None
        self._others_spec = NONE  # the spec's condition `others` is down over (what those pairs were before)
        self._tracks: Optional[dict] = None  # the live view's ground tracks, computed in prepare() (before a release)

    # ------------------------------------------------------------------------------- conditions
    def conditions(self, a: str, b: str, up: bool, delay_ms: float, rate: int) -> tuple[Impairment, Impairment]:
        """The conditions of a->b and b->a for one planned state."""
        if not up:
            return self._down(self.base.get((a, b), NONE)), self._down(self.base.get((b, a), NONE))
        values: dict = {}
        if self.apply_delay and delay_ms == delay_ms:  # not NaN
            values["delay"] = round(float(delay_ms), 3)
        if self.apply_rate and rate:
            values["rate"] = int(rate)
        orbit = Impairment.model_validate(values) if values else NONE
        return self.base.get((a, b), NONE).merge(orbit), self.base.get((b, a), NONE).merge(orbit)

    def _down(self, imp: Impairment) -> Impairment:
        """`imp` with the link down, made once per distinct condition (an orbit plan's initial state puts
        most of N(N-1) pairs down: one object for all of them, not a model per pair)."""
        key = id(imp)
        if key not in self._downs:
            self._downs[key] = (imp, imp.merge(DOWN))
        return self._downs[key][1]

    def _set(self, a: str, b: str, ab: Impairment, ba: Impairment,
             eff: Optional[dict[str, DirectedLinks]] = None) -> None:
        eff = self.eff if eff is None else eff
        for pair, imp in (((a, b), ab), ((b, a), ba)):
            for node in pair:
                if imp.empty and self.others is None:  # with `others` an unlisted pair is down: keep it listed
                    eff[node].pop(pair, None)
                else:
                    eff[node][pair] = imp

    def _others(self) -> tuple[Impairment, Impairment]:
        """(the spec's condition most pairs share, NONE if none; the never-up pairs' condition: that, down)."""
        shared = shared_default(self.base)
        spec = shared[0] if shared is not None else NONE
        return spec, self._down(spec)

    def _list_exceptions(self, shared: Impairment) -> None:
        """With `others`: the never-up pairs whose spec condition is not the `shared` one, and every pair of a plan
        node with a swarm node outside the plan (as the spec has it), listed in `eff` (a spec without `links:`:
        none, and no pass over the never-up pairs)."""
        base, eff = self.base, self.eff
        if base:
            for a, b in self.plan.never_up():
                for pair in ((a, b), (b, a)):
                    imp = base.get(pair, NONE)
                    if imp is not shared and imp != shared:
                        eff[a][pair] = eff[b][pair] = self._down(imp)
        outside = [n for n in self.by_name if n not in eff]
        for a in self.plan.nodes:
            for o in outside:
                for pair in ((a, o), (o, a)):
                    eff[a][pair] = base.get(pair, NONE)

    # ---------------------------------------------------------------------------------- applying
    def _apply_nodes(self, nodes: list[str], pool: ThreadPoolExecutor, force: bool = False
                     ) -> dict[str, tuple[float, str]]:
        """Apply the given nodes' plans in parallel; {node: (done_ts, error or '')}."""
        def one(name: str) -> tuple[str, float, str]:
            rec = self.recs.setdefault(name, {})
            try:
                self._apply_one(self.by_name[name], rec, force or rec.get("stale", False))
                rec.pop("stale", None)
                return name, time.time(), ""
            except (CommandError, RuntimeFailure) as exc:
                rec["stale"] = True
                return name, time.time(), str(exc)

        return {n: (ts, err) for n, ts, err in pool.map(one, nodes)}

    def _apply_one(self, node, rec: dict, force: bool) -> None:
        """One node: a tc tree that keeps its shape is changed in place first (netem.incremental: no queue
        flushed, one command); then the controller's own per-node apply does everything else the engine
        plans (nft, segmentation, an engine's own parts), finding the tc part already current."""
        prev = self.tc_applied.get(node.name)
        if not force and prev:  # a tc tree of ours is in place (not with the userspace engine: it plans none)
            egress, ingress, labels = node_links(self.eff[node.name], node.name, self.by_mac)
            iface = rec.get("iface") or self.ctl.isl_iface(node)
            rec["iface"] = iface
            tc = self.engine.plan_node(iface, egress, ingress, labels).tc
            if rec.get("tc") == signature(prev) and rec.get("tc") != signature(tc):
                changes = tc_changes(prev, tc)
                if changes:
                    self.ctl.change_tc(node.name, changes)
                    rec["tc"] = signature(tc)
                    with self._count_lock:
                        self.counts["tc_in_place"] += 1
        tc_before, nft_before = rec.get("tc"), rec.get("nft")
        cmds = self.ctl.apply(node, rec, self.eff[node.name], force=force, cut_frames=False, others=self.others)
        self.tc_applied[node.name] = cmds.tc if cmds is not None else []
        tc = self.tc_applied[node.name]
        with self._count_lock:
            self.counts["tc_rebuilt"] += rec.get("tc") != tc_before or (force and bool(tc))
            self.counts["nft"] += rec.get("nft") != nft_before or force

    def _events(self, rows: list[dict]) -> None:
        """Each link update of a step into the swarm's event log (swarm.observe.events), both directions, in one
        write (the initial state of a 1,000-satellite shell has ~2,500 rows)."""
        many = []
        for r in rows:
            cond = " ".join(x for x in (f"delay {r['delay_ms']:g}ms" if r["up"] and r["delay_ms"] != "" else "",
                                        f"rate {r['rate']}bit" if r["up"] and r["rate"] else "") if x)
            many += [{"src": src, "dst": dst, "state": "up" if r["up"] else "down", "conditions": cond,
                      "step": r["step"]} for src, dst in ((r["a"], r["b"]), (r["b"], r["a"]))]
        emit_many(self.ctl.dir, "link", many, cause="orbit schedule")

    def _save(self, events: bool = False) -> None:
        """links.json: the configured conditions with the plan's current ones, and the per-node records.
        `events`: log the changes since the last save (the initial state; later steps log their own rows)."""
        compact = self.others is not None
        with self.ctl.caused_by("orbit schedule").transaction(events and not compact) as state:
            if compact:  # the plan's pairs as `others` + rows, written without a pass per pair (netem.state.DefaultLinks)
                if events:
                    self._initial_events()
                state.base = self._default_links()
            else:
                merged = dict(self.base)
                for links in self.eff.values():
                    merged.update(links)
                kept: dict[int, bool] = {}  # per distinct condition object (the plan's `down` is one on most pairs)
                for imp in merged.values():
                    if id(imp) not in kept:
                        kept[id(imp)] = bool(imp.values())
                state.base = merged if all(kept.values()) else {p: imp for p, imp in merged.items() if kept[id(imp)]}
            state.nodes.update({n: rec for n, rec in self.recs.items()})
        self._last_save = time.monotonic()

    def _default_links(self) -> DefaultLinks:
        """The links now: `others` on every pair of plan nodes, the driver's listed pairs, the spec's elsewhere."""
        assert self.others is not None
        plan_nodes = set(self.plan.nodes)
        rows = {p: imp for p, imp in self.base.items() if p[0] not in plan_nodes or p[1] not in plan_nodes}
        for links in self.eff.values():
            rows.update(links)
        return DefaultLinks(self.others, self.plan.nodes, rows)

    def _initial_events(self) -> None:
        """The initial state's events without a view per pair: the pairs `others` covers as the event log groups
        a change (grouped_view_changes): one `links` event when more than BULK_LINKS share it, else a `link` event
        each (the live view draws a link from those), and the plan's t=0 rows, one `link` event each way."""
        nodes, eff, others = self.plan.nodes, self.eff, self.others
        assert others is not None
        listed = {p for links in eff.values() for p in links}
        covered = len(nodes) * (len(nodes) - 1) - sum(1 for a, b in listed if a in eff and b in eff)
        spec = self._others_spec
        conditions = others.describe().replace("down", "").strip(" ,")
        new = {"state": "down", "conditions": "" if conditions == "-" else conditions}
        was = {"state": "up", "conditions": "" if spec.empty else spec.describe()}
        pairs = ((a, b) for a in nodes for b in nodes if a != b and (a, b) not in listed)
        if covered > BULK_LINKS:
            examples = [f"{a}->{b}" for a, b in itertools.islice(pairs, 4)]
            emit_many(self.ctl.dir, "links", [{**new, "links": covered, "examples": examples, "was": was}],
                      cause="orbit schedule")
        else:
            emit_many(self.ctl.dir, "link", [{"src": a, "dst": b, **new, "was": was} for a, b in pairs],
                      cause="orbit schedule")
        first = self.plan.timeline[self.plan.timeline["t_start"] == 0]
        self._events([{"a": r.a, "b": r.b, "up": bool(r.up), "delay_ms": "" if r.delay_ms != r.delay_ms else r.delay_ms,
                       "rate": int(r.rate), "step": 0} for r in first.itertuples(index=False)])

    def prepare(self) -> float:
        """Every pair of plan nodes to its t=0 state, on every plan node (before the clock starts: on a
        large swarm this takes seconds). Returns seconds taken."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, min(self.workers, len(self.plan.nodes))))
        pool = self._pool
        started = time.time()
        if os.environ.get(SHELLS_ENV, "1") != "0":
            self.ctl.open_shells()  # each node's tc and nft changes to one long-lived process per tool
        with self.ctl.transaction() as state:
            self.recs = {n: dict(state.nodes.get(n, {})) for n in self.plan.nodes}
        shared = NONE
        if self.engine.holds_others:
            shared, self.others = self._others()
            self._others_spec = shared
        first = self.plan.timeline[self.plan.timeline["t_start"] == 0]
        for r in first.itertuples(index=False):
            self._set(r.a, r.b, *self.conditions(r.a, r.b, bool(r.up), r.delay_ms, int(r.rate)))
        base, eff = self.base, self.eff
        if self.others is not None:
            self._list_exceptions(shared)
        else:
            for a, b in self.plan.never_up():  # most of N(N-1)/2 pairs: down, with no check per pair (never empty)
                ab, ba = self._down(base.get((a, b), NONE)), self._down(base.get((b, a), NONE))
                eff[a][(a, b)] = eff[b][(a, b)] = ab
                eff[a][(b, a)] = eff[b][(b, a)] = ba
        try:
            with self.ctl.linkd.batched_rules() as batched:  # the swarm's rules at its hop in one iptables-restore
                done = self._apply_nodes(list(self.plan.nodes), pool, force=True)
        except CommandError as exc:
            for name in batched:
                self.recs.setdefault(name, {})["stale"] = True
            self._save()
            raise RuntimeFailure(f"orbits: initial link state: the rules at the swarm's hop not set: {str(exc)[:300]}") \
                from None
        failed = [(n, e) for n, (_, e) in done.items() if e]
        self._save(events=True)
        if failed:
            raise RuntimeFailure(f"orbits: initial link state not applied on {len(failed)} node(s): "
                                 f"{failed[0][0]}: {failed[0][1]}")
        self.initial_s = time.time() - started
        self.message(f"orbits: initial link state on {len(self.plan.nodes)} nodes in {self.initial_s:.1f} s")
        if self.engine.schedules and wanted():  # the engines' schedule, built before a release is chosen
            self._schedule = self._build_schedule()
        if self.orbits is not None:  # the live view's map, also before a release (seconds at 1,000 satellites)
            try:
                self._tracks = ground_tracks(self.orbits)
            except Exception:  # noqa: BLE001 - a map is no reason to stop a run (publish tries again, quietly)
                self._tracks = None
        return self.initial_s

    def run(self, release: Optional[float] = None, progress: Callable[[float, float, str], None] = lambda d, t, w: None
            ) -> dict:
        """Apply the initial state, then every step at its time until the plan ends (or `stop()`).
        Returns a summary (also in `self.summary`). The initial state is applied first unless `prepare()`
        already did."""
        if not self.apply_delay:
            self.message(f"orbits: engine '{self.engine.name}' cannot apply delay on this host (no sch_netem): "
                         "links follow the plan's up/down" + (" and rate" if self.apply_rate else "")
                         + "; planned delays are recorded, not applied")
        if self.initial_s is None:
            self.prepare()
        by_engine = self._run_by_engine(release, progress)
        if by_engine is not None:
            return by_engine
        steps = [(t, rows) for t, rows in self.plan.steps() if t > 0]
        wall_len = self.plan.duration / self.speedup
        step_rows: list[dict] = []
        initial_s = self.initial_s
        assert self._pool is not None and initial_s is not None  # both made by prepare() above
        with self._pool as pool:
            t0 = release if release is not None else time.time()
            if self.orbits is not None:  # the live view's map: where the nodes are at each plan second
                publish_track(self.ctl.dir, self.orbits, t0, self.speedup, self._tracks)
            i = 0
            n_batches = coalesced_steps = late_steps = 0
            while i < len(steps) and not self.stop_event.is_set():
                ahead = self._prepare_step(steps[i])  # None: not with this engine, or shells off
                if self._wait_until(t0 + steps[i][0] / self.speedup):
                    break
                batch, i = self._due(steps, i, t0)
                if ahead is not None and len(batch) == 1:
                    latest, nodes, done = self._apply_prepared(ahead, pool)
                else:
                    latest, nodes, done = self._apply_batch(batch, pool)
                finished = max(ts for ts, _ in done.values()) if done else time.time()
                n_batches += 1
                coalesced_steps += len(batch) - 1
                # done before the next step was due (one step period after this one), whether or not it changes links
                late_steps += finished > t0 + batch[0][0] / self.speedup + self.plan.step / self.speedup
                out = self._link_rows(batch, done, t0)
                step_rows.append({"t": batch[0][0], "lag_ms": (finished - (t0 + batch[0][0] / self.speedup)) * 1000,
                                  "updates": len(latest), "nodes": len(nodes)})
                self.on_rows(out)
                self._events(out)
                progress(min(wall_len, time.time() - t0), wall_len,
                         f"step t={batch[-1][0]:g} s: {len(latest)} link(s) on {len(nodes)} node(s)")
            if not self.stop_event.is_set():
                end = t0 + wall_len
                while (left := end - time.time()) > 0 and not self.stop_event.wait(min(left, 0.5)):
                    progress(wall_len - left, wall_len, "plan's last interval")
        self._close_shells()
        self._save()
        self.summary = self._summarise(len(steps), step_rows, n_batches, coalesced_steps, late_steps, initial_s)
        return self.summary

    def _summarise(self, steps_planned: int, step_rows: list[dict], n_batches: int, coalesced_steps: int,
                   late_steps: int, initial_s: float) -> dict:
        lags = sorted(s["lag_ms"] for s in step_rows)

        def q(p: float) -> Optional[float]:
            return round(lags[min(len(lags) - 1, int(p * len(lags)))], 3) if lags else None

        return {"engine": self.engine.name, "delay_applied": self.apply_delay, "rate_applied": self.apply_rate,
                "speedup": self.speedup, "initial_s": round(initial_s, 3), "steps_planned": steps_planned,
                "batches": n_batches, "coalesced_steps": coalesced_steps,
                "steps_finished_before_next": (round(1 - late_steps / n_batches, 4) if n_batches else None),
                "step_lag_ms_p50": q(0.5), "step_lag_ms_p99": q(0.99), "step_lag_ms_max": lags[-1] if lags else None,
                "updates": sum(s["updates"] for s in step_rows), "stopped": self.stop_event.is_set(),
                "applied_by": "driver", "shell_processes": self.shell_stats.get("shell_processes", 0),
                "shell_batches": self.shell_stats.get("shell_batches", 0),
                "shell_batch_ms_p50": self.shell_stats.get("shell_batch_ms_p50"),
                "shell_batch_ms_p90": self.shell_stats.get("shell_batch_ms_p90"),
                **{f"{k}_commands": v for k, v in self.counts.items()}}

    def _wait_until(self, due: float) -> bool:
        """Sleep until `due` (wall clock), saving the link state meanwhile if it is time to; True if stopped."""
        wait = due - time.time()
        if wait > 0:
            if wait > 0.2 and time.monotonic() - self._last_save > SAVE_EVERY_S:
                self._save()
                wait = due - time.time()
            if wait > 0 and self.stop_event.wait(wait):
                return True
        return False

    def _due(self, steps: list, i: int, t0: float) -> tuple[list, int]:
        """Step i and every later step already due (merged when the driver is late); the next index."""
        batch = [steps[i]]
        i += 1
        now = time.time()
        while i < len(steps) and t0 + steps[i][0] / self.speedup <= now:
            batch.append(steps[i])
            i += 1
        return batch, i

    # ------------------------------------------------------------------- steps planned ahead (tc, nft)
    def _prepare_step(self, step: tuple) -> Optional[PreparedStep]:
        """Step `step` planned before it is due (netem.runtime.orbit_batches): each node's tc and nft lines for
        its long-lived processes. None where steps are not applied through those (the userspace engine,
        $SWARM_ORBITS_SHELLS=0, TCP buffers sized per step)."""
        links = self.ctl.swarm.spec.links
        if (self.ctl.shells is None or not self.engine.plans_ahead
                or (links is not None and links.tcp_buffers == "bdp")):
            return None
        t, rows = step
        latest = {(r.a, r.b): r for r in rows.itertuples(index=False)}
        nodes = {n for pair in latest for n in pair}
        eff = {n: dict(self.eff[n]) for n in nodes}
        for (a, b), r in latest.items():
            self._set(a, b, *self.conditions(a, b, bool(r.up), r.delay_ms, int(r.rate)), eff=eff)
        nftables = bool(self.ctl.swarm.caps.nftables)
        batches = {n: plan_node_batch(self.engine, n, self.recs.get(n, {}), eff[n], self.by_mac,
                                      self.tc_applied.get(n), nftables) for n in nodes}
        self._start_shells(batches)
        return PreparedStep(t, latest, nodes, eff, batches)

    def _start_shells(self, batches: dict[str, Optional[NodeBatch]]) -> None:
        """A process a node has not needed yet starts now, not when the step is due; one that cannot start
        leaves its node to the controller's apply (which reports the error)."""
        shells = self.ctl.shells
        assert shells is not None
        for n, nb in batches.items():
            if nb is None:
                continue
            try:
                if nb.tc_lines:
                    shells.get(n, TC).ensure_started()
                if nb.nft_line is not None:
                    shells.get(n, NFT).ensure_started()
            except CommandError:
                batches[n] = None

    def _apply_prepared(self, step: PreparedStep, pool: ThreadPoolExecutor
                        ) -> tuple[dict[tuple[str, str], object], set[str], dict]:
        """A step planned ahead, applied: its links become the driver's, each node's lines go to its processes
        (a node without a batch, or gone stale meanwhile, gets the controller's apply). As _apply_batch."""
        self.eff.update(step.eff)

        def one(name: str) -> tuple[str, float, str]:
            rec = self.recs.setdefault(name, {})
            batch = step.batches.get(name)
            try:
                if batch is None or rec.get("stale"):
                    self._apply_one(self.by_name[name], rec, bool(rec.get("stale")))
                else:
                    self._run_node_batch(batch, rec)
                rec.pop("stale", None)
                return name, time.time(), ""
            except (CommandError, RuntimeFailure) as exc:
                rec["stale"] = True
                return name, time.time(), str(exc)

        done = {n: (ts, err) for n, ts, err in pool.map(one, sorted(step.nodes))}
        return step.latest, step.nodes, done

    def _run_node_batch(self, batch: NodeBatch, rec: dict) -> None:
        shells = self.ctl.shells
        assert shells is not None
        if batch.tc_lines:
            shells.run(batch.node, TC, batch.tc_lines)
        rec["tc"] = batch.tc_sig
        self.tc_applied[batch.node] = batch.tc
        if batch.nft_line is not None:
            shells.run(batch.node, NFT, [batch.nft_line])
        rec["nft"] = batch.nft_sig
        with self._count_lock:
            if batch.tc_kind:
                self.counts[f"tc_{batch.tc_kind}"] += 1
            self.counts["nft"] += batch.nft_line is not None

    def _apply_batch(self, batch: list, pool) -> tuple[dict[tuple[str, str], object], set[str], dict]:
        """The latest row of every link changed in `batch` (steps that came due together) set and applied:
        (those rows by link, the nodes touched, per node (applied at, error))."""
        latest: dict[tuple[str, str], Any] = {}  # a plan row (a pandas itertuples record)
        for _, rows in batch:
            for r in rows.itertuples(index=False):
                latest[(r.a, r.b)] = r
        nodes: set[str] = set()
        for (a, b), r in latest.items():
            self._set(a, b, *self.conditions(a, b, bool(r.up), r.delay_ms, int(r.rate)))
            nodes.update((a, b))
        return latest, nodes, self._apply_nodes(sorted(nodes), pool)

    def _link_rows(self, batch: list, done: dict, t0: float) -> list[dict]:
        """links.csv rows of one batch: every planned change with when it was due and when it was applied."""
        coalesced = len(batch) > 1
        out = []
        for t, rows in batch:
            scheduled = t0 + t / self.speedup
            for r in rows.itertuples(index=False):
                ts_a, err_a = done[r.a]
                ts_b, err_b = done[r.b]
                applied = max(ts_a, ts_b)
                out.append({"run_id": self.run_id, "step": int(round(t / self.plan.step)), "t_plan_s": t,
                            "scheduled_ts": round(scheduled, 6), "applied_ts": round(applied, 6),
                            "lag_ms": round((applied - scheduled) * 1000, 3), "a": r.a, "b": r.b,
                            "kind": r.kind, "up": bool(r.up),
                            "delay_ms": "" if r.delay_ms != r.delay_ms else r.delay_ms, "rate": int(r.rate),
                            "delay_applied": bool(r.up) and self.apply_delay, "coalesced": coalesced,
                            "ok": not (err_a or err_b), "error": err_a or err_b, "applied_by": "driver"})
        return out

    def _run_by_engine(self, release: Optional[float], progress: Callable[[float, float, str], None]
                       ) -> Optional[dict]:
        """With the userspace engine: hand it the whole plan and let it apply each change at its instant
        (netem.runtime.orbit_schedule); its measured lags go to links.csv. None where that does not apply (another
        engine, $SWARM_ORBITS_ENGINE_SCHEDULE=0, a link no engine holds): the driver then applies each step."""
        if not self.engine.schedules or not wanted():
            return None
        t0 = release if release is not None else time.time() + LEAD_S
        sched, built = self._schedule if self._schedule is not None else self._build_schedule()
        self._schedule = None
        if not built:
            self.message("orbits: a link of the plan is not held by the userspace engine: the driver applies each step")
            return None
        sched.shift(t0 - sched.t0)  # built ahead (prepare) from instant 0: now at the release
        late = time.time() + LEAD_S - sched.t0
        if release is None and late > 0:  # building took longer than the lead (a large plan): start later
            if late >= 0.1:
                self.message(f"orbits: handing {len(sched.changes)} changes to the engines took {late + LEAD_S:.1f} s; "
                             f"the plan starts {late:.1f} s later than it would have")
            sched.shift(late)
        elif late > 0:  # the release is fixed (contact plans, DTN traffic): what is due before the hand-over goes late
            moved = sched.not_before(time.time() + LEAD_S)
            self.message(f"orbits: the release came {late:.1f} s before the engines could take the plan: {moved} "
                         "change(s) due before then are applied at once, late (their lag is in links.csv)")
        t0 = sched.t0
        if self.orbits is not None:  # the live view's map, as in the driver's own loop
            publish_track(self.ctl.dir, self.orbits, t0, self.speedup, self._tracks)
        try:
            missing = sched.run(progress, self.stop_event)
        finally:
            for rec in self.recs.values():
                rec["stale"] = True  # the engines' configurations moved on without the records: re-plan next time
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._close_shells()
            self._save()
        entries = sum(len(e) for e in sched.entries.values())
        self.summary = {"engine": self.engine.name, "delay_applied": self.apply_delay, "rate_applied": self.apply_rate,
                        "speedup": self.speedup, "initial_s": round(self.initial_s or 0.0, 3),
                        "steps_planned": len({c.t for c in sched.changes}), "coalesced_steps": 0,
                        **step_summary(sched.changes, self.plan.step / self.speedup),
                        "updates": len(sched.changes) - len(missing), "not_applied": len(missing),
                        "stopped": self.stop_event.is_set(), "applied_by": "engine", "engine_entries": entries,
                        "engines": len(sched.entries)}
        return self.summary

    def _build_schedule(self) -> tuple[EngineSchedule, bool]:
        """The plan as engine entries from instant 0 (shifted to the release when it runs): at 1,000 nodes the
        ~7,000 changes of two minutes take seconds to build, longer than a release's lead."""
        sched = EngineSchedule(self, 0.0)
        return sched, sched.build()

    def stop(self) -> None:
        self.stop_event.set()

    def _close_shells(self) -> None:
        stats = self.ctl.close_shells()
        for k, v in stats.items():
            self.shell_stats[k] = v if "_ms_" in k else self.shell_stats.get(k, 0) + v

    def close(self) -> None:
        """Release the worker threads and the long-lived tc/nft processes (also after an error between
        prepare() and run())."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._close_shells()

    def restore(self) -> None:
        """The spec's conditions back on every node (the plan's cuts and delays removed)."""
        self.ctl.restore()
