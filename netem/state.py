"""The state of a swarm's links (pure): what the framework has set, and what one node must change.

State lives in <workdir>/.swarm/<name>/links.json (the link controller, netem.runtime.links, reads and
writes it under a lock): the configured conditions per directed link (the spec's `links:` plus run-time
`impair` changes), the links cut by faults (cut, partition; `heal` removes them and leaves the configured
conditions alone), nodes stopped, killed or paused by faults, and per node the ISL interface and a
fingerprint of what was applied there, so a change only touches nodes whose plan changed.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from netem.engines.base import KernelPlan
from netem.spec.links import NONE, DirectedLinks, Impairment
from swarm.errors import SpecError

LINKS_FILE = "links.json"


@dataclass
class LinkState:
    """What the framework has set on a swarm's links (see the module docstring)."""

    engine: str = ""
    # an orbit driver saves a DefaultLinks here (read as a mapping, it is every pair's condition); from_json gives a dict
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
        empty: dict[int, bool] = {}  # per distinct condition object (a default is one on every pair)
        for imp in out.values():
            if id(imp) not in empty:
                empty[id(imp)] = imp.empty
        if not any(empty.values()):
            return out
        return {p: imp for p, imp in out.items() if not empty[id(imp)]}

    def to_json(self) -> dict:
        """The links as rows, or (where one condition is on most pairs of the nodes named, see shared_default)
        as that default, the nodes it spans, the pairs without it (`default_except`) and rows for the rest."""
        doc: dict[str, Any] = {"engine": self.engine, "changed": self.changed}
        if isinstance(self.base, DefaultLinks):  # held as a default already: written as it is, without a pass per pair
            b = self.base
            doc["default"] = {"values": b.default.values(), "nodes": list(b.nodes), "except": sorted(
                [s, d] for s, d in b.rows if s in b.node_set and d in b.node_set)}
            doc["links"] = [{"src": s, "dst": d, **imp.values()} for (s, d), imp in sorted(b.rows.items()) if not imp.empty]
            return {**doc, "cuts": sorted([list(p) for p in self.cuts]), "node_faults": self.node_faults,
                    "nodes": self.nodes}
        default = shared_default(self.base)
        rows = self.base
        if default is not None:
            imp, names = default
            rows = {p: v for p, v in self.base.items() if not _same(v, imp)}
            every = len(names) * (len(names) - 1)
            doc["default"] = {"values": imp.values(), "nodes": names,
                              "except": [] if len(self.base) - len(rows) == every else  # on every pair: none to name
                              sorted([s, d] for s in names for d in names
                                     if s != d and not _same(self.base.get((s, d)), imp))}
        doc["links"] = [{"src": s, "dst": d, **imp.values()} for (s, d), imp in sorted(rows.items())]
        return {**doc, "cuts": sorted([list(p) for p in self.cuts]), "node_faults": self.node_faults,
                "nodes": self.nodes}

    @classmethod
    def from_json(cls, doc: dict) -> "LinkState":
        base: DirectedLinks = {}
        if doc.get("default"):
            imp = Impairment.model_validate(doc["default"]["values"])
            names = doc["default"]["nodes"]
            skip = {(s, d) for s, d in doc["default"]["except"]}
            base = {(s, d): imp for s in names for d in names if s != d and (s, d) not in skip}
        parsed: dict[tuple, Impairment] = {}  # one model per distinct row (an orbit's `down` on most pairs)
        for r in doc.get("links", []):
            values = tuple(sorted((k, v) for k, v in r.items() if k not in ("src", "dst")))
            if values not in parsed:
                parsed[values] = Impairment.model_validate(dict(values))
            base[(r["src"], r["dst"])] = parsed[values]
        return cls(engine=doc.get("engine", ""), base=base, cuts={tuple(p) for p in doc.get("cuts", [])},
                   nodes=doc.get("nodes", {}), node_faults=doc.get("node_faults", {}), changed=doc.get("changed", 0.0))


class DefaultLinks(Mapping):
    """Directed links as one condition (`default`) on every pair of `nodes` and `rows` where a pair differs (a row
    without a condition: the pair has none) (pure). What an orbit plan gives a constellation: `down` on the
    ~N(N-1) pairs it never brings up and a row per pair it does, held in memory and written to links.json
    (LinkState.to_json) without a dict entry or a pass per pair; read as a mapping it is every pair's condition."""

    def __init__(self, default: Impairment, nodes: list[str], rows: DirectedLinks):
        self.default, self.nodes, self.rows = default, list(nodes), rows
        self.node_set = frozenset(self.nodes)
        inside = sum(1 for s, d in rows if s in self.node_set and d in self.node_set and s != d)
        self._len = len(self.nodes) * (len(self.nodes) - 1) - inside + sum(1 for imp in rows.values() if not imp.empty)

    def __getitem__(self, pair: tuple[str, str]) -> Impairment:
        imp = self.rows.get(pair)
        if imp is not None:
            if imp.empty:
                raise KeyError(pair)
            return imp
        s, d = pair
        if s != d and s in self.node_set and d in self.node_set:
            return self.default
        raise KeyError(pair)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        yield from (p for p, imp in self.rows.items() if not imp.empty)
        yield from ((s, d) for s in self.nodes for d in self.nodes if s != d and (s, d) not in self.rows)

    def __len__(self) -> int:
        return self._len


def _same(a: Impairment | None, b: Impairment) -> bool:
    return a is b or a == b


#: pairs one condition must be on before links.json keeps it as a default rather than a row per pair
DEFAULT_MIN_PAIRS = 1024


def shared_default(base: DirectedLinks) -> tuple[Impairment, list[str]] | None:
    """(the condition on most pairs, the nodes of those pairs) when it is on at least DEFAULT_MIN_PAIRS pairs and
    on more than half of all pairs of those nodes (pure): then links.json holds it once and names the pairs
    without it, so a 1,000-node swarm's default delay is one entry, not 999,000 rows."""
    if len(base) < DEFAULT_MIN_PAIRS:
        return None
    counts: dict[int, int] = {}
    by_id: dict[int, Impairment] = {}
    for imp in base.values():  # by identity first: a spec's default is one object on every pair
        counts[id(imp)] = counts.get(id(imp), 0) + 1
        by_id[id(imp)] = imp
    merged: dict[Impairment, int] = {}
    for key, n in counts.items():
        merged[by_id[key]] = merged.get(by_id[key], 0) + n
    imp, shared = max(merged.items(), key=lambda kv: kv[1])
    names = sorted({n for pair in base for n in pair})
    if shared < DEFAULT_MIN_PAIRS or 2 * shared <= len(names) * (len(names) - 1):
        return None
    return imp, names


def signature(value: Any) -> str:
    """A short fingerprint of a plan, kept per node so an unchanged plan is not applied again."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class LinkRow:
    """One directed link in `impair --show`."""

    src: str
    dst: str
    configured: str
    cut: bool
    effective: str


def with_cuts(base: DirectedLinks, cuts: set[tuple[str, str]]) -> DirectedLinks:
    """`base` with every cut link down."""
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
                raise SpecError(f"{where}: node {name!r}: no such node (nodes: {span(nodes)})")
            if name in seen:
                raise SpecError(f"{where}: node {name!r} is in groups {seen[name] + 1} and {i + 1} (groups must not overlap)")
            seen[name] = i
    left = [n for n in nodes if n not in seen]
    if left:
        raise SpecError(f"{where}: node(s) {', '.join(left)} in no group (the groups must cover every node)")


def span(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 4 else f"{nodes[0]}..{nodes[-1]}"


def by_node(eff: DirectedLinks) -> dict[str, DirectedLinks]:
    """The directed links touching each node (pure), in one pass: each node's share is then found without
    scanning every pair of the swarm again (N nodes x N(N-1) pairs at 1,000 nodes is 10^9 lookups)."""
    out: dict[str, DirectedLinks] = {}
    for pair, imp in eff.items():
        out.setdefault(pair[0], {})[pair] = imp
        out.setdefault(pair[1], {})[pair] = imp
    return out


def node_links(eff: DirectedLinks, node: str, by_mac: dict[str, str]) -> tuple[dict, dict, dict]:
    """One node's share of the effective conditions, keyed by the peer's MAC (links are selected by
    link-layer address): what it sends (egress), what it receives (ingress), and a label per ingress peer."""
    egress = {by_mac[d]: imp for (s, d), imp in eff.items() if s == node}
    ingress = {by_mac[s]: imp for (s, d), imp in eff.items() if d == node}
    labels = {by_mac[s]: f"{s}->{d}" for (s, d) in eff if d == node}
    return egress, ingress, labels


def had_parts(rec: dict) -> tuple[bool, bool]:
    """Whether a node's record says a tc plan / an nft script of ours is applied there."""
    return rec.get("tc") not in (None, signature([])), rec.get("nft") not in (None, signature(None))


def node_needs_visit(rec: dict, has_conditions: bool, clearing: bool) -> bool:
    """A node with no conditions, nothing of ours applied before and no `clearing` is not touched, so nodes
    without conditions never need tc or nft in their image."""
    had_tc, had_nft = had_parts(rec)
    return has_conditions or had_tc or had_nft or clearing or "gso_saved" in rec or bool(rec.get("linkd_links"))


def parts_to_apply(rec: dict, cmds: KernelPlan, owns_nft_table: bool, force: bool, clearing: bool) -> tuple[bool, bool]:
    """(apply tc?, apply nft?) for one node: a part runs when it has something planned, had something
    before, or its state is unknown while clearing (no record: state lost in a crash; nft only for an engine that
    `owns_nft_table`) -- and only when its plan changed, unless `force` or `clearing`."""
    had_tc, had_nft = had_parts(rec)
    unknown = clearing and "tc" not in rec
    rerun = force or clearing
    do_tc = bool(cmds.tc or had_tc or unknown) and (rerun or rec.get("tc") != signature(cmds.tc))
    do_nft = (cmds.nft is not None or had_nft or (unknown and owns_nft_table)) and \
        (rerun or rec.get("nft") != signature(cmds.nft))
    return do_tc, do_nft
