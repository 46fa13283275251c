"""Link conditions and faults of a running swarm: the executor of the impairment engines, the state of the
current conditions, run-time faults and the fault timeline of an experiment.

State lives in <workdir>/.swarm/<name>/links.json (guarded by a lock file, so the CLI and a sweep's
timeline can change conditions of the same swarm): the configured conditions per directed link (the spec's
`links:` plus run-time `impair` changes), the links cut by faults (cut, partition; `heal` removes them and
leaves the configured conditions alone), nodes stopped, killed or paused by faults, and per node the ISL
interface and a fingerprint of what was applied there, so a change only touches nodes whose plan changed.

Everything applied lives inside the nodes (a root qdisc with handle 5eed: on the ISL interface, an nft table
`netdev swarm_emu`): removing a namespace or container removes it; `clear` removes exactly those and nothing
else (a root qdisc with another handle is left alone).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from swarm.runtime.backends import swarm_dir
from swarm.runtime.backends.base import NODE_ACTIONS
from netem.engines import TC_MAJOR, Engine, choose_engine, nft_clear_script
from swarm.errors import CommandError, RuntimeFailure, SpecError
from netem.model import NONE, DirectedLinks, Impairment, LinkOverride, resolve_links

if TYPE_CHECKING:
    from swarm.runtime.swarm import Swarm

LINKS_FILE = "links.json"
DEFAULT_QDISCS = {"noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo", "bfifo", "sfq", "cake"}
EXEC_TIMEOUT = 60


# ---------------------------------------------------------------------------------------------- state
@dataclass
class LinkState:
    """What the framework has set on a swarm's links (see the module docstring)."""

    engine: str = ""
    base: DirectedLinks = field(default_factory=dict)
    cuts: set[tuple[str, str]] = field(default_factory=set)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_faults: dict[str, str] = field(default_factory=dict)
    changed: float = 0.0

    def effective(self) -> DirectedLinks:
        """Configured conditions with cut links down."""
        out = dict(self.base)
        for pair in self.cuts:
            out[pair] = out.get(pair, NONE).merge(Impairment(up=False))
        return {p: imp for p, imp in out.items() if not imp.empty}

    def to_json(self) -> dict:
        return {"engine": self.engine, "changed": self.changed,
                "links": [{"src": s, "dst": d, **imp.values()} for (s, d), imp in sorted(self.base.items())],
                "cuts": sorted([list(p) for p in self.cuts]), "node_faults": self.node_faults, "nodes": self.nodes}

    @classmethod
    def from_json(cls, doc: dict) -> "LinkState":
        base = {(r["src"], r["dst"]): Impairment.model_validate({k: v for k, v in r.items() if k not in ("src", "dst")})
                for r in doc.get("links", [])}
        return cls(engine=doc.get("engine", ""), base=base, cuts={tuple(p) for p in doc.get("cuts", [])},
                   nodes=doc.get("nodes", {}), node_faults=doc.get("node_faults", {}), changed=doc.get("changed", 0.0))


def _sig(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class LinkRow:
    """One directed link in `impair --show`."""

    src: str
    dst: str
    configured: str
    cut: bool
    effective: str


# ----------------------------------------------------------------------------------------- controller
class LinkController:
    """Applies link conditions and faults to one running swarm."""

    def __init__(self, swarm: "Swarm", workers: int = 8):
        self.swarm = swarm
        links = swarm.spec.links
        self.engine: Engine = choose_engine(swarm.caps, links.engine if links else None)
        self.workers = workers
        self.dir = swarm_dir(swarm.workdir, swarm.name)
        self.names = [n.name for n in swarm.nodes]

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
    def _transaction(self) -> Iterator[LinkState]:
        """The state, locked against other writers; saved on exit, also after a failure while applying (which
        marks the nodes concerned stale), but not after a SpecError (raised before anything is applied)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "links.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.load()
            try:
                yield state
            except SpecError:
                raise
            except BaseException:
                self._save(state)
                raise
            self._save(state)

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
            self.engine.check(_with_cuts(new, state.cuts), "impair")
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
            self.engine.check(_with_cuts(state.base, cuts), "cut")
            state.cuts = cuts
            self._push(state)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Heal the link between a and b (both ways), or every cut and partition when no pair is given."""
        if (a is None) != (b is None):
            raise SpecError("heal: give two nodes (heal one link) or none (heal all)")
        if a is not None:
            self._check_pair(a, b, "heal")
        with self._transaction() as state:
            state.cuts = set() if a is None else state.cuts - {(a, b), (b, a)}
            self._push(state)

    def partition(self, groups: list[list[str]]) -> None:
        """Cut every link between nodes of different groups (groups must cover every node exactly once)."""
        check_partition(groups, self.names, "partition")
        where = {n: i for i, g in enumerate(groups) for n in g}
        cuts = {(s, d) for s in self.names for d in self.names if s != d and where[s] != where[d]}
        with self._transaction() as state:
            cuts |= state.cuts
            self.engine.check(_with_cuts(state.base, cuts), "partition")
            state.cuts = cuts
            self._push(state)

    def node_action(self, node: str, action: str, ready_timeout: float = 60) -> None:
        """stop | kill | pause | unpause | restart one node; a restarted or unpaused node gets its links back."""
        self.swarm.node(node)
        if action not in NODE_ACTIONS:
            raise SpecError(f"node action {action!r}: expected one of {', '.join(NODE_ACTIONS)}")
        self.swarm.backend.node_action(self.swarm.name, node, action)
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
            if action == "restart" and self.swarm.spec.mesh.enabled:  # the node's processes were all ended
                self.swarm.mesh.start([node])

    def restore(self) -> None:
        """Back to the spec's conditions: heal everything, drop run-time changes, bring faulted nodes back."""
        state = self.load()
        for node, fault in sorted(state.node_faults.items()):
            self.node_action(node, "unpause" if fault == "pause" else "restart")
        links = self.spec_links()
        with self._transaction() as state:
            state.base, state.cuts = links, set()
            self._push(state)

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
        return {"swarm": self.swarm.name, "engine": self.engine.name, "engine_description": self.engine.describe(),
                "links": [vars(r) for r in self.rows()], "cuts": len(state.cuts), "node_faults": state.node_faults,
                "notes": notes, "changed": state.changed}

    # ------------------------------------------------------------------------------------ applying
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
                    clearing: bool = False) -> None:
        """Apply one node's plan. A part (tc or nft) with nothing planned, nothing applied before and no
        `clearing` runs nothing, so nodes without conditions never need tc or nft in their image."""
        egress = {by_mac[d]: imp for (s, d), imp in eff.items() if s == node.name}
        ingress = {by_mac[s]: imp for (s, d), imp in eff.items() if d == node.name}
        labels = {by_mac[s]: f"{s}->{d}" for (s, d) in eff if d == node.name}
        had_tc = rec.get("tc") not in (None, _sig([]))
        had_nft = rec.get("nft") not in (None, _sig(None))
        unknown = clearing and "tc" not in rec  # no record (e.g. state lost in a crash): look, but tolerate no tools
        if not (egress or ingress or had_tc or had_nft or clearing or "gso_saved" in rec):
            return
        iface = rec.get("iface") or self.isl_iface(node)
        rec["iface"] = iface
        cmds = self.engine.plan_node(iface, egress, ingress, labels)
        tc_sig, nft_sig = _sig(cmds.tc), _sig(cmds.nft)
        try:
            if (cmds.tc or had_tc or unknown) and (force or clearing or rec.get("tc") != tc_sig):
                self._apply_tc(node.name, iface, cmds.tc)
            rec["tc"] = tc_sig
            if (cmds.nft is not None or had_nft or (unknown and self.engine.name == "nft")) and \
                    (force or clearing or rec.get("nft") != nft_sig):
                self._apply_nft(node.name, cmds.nft)
            rec["nft"] = nft_sig
            self._apply_segmentation(node.name, iface, rec, cmds.segment, force)
        except CommandError as exc:
            if not (unknown and exc.returncode in (126, 127)):  # the node's image has no tc / nft: nothing of ours
                raise

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
        from swarm.mesh.plan import BATADV_IF, enslaved_interfaces

        if iface != BATADV_IF:
            return iface
        res = self._run(node, ["ip", "-o", "link", "show", "master", BATADV_IF], check=False)
        under = enslaved_interfaces(res.stdout) if res.ok else []
        return under[0] if under else iface

    def _apply_tc(self, node: str, iface: str, cmds: list[list[str]]) -> None:
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
        self._run(node, ["nft", "-f", "-"], input=script or nft_clear_script())


def _with_cuts(base: DirectedLinks, cuts: set[tuple[str, str]]) -> DirectedLinks:
    out = dict(base)
    for pair in cuts:
        out[pair] = out.get(pair, NONE).merge(Impairment(up=False))
    return out


def check_partition(groups: Any, nodes: list[str], where: str) -> None:
    """Groups must be >= 2 non-empty lists of known nodes, each node in exactly one group."""
    if not isinstance(groups, list) or len(groups) < 2 or not all(isinstance(g, list) and g for g in groups):
        raise SpecError(f"{where}: expected two or more non-empty groups of nodes, e.g. [[sat01, sat02], [sat03]]")
    seen: dict[str, int] = {}
    known = set(nodes)
    for i, group in enumerate(groups):
        for name in group:
            if name not in known:
                raise SpecError(f"{where}: node {name!r}: no such node (nodes: {_span(nodes)})")
            if name in seen:
                raise SpecError(f"{where}: node {name!r} is in groups {seen[name] + 1} and {i + 1} (groups must not overlap)")
            seen[name] = i
    left = [n for n in nodes if n not in seen]
    if left:
        raise SpecError(f"{where}: node(s) {', '.join(left)} in no group (the groups must cover every node)")


def _span(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 4 else f"{nodes[0]}..{nodes[-1]}"


# ------------------------------------------------------------------------------------------- timeline
def _parse_at(v: Any) -> float:
    from swarm.units import parse_duration

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
                raise SpecError(f"{here}.{ev.kind}: node {name!r}: no such node{note} (nodes: {_span(nodes)})")
        if ev.impair is not None:
            ev.impair.impairment()


def apply_event(ctl: LinkController, ev: FaultEvent) -> None:
    """Apply one timeline entry now."""
    if ev.cut is not None:
        ctl.cut(*ev.cut)
    elif ev.heal is not None:
        ctl.heal(*(ev.heal if isinstance(ev.heal, list) else []))
    elif ev.partition is not None:
        ctl.partition(ev.partition)
    elif ev.node is not None:
        ctl.node_action(ev.node, ev.action)
    else:
        ov = ev.impair
        ctl.impair(ov.impairment(), between=ov.between, node=ov.node, direction=ov.direction)


FAULT_COLUMNS = ["run_id", "test_id", "index", "at_s", "planned_ts", "applied_ts", "offset_s", "took_s", "kind",
                 "args", "ok", "error"]


class FaultTimeline:
    """Runs a list of FaultEvents in a thread, each at t0 + at, and records when each really took effect.

    `applied_ts` is the epoch time the change was complete (the call that applied it returned);
    `offset_s` = applied_ts - t0, to be compared with `at_s`."""

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
        self.watcher = None  # a swarm.mesh.MeshWatcher: convergence after each fault, when the swarm has a mesh

    def start(self, t0: float) -> None:
        """Start the timeline relative to epoch `t0` (e.g. the traffic's release instant)."""
        self.t0 = t0
        self._thread = threading.Thread(target=self._run, name="fault-timeline", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for index, ev in self.events:
            planned = self.t0 + ev.at
            if self._stop.wait(max(0.0, planned - time.time())):
                break
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
            if self.watcher and not error:
                from swarm.mesh.plan import healed_pairs

                self.watcher.event(ev.kind, ev.args, done, healed_pairs(cuts_before, self.ctl.load().cuts))

    def _row(self, index, ev, planned, applied, took, ok, error) -> dict:
        return {"run_id": self.run_id, "test_id": self.test_id, "index": index, "at_s": ev.at,
                "planned_ts": round(planned, 6) if planned else "", "applied_ts": round(applied, 6) if applied else "",
                "offset_s": round(applied - self.t0, 6) if applied and self.t0 else "",
                "took_s": round(took, 6) if took is not None else "", "kind": ev.kind, "args": ev.args,
                "ok": ok, "error": error}

    def finish(self, restore: bool = True, timeout: float | None = None) -> list[dict]:
        """Wait for the timeline to end (or stop it), put the swarm back to its spec's conditions; rows by index."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._stop.set()
                self._thread.join()
        done = {r["index"] for r in self.rows}
        reason = "the test's traffic never started" if self.t0 is None else "not reached: the test ended first"
        for index, ev in self.events:
            if index not in done:
                self.rows.append(self._row(index, ev, (self.t0 or 0) + ev.at if self.t0 else None, None, None, False, reason))
        if restore:
            self.ctl.restore()
        return sorted(self.rows, key=lambda r: r["index"])

    def stop(self) -> None:
        self._stop.set()
