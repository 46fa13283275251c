"""Link conditions and faults of a running swarm: the link controller, which applies the plans of the
link engines (netem/engines.py) to the running nodes and keeps their state (netem/state.py).

Everything applied lives inside the nodes (a root qdisc with handle 5eed: on the ISL interface, an nft table
`netdev swarm_emu`; with the userspace engine its process, the chain SWARM_EMU_LINKS in the mangle table and
PREROUTING's jump to it, see netem.runtime.linkd): removing a namespace or container removes it; `clear`
removes exactly those and nothing else (a root qdisc with another handle is left alone); the engine process
stays, idle, until the node goes.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from flightsw import protocol as proto
from netem.engines import Engine, LinkdHold, tcp_buffer_bytes, tcp_buffer_sysctls
from netem.tc import TC_MAJOR, nft_clear_script
from netem.spec.links import NONE, DirectedLinks, Impairment, LinkOverride, resolve_links
from netem.state import (LINKS_FILE, LinkRow, LinkState, check_partition, had_parts, node_links, node_needs_visit,
                         parts_to_apply, signature, with_cuts)
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.mesh.plan import BATADV_IF, enslaved_interfaces
from swarm.runtime.backends import swarm_dir
from swarm.runtime.backends.base import NODE_ACTIONS
from netem.runtime.linkd import KERNEL_HELD_PACKETS, Linkd, engine_for
from swarm.runtime.context import SwarmContext
from swarm.runtime.shell import NFT, TC, Shells, one_line_nft
from swarm.observe.events import emit, link_changes, link_view

DEFAULT_QDISCS = {"noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo", "bfifo", "sfq", "cake"}
EXEC_TIMEOUT = 60
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
        self._not_answering: set[str] = set()  # nodes whose userspace engine did not answer (summary())
        self.dir = swarm_dir(swarm.workdir, swarm.name)
        self.names = [n.name for n in swarm.nodes]
        self.linkd = Linkd(swarm)
        self.shells: Shells | None = None  # open_shells(): tc and nft batches to long-lived processes
        self._armed: set[tuple[str, str]] = set()  # prearm(): directed links held as pass-through while pushing

    # ------------------------------------------------------------------------- long-lived processes
    def open_shells(self) -> Shells:
        """From now on (until close_shells) the tc and nft changes of a node go to one long-lived `tc -batch`
        and one `nft -i` process in it (swarm.runtime.shell), each fed a node's whole change at once, instead of
        a process per change. A forced apply (a node's first, or after a failure) still looks at the node's
        root qdisc with a `tc qdisc show` process of its own: only then is what is there not known."""
        if self.shells is None:
            name, backend = self.swarm.name, self.swarm.backend
            self.shells = Shells(self.swarm.runner, lambda node, argv: backend.exec_prefix(name, node, interactive=True)
                                 + proto.labelled(argv, proto.label(name, node)))  # ps names the swarm (issue 29 #12)
        return self.shells

    def close_shells(self) -> dict[str, int]:
        """End the long-lived processes; what they did (processes started, batches fed)."""
        shells, self.shells = self.shells, None
        if shells is None:
            return {}
        stats = shells.stats()
        shells.close()
        return stats

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
            before = link_view(state.base, state.cuts)
            try:
                yield state
            except SpecError:
                raise
            except BaseException:
                self._save(state)
                raise
            self._save(state)
            for change in link_changes(before, link_view(state.base, state.cuts)) if events else []:  # swarm.observe
                emit(self.dir, "link", **change)

    # ------------------------------------------------------------------------------- conditions
    def spec_links(self) -> DirectedLinks:
        """The conditions the swarm's spec asks for (validated against the engine)."""
        links = resolve_links(self.swarm.spec.links, self.names)
        self.engine.check(links)
        return links

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
            emit(self.dir, "fault", kind="cut", args=[a, b])
            state.cuts = cuts
            self._push(state)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Heal the link between a and b (both ways), or every cut and partition when no pair is given."""
        if (a is None) != (b is None):
            raise SpecError("heal: give two nodes (heal one link) or none (heal all)")
        if a is not None:
            self._check_pair(a, b, "heal")
        with self._transaction() as state:
            emit(self.dir, "fault", kind="heal", args=[a, b] if a is not None else [])
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
            emit(self.dir, "fault", kind="partition", args=[",".join(g) for g in groups])
            state.cuts = cuts
            self._push(state)

    def node_action(self, node: str, action: str, ready_timeout: float = 60) -> None:
        """stop | kill | pause | unpause | restart one node; a restarted or unpaused node gets its links back."""
        self.swarm.node(node)
        if action not in NODE_ACTIONS:
            raise SpecError(f"node action {action!r}: expected one of {', '.join(NODE_ACTIONS)}")
        self.swarm.backend.node_action(self.swarm.name, node, action)
        emit(self.dir, "node", node=node, state=NODE_STATE_AFTER.get(action, action), action=action)
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
        if self.engine.name != "userspace" or not links:
            return []
        self._armed = links
        try:
            with self._transaction(events=False) as state:
                return self._push(state, sorted({d for _, d in links}))
        finally:
            self._armed = set()

    def _armed_for(self, node: str, ingress: dict[str, Impairment], by_mac: dict[str, str]) -> dict[str, str]:
        """The senders' MACs pre-armed into `node` (prearm) that have no conditions, with their labels."""
        if self.engine.name != "userspace":
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

    def summary(self) -> dict:
        state = self.load()
        notes = [f"{n}: {rec['gso_note']}; loss hits its TCP in bursts of segments"
                 for n, rec in sorted(state.nodes.items()) if rec.get("gso_note")]
        notes += self._engine_notes(state)
        for node, tb in self.tcp_buffers().items():
            notes.append(f"{node}: TCP buffers sized from the bandwidth-delay product: {tb['bytes'] / 2**20:.0f} MiB "
                         f"({', '.join(tb['set']) or 'nothing'} set" +
                         (f"; not settable here: {', '.join(tb['not_set'])}" if tb["not_set"] else "") + ")")
        links = [vars(r) for r in self.rows()]
        for row in links:  # a condition is not in effect where the engine that applies it does not answer
            dead = [n for n in (row["dst"], row["src"]) if n in self._not_answering]
            if dead and not row["cut"]:
                row["effective"] = f"unknown: the engine of {dead[0]} is not answering (fails closed: drops)"
        return {"swarm": self.swarm.name, "engine": self.engine.name, "engine_description": self.engine.describe(),
                "engine_placement": self.placement(),
                "links": links, "cuts": len(state.cuts), "node_faults": state.node_faults,
                "notes": notes, "changed": state.changed}

    def placement(self) -> str | None:
        """Where the userspace engine runs (None with another engine): at the backend's forwarding hop (the netns
        switch, the compose host) or in each node."""
        return self.linkd.placement() if self.engine.name == "userspace" else None

    def _engine_notes(self, state: LinkState) -> list[str]:
        """Nodes whose userspace engine should run but does not answer: their impaired links drop everything."""
        if self.engine.name != "userspace":
            return []
        running = self.swarm.backend.node_states(self.swarm.name)
        notes = list(self.swarm.backend.hop_notes(self.swarm.name))
        self._not_answering = set()
        for node, rec in sorted(state.nodes.items()):
            if not rec.get("linkd_links") or running.get(node) != "running":
                continue
            answer = self.linkd.ping(node)
            if not answer:
                self._not_answering.add(node)
                notes.append(f"{node}: its userspace link engine is not answering: the links into {node} drop every "
                             "packet (fail closed) until it restarts (see its log, .swarm/<name>/logs/hop.linkd.log "
                             f"for the swarm's engine, else {node}.linkd.log)")
                continue
            if answer.get("restarted") == "1":
                notes.append(f"{node}: its userspace link engine died and was restarted with its configuration; "
                             "the packets it held then were dropped (see its log)")
            head, _ = self.linkd.stats(node)
            dropped = int(head.get("kernel_dropped", 0)) + int(head.get("kernel_user_dropped", 0))
            if dropped:
                notes.append(f"{node}: the kernel dropped {dropped} packet(s) on their way to its userspace link engine "
                             f"(held {head.get('held_peak')} at most, {head.get('kernel_held_peak', '?')} of them in "
                             f"the kernel's queue): this kernel's NFQUEUE holds at most {KERNEL_HELD_PACKETS:,} packets "
                             "per queue; the engine keeps IPv4 packets past that itself, not IPv6 ones (nor GSO "
                             "super-packets queued before it turned GSO off), and a burst faster than it reads its "
                             "queue can still overflow it")
        return notes

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

    def apply(self, node, rec: dict, links: DirectedLinks, *, force: bool = False, cut_frames: bool = True):
        """Make one running node match `links` (the effective conditions of the directed links touching it),
        changing only the parts whose plan changed; `rec` is the node's record in the link state, updated in
        place. Returns the engine's plan (None: nothing to visit). The orbit driver calls this per node and
        step, holding the whole swarm's state in memory between saves."""
        by_mac = {n.name: n.isl_mac for n in self.swarm.nodes}
        return self._apply_node(node, rec, links, by_mac, force, cut_frames=cut_frames)

    def change_tc(self, node: str, changes: list[list[str]]) -> None:
        """Apply in-place tc changes (netem.incremental.tc_changes: `tc class/qdisc change` argvs) to a node's tree,
        so a changed delay or rate does not flush the packets queued in the link."""
        if changes and self.shells is not None:
            self.shells.run(node, TC, [" ".join(a[1:]) for a in changes])
        elif changes:
            self._run(node, ["tc", "-batch", "-"], input="\n".join(" ".join(a[1:]) for a in changes) + "\n")

    def _push(self, state: LinkState, nodes: list[str] | None = None, force: bool = False,
              clearing: bool = False) -> list[str]:
        """Make every (or the given) running node's qdiscs and nft table match the state. Nodes whose plan is
        unchanged are not touched unless `force`; nodes not running are marked stale and done when they come
        back; `clearing` also removes the framework's qdisc and table where the state says there are none.
        Raises RuntimeFailure naming the nodes that failed (after trying all)."""
        eff = state.effective()
        states = self.swarm.backend.node_states(self.swarm.name)
        todo = [n for n in self.swarm.nodes if nodes is None or n.name in nodes]
        by_mac = {n.name: n.isl_mac for n in self.swarm.nodes}  # links are selected by link-layer address

        def one(node) -> tuple[str, str]:
            rec = state.nodes.setdefault(node.name, {})
            if states.get(node.name) != "running":
                rec["stale"] = True
                return node.name, ""
            try:
                self._apply_node(node, rec, eff, by_mac, force or rec.get("stale", False), clearing)
                rec.pop("stale", None)
                return node.name, ""
            except (CommandError, RuntimeFailure) as exc:
                rec["stale"] = True
                return node.name, str(exc)

        with ThreadPoolExecutor(max(1, min(self.workers, len(todo)))) as pool:
            results = list(pool.map(one, todo))
        failed = [(n, e) for n, e in results if e]
        if failed:
            raise RuntimeFailure(f"link conditions not applied on {len(failed)} node(s): {failed[0][0]}: {failed[0][1]}")
        return [n for n, _ in results]

    def _apply_node(self, node, rec: dict, eff: DirectedLinks, by_mac: dict[str, str], force: bool,
                    clearing: bool = False, cut_frames: bool = True):
        """Apply one node's plan: only the parts (tc, nft) that changed, see netem.state.parts_to_apply; returns
        the plan (None: nothing to visit). `cut_frames=False` (the orbit driver): with the userspace engine a
        link that is down drops its IP packets in the engine only, without the nftables drop of its other
        frames (a process per change)."""
        egress, ingress, labels = node_links(eff, node.name, by_mac)
        armed = self._armed_for(node.name, ingress, by_mac)
        if not node_needs_visit(rec, bool(egress or ingress or armed), clearing):
            return None
        unknown = clearing and "tc" not in rec  # no record (e.g. state lost in a crash): look, but tolerate no tools
        iface = rec.get("iface") or self.isl_iface(node)
        rec["iface"] = iface
        hold = self.linkd.hold(node, iface, cut_frames) if self.engine.name == "userspace" else LinkdHold(cut_frames=cut_frames)
        ingress, labels, hold = with_passthrough(ingress, labels, hold, armed)
        cmds = self.engine.plan_node(iface, egress, ingress, labels, hold)
        do_tc, do_nft = parts_to_apply(rec, cmds, self.engine.name, force, clearing)
        # whether a tree of ours is in place, where the record knows (None: look)
        ours = None if (force or clearing or "tc" not in rec) else had_parts(rec)[0]
        try:
            if do_tc:
                self._apply_tc(node.name, iface, cmds.tc, ours)
            rec["tc"] = signature(cmds.tc)
            if do_nft:
                self._apply_nft(node.name, cmds.nft)
            rec["nft"] = signature(cmds.nft)
            self._apply_segmentation(node.name, iface, rec, cmds.segment, force)
            self._apply_linkd(node, iface, rec, cmds, force, clearing)
            self._apply_tcp_buffers(node.name, rec, eff, force)
        except CommandError as exc:
            if not (unknown and exc.returncode in (126, 127)):  # the node's image has no tc / nft: nothing of ours
                raise
        return cmds

    def _apply_linkd(self, plan, iface: str, rec: dict, cmds, force: bool, clearing: bool) -> None:
        """The userspace engine's part: configuration first, then the rules that queue packets to it (so no
        packet of a new link meets an engine that does not know it); rules first when a link goes away.
        The engine is started when a node first has a link through it, and restarted if it is gone."""
        node = plan.name
        sig = signature([cmds.linkd, cmds.ipt])
        had = bool(rec.get("linkd_links"))
        if not (cmds.linkd or had or (clearing and self.engine.name == "userspace" and "linkd" not in rec)):
            return
        if rec.get("linkd") == sig and not (force or clearing) and not (cmds.linkd and not self.linkd.ping(node)):
            return  # unchanged, and its engine answers (a dead engine is started again: issue 29 #8)
        if cmds.linkd:
            self.linkd.ensure_running(plan, iface, rec)
            reply = self.linkd.configure(node, cmds.linkd)
            if rec.get("linkd_ipt") != signature(cmds.ipt) or force or clearing:  # a changed delay needs no rule
                self.linkd.set_rules(plan, iface, cmds.ipt)
                rec["linkd_ipt"] = signature(cmds.ipt)
            rec["linkd_gen"] = int(reply.get("gen", 0))
            rec["linkd_set_at_ns"] = int(reply.get("set_at_ns", 0))
        else:
            self.linkd.remove_rules(plan, iface)
            rec.pop("linkd_ipt", None)
            if had and self.linkd.ping(node):
                reply = self.linkd.configure(node, None)
                rec["linkd_gen"] = int(reply.get("gen", 0))
                rec["linkd_set_at_ns"] = int(reply.get("set_at_ns", 0))
        rec["linkd"] = sig
        rec["linkd_links"] = (cmds.linkd or "").count("\n")

    def _apply_tcp_buffers(self, node: str, rec: dict, eff: DirectedLinks, force: bool) -> None:
        """With `links: {tcp_buffers: bdp}`: the node's TCP buffer sysctls sized from its links' bandwidth-delay
        product (netem.engines.tcp_buffer_bytes); what was set (or why not) is kept for `impair --show` and
        the run's host.json. Only grown, never shrunk below what the node had."""
        links = self.swarm.spec.links
        if links is None or links.tcp_buffers != "bdp":
            return
        size = tcp_buffer_bytes(eff, node)
        if not size or (rec.get("tcp_buffers", {}).get("bytes") == size and not force):
            return
        done, failed = [], []
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
        prefix = self.swarm.backend.exec_prefix(self.swarm.name, node, interactive=input is not None)
        return self.swarm.runner.run(prefix + argv, input=input, check=check, timeout=EXEC_TIMEOUT)

    def isl_iface(self, node) -> str:
        """The interface holding the node's ISL address (compose may put it on eth0 or eth1)."""
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

    def _apply_tc(self, node: str, iface: str, cmds: list[list[str]], ours: bool | None = None) -> None:
        """The node's tree rebuilt: ours (root handle 5eed:) deleted, the plan's added. `ours` (with open shells):
        the record says whether a tree of ours is there, so the lines go to the node's long-lived tc without
        looking first; None: look (a process), and refuse to replace a root qdisc swarm-emu did not make."""
        if ours is not None and self.shells is not None:
            lines = ([f"qdisc del dev {iface} root"] if ours else []) + [" ".join(argv[1:]) for argv in cmds]
            if lines:
                self.shells.run(node, TC, lines)
            return
        res = self._run(node, ["tc", "-j", "qdisc", "show", "dev", iface, "root"])
        roots = json.loads(res.stdout or "[]")
        root = roots[0] if roots else {}
        lines = []
        if root.get("handle") == f"{TC_MAJOR}:":
            lines.append(f"qdisc del dev {iface} root")
        elif cmds and root.get("kind") not in DEFAULT_QDISCS | {None}:
            raise RuntimeFailure(f"node {node!r}: {iface} has a root qdisc {root.get('kind')} {root.get('handle')} "
                                 "that swarm-emu did not make; not replacing it")
        lines += [" ".join(argv[1:]) for argv in cmds]
        if lines:
            self._run(node, ["tc", "-batch", "-"], input="\n".join(lines) + "\n")

    def _apply_nft(self, node: str, script: str | None) -> None:
        if script is None and not self.swarm.caps.nftables:
            return
        if self.shells is not None:  # one line: one transaction in `nft -i`, as the script is in `nft -f`
            self.shells.run(node, NFT, [one_line_nft(script or nft_clear_script())])
            return
        self._run(node, ["nft", "-f", "-"], input=script or nft_clear_script())


def with_passthrough(ingress: dict[str, Impairment], labels: dict[str, str], hold: LinkdHold, armed: dict[str, str]
                     ) -> tuple[dict[str, Impairment], dict[str, str], LinkdHold]:
    """A node's ingress, labels and hold with the pre-armed senders (`armed`: MAC -> label) held with no
    conditions (pass-through, see LinkController.prearm); unchanged when none."""
    if not armed:
        return ingress, labels, hold
    return ({**ingress, **{mac: NONE for mac in armed}}, {**labels, **armed},
            dataclasses.replace(hold, passthrough=frozenset(armed)))
