"""Link conditions and faults of a running swarm: the link controller, which keeps the links' state
(netem/state.py), its transactions, the selection of links and the faults, and has the engine's driver
(netem/engines/drivers/) apply each node's plan (netem/engines/) to the running nodes.

Everything applied lives inside the nodes (a root qdisc with handle 5eed: on the ISL interface, an nft table
`netdev swarm_emu`; with the userspace engine its process, the chain SWARM_EMU_LINKS in the mangle table and
PREROUTING's jump to it, see netem.engines.drivers.linkd): removing a namespace or container removes it; `clear`
removes exactly those and nothing else (a root qdisc with another handle is left alone); the engine process
stays, idle, until the node goes.
"""
from __future__ import annotations

import copy
import dataclasses
import fcntl
import heapq
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Callable, Iterator

from netem.engines.base import Engine, tcp_buffer_bytes, tcp_buffer_sysctls
from netem.engines.drivers import driver_for, engine_for
from netem.engines.drivers.linkd import Linkd
from netem.engines.hold import LinkdHold
from netem.spec.links import NONE, DirectedLinks, Impairment, LinkOverride, LinksSpec, resolve_links
from netem.state import LINKS_FILE, LinkRow, LinkState, by_node, check_partition, node_links, node_needs_visit, with_cuts
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.mesh.plan import BATADV_IF, enslaved_interfaces
from swarm.runtime.backends import swarm_dir
from swarm.runtime.backends.base import NODE_ACTIONS
from swarm.runtime.context import SwarmContext
from swarm.runtime.shell import Shells
from swarm.observe.events import emit, emit_many, grouped_view_changes, link_view

#: nodes changed at once from which their rules at the swarm's hop go in one iptables-restore (Linkd.batched_rules)
BATCH_RULES_MIN = 32
NODE_STATE_AFTER = {"stop": "stopped", "kill": "killed", "pause": "paused", "unpause": "running", "restart": "running"}


class LinkController:
    """Applies link conditions and faults to one running swarm."""

    def __init__(self, swarm: SwarmContext, workers: int = 8,
                 on_node_restart: Callable[[str, float], None] = lambda node, timeout: None):
        self.swarm = swarm  # the context, not the Swarm facade: name, spec, nodes, backend, runner, workdir, caps
        # what else a restarted node needs back (its mesh daemon, its DTN agent): the caller's add-ons
        self.on_node_restart = on_node_restart
        links = swarm.spec.links
        # container backends: the userspace engine is a default where it runs at a forwarding hop of the backend's
        # (compose: on the host beside the swarm's bridge); elsewhere (the multi-host swarm backend, no root, no
        # br_netfilter) only when pinned (`engine: userspace`), inside each node: its binary copied into each
        # container, and the node image needs iptables
        self.engine: Engine = engine_for(swarm.caps, swarm.backend, links.engine if links else None)
        self.workers = workers
        self.dir = swarm_dir(swarm.workdir, swarm.name)
        self.names = [n.name for n in swarm.nodes]
        self.linkd = Linkd(swarm)  # the userspace engine's processes (its schedules and counters)
        self.driver = driver_for(self.engine, swarm, self.linkd)  # applies the engine's plans
        self._armed: set[tuple[str, str]] = set()  # prearm(): directed links held as pass-through while pushing
        self._spec_links: DirectedLinks | None = None  # spec_links(), resolved and checked once
        self._by_mac: dict[str, str] | None = None  # apply(): each node's MAC, made once
        self.cause: str | None = None  # who the events it logs say made the change (None: this process's command)

    def caused_by(self, cause: str) -> "LinkController":
        """This controller (the same state, engine driver and processes) with the events it logs attributed to
        `cause`, e.g. "fault timeline" or "orbit schedule"."""
        other = copy.copy(self)
        other.cause = cause
        return other

    # ------------------------------------------------------------------------- long-lived processes
    @property
    def shells(self) -> Shells | None:
        """The long-lived tc and nft processes while open (open_shells), else None."""
        return self.driver.shells

    def open_shells(self) -> Shells:
        """From now on (until close_shells) each node's tc and nft changes go to long-lived processes
        (netem.engines.drivers.kernel.KernelDriver.open_shells)."""
        return self.driver.open_shells()

    def close_shells(self) -> dict[str, int | float]:
        """End the long-lived processes; what they did (processes started, batches fed)."""
        return self.driver.close()

    # ---------------------------------------------------------------------------------- state file
    @property
    def path(self):
        return self.dir / LINKS_FILE

    def load(self) -> LinkState:
        if self.path.exists():
            return LinkState.from_json(json.loads(self.path.read_text()))
        return LinkState(engine=self.engine.name)

    def _save(self, state: LinkState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        state.engine = self.engine.name
        state.changed = time.time()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=1))
        tmp.replace(self.path)

    @contextmanager
    def _transaction(self, events: bool = True) -> Iterator[LinkState]:
        """The state, locked against other writers; saved on exit, also after a failure while applying (which
        marks the nodes concerned stale), but not after a SpecError (raised before anything is applied).
        `events`: log each link's change (False: the caller logged them as they happened, e.g. the orbit driver)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "links.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.load()
            before = link_view(state.base, state.cuts) if events else {}  # a view per pair: only when logged
            try:
                yield state
            except SpecError:
                raise
            except BaseException:
                self._save(state)
                raise
            self._save(state)
            if events:  # swarm.observe: one `link` event per change, one `links` event for a change many share
                single, bulked = grouped_view_changes(before, link_view(state.base, state.cuts))
                emit_many(self.dir, "link", single, cause=self.cause)
                emit_many(self.dir, "links", bulked, cause=self.cause)

    # ------------------------------------------------------------------------------- conditions
    def spec_links(self) -> DirectedLinks:
        """The conditions the swarm's spec asks for (validated against the engine)."""
        if self._spec_links is None:  # checked once per controller
            links = resolved_spec_links(self.swarm.spec.links, tuple(self.names))
            self.engine.check(links)
            self._spec_links = links
        return dict(self._spec_links)

    def apply_spec(self) -> None:
        """Set the spec's `links:` on every node (called by `Swarm.up`)."""
        links = self.spec_links()
        with self._transaction() as state:
            state.base = links
            self._push(state)

    def impair(self, values: Impairment, *, between: list[str] | None = None, direction: str = "both",
               node: str | None = None, all_links: bool = False) -> list[tuple[str, str]]:
        """Lay `values` over the configured conditions of the selected directed links (other parameters kept).
        Validated in full before anything is applied. Returns the links changed."""
        targets = self.select(between=between, direction=direction, node=node, all_links=all_links)
        with self._transaction() as state:
            new = dict(state.base)
            for pair in targets:
                merged = new.get(pair, NONE).merge(values)
                merged.check_consistent(f"link {pair[0]}->{pair[1]}")
                new[pair] = merged
            self.engine.check(with_cuts(new, state.cuts), "impair")
            state.base = {p: imp for p, imp in new.items() if imp.values()}
            self._push(state)
        return targets

    def reset(self, *, between: list[str] | None = None, direction: str = "both", node: str | None = None) -> None:
        """Forget the configured conditions of the selected links (cuts stay)."""
        targets = set(self.select(between=between, direction=direction, node=node, all_links=between is None and node is None))
        with self._transaction() as state:
            state.base = {p: imp for p, imp in state.base.items() if p not in targets}
            self._push(state)

    def clear(self) -> list[str]:
        """Remove every condition and cut, and everything of the framework's from every running node."""
        with self._transaction() as state:
            state.base, state.cuts = {}, set()
            return self._push(state, clearing=True)

    def select(self, *, between: list[str] | None = None, direction: str = "both", node: str | None = None,
               all_links: bool = False) -> list[tuple[str, str]]:
        """The directed links a selection names (SpecError for unknown nodes or a bad direction)."""
        given = sum(x for x in (between is not None, node is not None, all_links))
        if given != 1:
            raise SpecError("impair: select the links with exactly one of --between A B, --node N or --all")
        if all_links:
            return [(s, d) for s in self.names for d in self.names if s != d]
        try:
            sel = LinkOverride(between=list(between) if between is not None else None, node=node, direction=direction)
        except Exception as exc:  # pydantic ValidationError: one line
            msg = exc.errors()[0]["msg"].removeprefix("Value error, ") if hasattr(exc, "errors") else str(exc)
            raise SpecError(f"impair: {msg}") from None
        for name in sel.named_nodes():
            self.swarm.node(name)
        return sel.targets(self.names)

    # ------------------------------------------------------------------------------------ faults
    def cut(self, a: str, b: str) -> None:
        """Cut the link between a and b, both ways."""
        self._check_pair(a, b, "cut")
        with self._transaction() as state:
            cuts = state.cuts | {(a, b), (b, a)}
            self.engine.check(with_cuts(state.base, cuts), "cut")
            emit(self.dir, "fault", kind="cut", args=[a, b], cause=self.cause)
            state.cuts = cuts
            self._push(state)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Heal the link between a and b (both ways), or every cut and partition when no pair is given."""
        if (a is None) != (b is None):
            raise SpecError("heal: give two nodes (heal one link) or none (heal all)")
        if a is not None and b is not None:
            self._check_pair(a, b, "heal")
        with self._transaction() as state:
            emit(self.dir, "fault", kind="heal", args=[a, b] if a is not None else [], cause=self.cause)
            state.cuts = set() if a is None else state.cuts - {(a, b), (b, a)}
            self._push(state)

    def partition(self, groups: list[list[str]]) -> None:
        """Cut every link between nodes of different groups (groups must cover every node exactly once)."""
        check_partition(groups, self.names, "partition")
        where = {n: i for i, g in enumerate(groups) for n in g}
        cuts = {(s, d) for s in self.names for d in self.names if s != d and where[s] != where[d]}
        with self._transaction() as state:
            cuts |= state.cuts
            self.engine.check(with_cuts(state.base, cuts), "partition")
            emit(self.dir, "fault", kind="partition", args=[",".join(g) for g in groups], cause=self.cause)
            state.cuts = cuts
            self._push(state)

    def node_action(self, node: str, action: str, ready_timeout: float = 60) -> None:
        """stop | kill | pause | unpause | restart one node; a restarted or unpaused node gets its links back."""
        self.swarm.node(node)
        if action not in NODE_ACTIONS:
            raise SpecError(f"node action {action!r}: expected one of {', '.join(NODE_ACTIONS)}")
        self.swarm.backend.node_action(self.swarm.name, node, action)
        emit(self.dir, "node", node=node, state=NODE_STATE_AFTER.get(action, action), action=action, cause=self.cause)
        with self._transaction() as state:
            rec = state.nodes.setdefault(node, {})
            if action in ("stop", "kill", "pause"):
                state.node_faults[node] = action
                if action != "pause":  # a container's network namespace goes with it: find and set again
                    rec.pop("iface", None)
                rec["stale"] = True
                return
            state.node_faults.pop(node, None)
            if action == "restart":
                rec.pop("iface", None)
            rec["stale"] = True
            self._wait_running(node, ready_timeout)
            self._push(state, nodes=[node], force=True)
            if action == "restart":  # the node's processes were all ended: its mesh daemon, DTN agent, ...
                self.on_node_restart(node, ready_timeout)

    def restore(self) -> None:
        """Back to the spec's conditions: heal everything, drop run-time changes, bring faulted nodes back."""
        state = self.load()
        for node, fault in sorted(state.node_faults.items()):
            self.node_action(node, "unpause" if fault == "pause" else "restart")
        links = self.spec_links()
        with self._transaction() as state:
            state.base, state.cuts = links, set()
            self._push(state)

    def prearm(self, links: set[tuple[str, str]] | list[tuple[str, str]]) -> list[str]:
        """Userspace engine: hold these directed links (no conditions now) in their receivers' engines as
        pass-through links (the NFQUEUE rule for the sender's MAC and a bare `link <mac>` line, configuration
        first), so a timeline handed to the engine ahead of time can change them at their instant. Every packet
        of those links then crosses the engine (cost of NFQUEUE), so only links a timeline changes are armed.
        Fail closed like any held link: no engine listening, their packets drop. The saved state is unchanged;
        the next change re-plans the receivers (their records then differ) and drops the pass-through lines.
        Returns the receivers visited; RuntimeFailure naming a node where it failed."""
        links = set(links)
        if not self.engine.schedules or not links:
            return []
        self._armed = links
        try:
            with self._transaction(events=False) as state:
                return self._push(state, sorted({d for _, d in links}))
        finally:
            self._armed = set()

    def _armed_for(self, node: str, ingress: dict[str, Impairment], by_mac: dict[str, str]) -> dict[str, str]:
        """The senders' MACs pre-armed into `node` (prearm) that have no conditions, with their labels."""
        if not self.engine.schedules:
            return {}
        return {by_mac[s]: f"{s}->{d} (pre-armed)" for s, d in self._armed if d == node and by_mac[s] not in ingress}

    def _check_pair(self, a: str, b: str, what: str) -> None:
        self.swarm.node(a)
        self.swarm.node(b)
        if a == b:
            raise SpecError(f"{what}: {a!r} twice: give two different nodes")

    def _wait_running(self, node: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.swarm.backend.node_states(self.swarm.name).get(node) != "running":
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"node {node!r}: not running {timeout:.0f} s after the fault")
            time.sleep(0.2)

    # ------------------------------------------------------------------------------------ showing
    def rows(self) -> list[LinkRow]:
        """Every directed link with a condition or a cut, in node order."""
        state = self.load()
        eff = state.effective()
        order = {n: i for i, n in enumerate(self.names)}
        pairs = sorted(set(state.base) | state.cuts, key=lambda p: (order.get(p[0], 1e9), order.get(p[1], 1e9)))
        return [LinkRow(s, d, state.base.get((s, d), NONE).describe(), (s, d) in state.cuts,
                        eff.get((s, d), NONE).describe()) for s, d in pairs]

    def condition_groups(self, state: LinkState) -> list[dict]:
        """The links with a condition or a cut, one entry per (condition, cut) with how many links have it and
        the first three in node order (without a row per link: a 1,000-node swarm has 999,000)."""
        eff = state.effective()
        order = {n: i for i, n in enumerate(self.names)}
        groups: dict[tuple, list] = {}
        for pair in set(state.base) | state.cuts if state.cuts else state.base:
            imp = state.base.get(pair, NONE)
            entry = groups.setdefault((id(imp), pair in state.cuts), [imp, pair in state.cuts, []])
            entry[2].append(pair)
        out = []
        for imp, cut, pairs in groups.values():
            first = heapq.nsmallest(3, pairs, key=lambda p: (order.get(p[0], 1e9), order.get(p[1], 1e9)))
            out.append({"links": len(pairs), "configured": imp.describe(), "cut": cut,
                        "effective": eff.get(first[0], NONE).describe(), "examples": [f"{s} -> {d}" for s, d in first]})
        merged: dict[tuple, dict] = {}  # equal conditions held by different objects: one line
        for g in out:
            key = (g["configured"], g["cut"], g["effective"])
            if key in merged:
                merged[key]["links"] += g["links"]
            else:
                merged[key] = g
        return sorted(merged.values(), key=lambda g: -g["links"])

    def summary(self, every: bool = True, rows_up_to: int = 0) -> dict:
        """What `impair --show` prints; with `every` False and more than `rows_up_to` links, `groups` (one per
        condition) instead of a row per link in `links`."""
        state = self.load()
        notes = [f"{n}: {rec['gso_note']}; loss hits its TCP in bursts of segments"
                 for n, rec in sorted(state.nodes.items()) if rec.get("gso_note")]
        notes += self.driver.notes(state)
        for node, tb in self.tcp_buffers().items():
            notes.append(f"{node}: TCP buffers sized from the bandwidth-delay product: {tb['bytes'] / 2**20:.0f} MiB "
                         f"({', '.join(tb['set']) or 'nothing'} set" +
                         (f"; not settable here: {', '.join(tb['not_set'])}" if tb["not_set"] else "") + ")")
        count = len(set(state.base) | state.cuts) if state.cuts else len(state.base)
        if not every and count > rows_up_to:
            return {"swarm": self.swarm.name, "engine": self.engine.name, "engine_description": self.engine.describe(),
                    "engine_placement": self.placement(), "groups": self.condition_groups(state), "link_count": count,
                    "cuts": len(state.cuts), "node_faults": state.node_faults, "notes": notes,
                    "changed": state.changed}
        links = [vars(r) for r in self.rows()]
        for row in links:  # a condition is not in effect where the engine that applies it does not answer
            dead = [n for n in (row["dst"], row["src"]) if n in self.driver.not_answering]
            if dead and not row["cut"]:
                row["effective"] = f"unknown: the engine of {dead[0]} is not answering (fails closed: drops)"
        return {"swarm": self.swarm.name, "engine": self.engine.name, "engine_description": self.engine.describe(),
                "engine_placement": self.placement(),
                "links": links, "cuts": len(state.cuts), "node_faults": state.node_faults,
                "notes": notes, "changed": state.changed}

    def placement(self) -> str | None:
        """Where the engine's own processes run (None: it has none): for the userspace engine the backend's
        forwarding hop (the netns switch, the compose host) or each node."""
        return self.driver.placement()

    def last_change(self) -> dict[str, dict]:
        """Per node: the userspace engine's generation and when it took the last change (engine's clock)."""
        state = self.load()
        return {n: {"gen": rec.get("linkd_gen"), "set_at_ns": rec.get("linkd_set_at_ns")}
                for n, rec in state.nodes.items() if rec.get("linkd_gen")}

    def first_packet_after(self, nodes: list[str] | None = None) -> dict[str, int]:
        """Per node (userspace engine): the wall-clock time (ns) at which the first packet met the conditions
        of its last change (0: none yet)."""
        out = {}
        for node in nodes or self.names:
            head, _ = self.linkd.stats(node)
            if head:
                out[node] = int(head.get("first_packet_at_ns", 0))
        return out

    # ------------------------------------------------------------------- applying (public: the orbit driver)
    def transaction(self, events: bool = True):
        """The link state (links.json), locked against other writers and saved on exit (see _transaction)."""
        return self._transaction(events)

    def apply(self, node, rec: dict, links: DirectedLinks, *, force: bool = False, cut_frames: bool = True,
              others: Impairment | None = None):
        """Make one running node match `links` (the effective conditions of the directed links touching it),
        changing only the parts whose plan changed; `rec` is the node's record in the link state, updated in
        place. Returns the engine's plan (None: nothing to visit). The orbit driver calls this per node and
        step, holding the whole swarm's state in memory between saves. `others`: the condition of every sender
        not in `links` (an engine that holds_others; the orbit plan's never-up pairs)."""
        if self._by_mac is None:  # once per controller: the orbit driver calls this per node and step
            self._by_mac = {n.name: n.isl_mac for n in self.swarm.nodes}
        by_mac = self._by_mac
        return self._apply_node(node, rec, links, by_mac, force, cut_frames=cut_frames, others=others)

    def change_tc(self, node: str, changes: list[list[str]]) -> None:
        """In-place tc changes to a node's tree (KernelDriver.change_tc): no flush of the packets it queues."""
        self.driver.change_tc(node, changes)

    def _push(self, state: LinkState, nodes: list[str] | None = None, force: bool = False,
              clearing: bool = False) -> list[str]:
        """Make every (or the given) running node's qdiscs and nft table match the state. Nodes whose plan is
        unchanged are not touched unless `force`; nodes not running are marked stale and done when they come
        back; `clearing` also removes the framework's qdisc and table where the state says there are none.
        Raises RuntimeFailure naming the nodes that failed (after trying all)."""
        eff = by_node(state.effective())  # each node's share, found once
        states = self.swarm.backend.node_states(self.swarm.name)
        todo = [n for n in self.swarm.nodes if nodes is None or n.name in nodes]
        by_mac = {n.name: n.isl_mac for n in self.swarm.nodes}  # links are selected by link-layer address

        report = progress_reporter(self.swarm.message, len(todo), "link conditions")

        def one(node) -> tuple[str, str]:
            rec = state.nodes.setdefault(node.name, {})
            if states.get(node.name) != "running":
                rec["stale"] = True
                return node.name, ""
            try:
                self._apply_node(node, rec, eff.get(node.name, {}), by_mac, force or rec.get("stale", False), clearing)
                rec.pop("stale", None)
                return node.name, ""
            except (CommandError, RuntimeFailure) as exc:
                rec["stale"] = True
                return node.name, str(exc)
            finally:
                report()

        batch: AbstractContextManager[list[str]] = (self.linkd.batched_rules() if len(todo) >= BATCH_RULES_MIN
                                                     else nullcontext([]))
        try:
            with batch as batched, ThreadPoolExecutor(max(1, min(self.workers, len(todo)))) as pool:
                results = list(pool.map(one, todo))
        except (CommandError, RuntimeFailure) as exc:  # the swarm's one iptables-restore: none of its rules are in
            for name in batched:
                state.nodes.setdefault(name, {})["stale"] = True
            raise RuntimeFailure(f"link conditions: the rules of {len(batched)} node(s) not set at the swarm's hop: "
                                 f"{str(exc)[:300]}") from None
        failed = [(n, e) for n, e in results if e]
        if failed:
            raise RuntimeFailure(f"link conditions not applied on {len(failed)} node(s): {failed[0][0]}: {failed[0][1]}")
        return [n for n, _ in results]

    def _apply_node(self, node, rec: dict, eff: DirectedLinks, by_mac: dict[str, str], force: bool,
                    clearing: bool = False, cut_frames: bool = True, others: Impairment | None = None):
        """Apply one node's plan (the driver: only the parts that changed, see netem.state.parts_to_apply); returns
        the plan (None: nothing to visit). `cut_frames=False` (the orbit driver): with the userspace engine a
        link that is down drops its IP packets in the engine only, without the nftables drop of its other
        frames (a process per change). `others`: see apply."""
        if others is not None and not self.engine.holds_others:
            raise ValueError(f"engine {self.engine.name!r} takes every pair, not a condition for the others")
        egress, ingress, labels = node_links(eff, node.name, by_mac)
        armed = self._armed_for(node.name, ingress, by_mac)
        if not node_needs_visit(rec, bool(egress or ingress or armed or others is not None), clearing):
            return None
        unknown = clearing and "tc" not in rec  # no record (e.g. state lost in a crash): look, but tolerate no tools
        iface = rec.get("iface") or self.isl_iface(node)
        rec["iface"] = iface
        hold = dataclasses.replace(self.driver.hold(node, iface, cut_frames), senders=self._senders(node.name, by_mac),
                                   others=others)
        ingress, labels, hold = with_passthrough(ingress, labels, hold, armed)
        cmds = self.engine.plan_node(iface, egress, ingress, labels, hold)
        try:
            self.driver.apply(node, iface, rec, cmds, force, clearing)
            self._apply_segmentation(node.name, iface, rec, cmds.segment, force)
            self._apply_tcp_buffers(node.name, rec, eff, force)
        except CommandError as exc:
            if not (unknown and exc.returncode in (126, 127)):  # the node's image has no tc / nft: nothing of ours
                raise
        return cmds

    def _senders(self, node: str, by_mac: dict[str, str]) -> frozenset[str]:
        """The MACs of every other node (what a node's engine may hold as one default, see
        netem.engines.userspace.split_ingress), made once per node."""
        cache = self.__dict__.setdefault("_senders_cache", {})
        if node not in cache:
            cache[node] = frozenset(mac for name, mac in by_mac.items() if name != node)
        return cache[node]

    def _apply_tcp_buffers(self, node: str, rec: dict, eff: DirectedLinks, force: bool) -> None:
        """With `links: {tcp_buffers: bdp}`: the node's TCP buffer sysctls sized from its links' bandwidth-delay
        product (netem.engines.base.tcp_buffer_bytes); what was set (or why not) is kept for `impair --show` and
        the run's host.json. Only grown, never shrunk below what the node had."""
        links = self.swarm.spec.links
        if links is None or links.tcp_buffers != "bdp":
            return
        size = tcp_buffer_bytes(eff, node)
        if not size or (rec.get("tcp_buffers", {}).get("bytes") == size and not force):
            return
        done: list[str] = []
        failed: list[str] = []
        for key, value in tcp_buffer_sysctls(size).items():
            res = self._run(node, ["sysctl", "-q", "-w", f"{key}={value}"], check=False)
            (done if res.ok else failed).append(key)
        rec["tcp_buffers"] = {"bytes": size, "set": done, "not_set": failed}

    def tcp_buffers(self) -> dict[str, dict]:
        """Per node: the TCP buffer size set from the BDP and which sysctls took it."""
        return {n: rec["tcp_buffers"] for n, rec in sorted(self.load().nodes.items()) if rec.get("tcp_buffers")}

    def _apply_segmentation(self, node: str, iface: str, rec: dict, wanted: bool, force: bool) -> None:
        """gso_max_segs 1 on the ISL interface while the node sends on a lossy link (engines.needs_segmentation);
        the previous value is kept in the state and put back. A kernel that cannot change it is recorded, not
        fatal: loss then hits TCP in bursts, and `impair --show` says so."""
        if wanted and ("gso_saved" not in rec or force):
            if "gso_saved" not in rec:
                res = self._run(node, ["ip", "-j", "-d", "link", "show", "dev", iface])
                rec["gso_saved"] = json.loads(res.stdout or "[{}]")[0].get("gso_max_segs", 65535)
            res = self._run(node, ["ip", "link", "set", "dev", iface, "gso_max_segs", "1"], check=False)
            rec["gso_note"] = "" if res.ok else f"gso_max_segs not set ({(res.stderr or res.stdout).strip()[:80]})"
        elif not wanted and "gso_saved" in rec:
            self._run(node, ["ip", "link", "set", "dev", iface, "gso_max_segs", str(rec["gso_saved"])], check=False)
            rec.pop("gso_saved")
            rec.pop("gso_note", None)

    def _run(self, node: str, argv: list[str], input: str | None = None, check: bool = True):
        return self.driver.run(node, argv, input=input, check=check)

    def isl_iface(self, node) -> str:
        """The interface holding the node's ISL address (compose may put it on eth0 or eth1)."""
        known = self.swarm.backend.isl_iface(self.swarm.name, node.name)
        if known:
            return known
        deadline = time.monotonic() + 10
        while True:
            res = self._run(node.name, ["ip", "-o", "-4", "addr", "show", "to", f"{node.isl_ip}/32"], check=False)
            fields = res.stdout.split()
            if res.ok and len(fields) > 1:
                iface = fields[1].split("@")[0]
                return self._hard_iface(node.name, iface)
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"node {node.name!r}: no interface holds its ISL address {node.isl_ip}")
            time.sleep(0.2)

    def _hard_iface(self, node: str, iface: str) -> str:
        """Under batman-adv the ISL address sits on bat0; links are impaired on the interface under it."""
        if iface != BATADV_IF:
            return iface
        res = self._run(node, ["ip", "-o", "link", "show", "master", BATADV_IF], check=False)
        under = enslaved_interfaces(res.stdout) if res.ok else []
        return under[0] if under else iface


_RESOLVED: dict[tuple[str, tuple[str, ...]], DirectedLinks] = {}
_RESOLVED_LOCK = threading.Lock()


def resolved_spec_links(links: LinksSpec | None, names: tuple[str, ...]) -> DirectedLinks:
    """resolve_links of a spec's `links:`, the last one kept per process: an experiment checks each swarm in its
    preflight and then brings it up as another Swarm, with a controller of its own (999,000 pairs at 1,000 nodes:
    seconds each). Within one Swarm the controller keeps its own (spec_links). Callers copy before changing."""
    key = (links.model_dump_json() if links is not None else "", names)
    with _RESOLVED_LOCK:
        if key not in _RESOLVED:
            _RESOLVED.clear()
            _RESOLVED[key] = resolve_links(links, list(names))
        return _RESOLVED[key]


#: nodes from which applying the links says how far it is (every tenth of them, and the end)
PROGRESS_MIN_NODES = 100


def progress_reporter(message: Callable[[str], None], total: int, what: str) -> Callable[[], None]:
    """A thread-safe `one more node done` for a long apply: a message every tenth of `total` nodes (nothing below
    PROGRESS_MIN_NODES), with the seconds so far."""
    if total < PROGRESS_MIN_NODES:
        return lambda: None
    lock, started, done = threading.Lock(), time.monotonic(), [0]
    step = max(1, total // 10)

    def report() -> None:
        with lock:  # the message too: in order
            done[0] += 1
            if done[0] % step == 0 or done[0] == total:
                message(f"{what}: {done[0]}/{total} nodes configured ({time.monotonic() - started:.1f} s)")
    return report


def with_passthrough(ingress: dict[str, Impairment], labels: dict[str, str], hold: LinkdHold, armed: dict[str, str]
                     ) -> tuple[dict[str, Impairment], dict[str, str], LinkdHold]:
    """A node's ingress, labels and hold with the pre-armed senders (`armed`: MAC -> label) held with no
    conditions (pass-through, see LinkController.prearm); unchanged when none."""
    if not armed:
        return ingress, labels, hold
    return ({**ingress, **{mac: NONE for mac in armed}}, {**labels, **armed},
            dataclasses.replace(hold, passthrough=frozenset(armed)))
