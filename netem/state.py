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
from dataclasses import dataclass, field
from typing import Any

from netem.engines import NodeCommands
from netem.spec.links import NONE, DirectedLinks, Impairment
from swarm.errors import SpecError

LINKS_FILE = "links.json"


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


def parts_to_apply(rec: dict, cmds: NodeCommands, engine: str, force: bool, clearing: bool) -> tuple[bool, bool]:
    """(apply tc?, apply nft?) for one node: a part runs when it has something planned, had something
    before, or its state is unknown while clearing (no record: state lost in a crash) -- and only when its
    plan changed, unless `force` or `clearing`."""
    had_tc, had_nft = had_parts(rec)
    unknown = clearing and "tc" not in rec
    rerun = force or clearing
    do_tc = bool(cmds.tc or had_tc or unknown) and (rerun or rec.get("tc") != signature(cmds.tc))
    do_nft = (cmds.nft is not None or had_nft or (unknown and engine == "nft")) and \
        (rerun or rec.get("nft") != signature(cmds.nft))
    return do_tc, do_nft
