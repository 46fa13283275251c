"""Orbit steps on kernel NetEm and nft, planned ahead: what each node of the next step must
change, as the lines its long-lived `tc -force -batch -` and `nft -i` processes (swarm.runtime.shell) take,
worked out while the driver waits for the step (pure), so at the step's instant the driver only writes them.

Measured at 100 nodes (BENCHMARKS.md, "Orbit-driven links"): with the processes long-lived, what was left of
a step's lag was the driver's own planning, ~2-4 ms of Python per node under the GIL for ~16 nodes a step;
planned a step ahead it is off the clock. A node is planned ahead only where nothing but its tc tree and nft
table changes (no segmentation change, no userspace engine, no TCP buffer sizing) and its record is current
(not stale, its tree known); any other node gets the controller's full apply at the step's instant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from netem.engines.base import Engine
from netem.incremental import tc_changes
from netem.spec.links import DirectedLinks
from netem.state import node_links, signature
from netem.tc import nft_clear_script
from swarm.runtime.shell import one_line_nft


@dataclass
class NodeBatch:
    """One node's change of one step: the tc lines (in-place `change`s, or the tree rebuilt) and the nft line
    (its table replaced in one transaction), with what its record says once they are applied."""

    node: str
    tc: list[list[str]]  # the node's tc plan after the step
    tc_sig: str
    nft_sig: str
    tc_lines: list[str] = field(default_factory=list)
    nft_line: Optional[str] = None
    tc_kind: str = ""  # "in_place", "rebuilt" or "" (tree unchanged)


@dataclass
class PreparedStep:
    """A step planned before it is due: its links' latest rows, the nodes it touches, their links after it
    (not yet the driver's: committed when applied) and per node its batch (None: the controller's apply)."""

    t: float
    latest: dict
    nodes: set[str]
    eff: dict[str, DirectedLinks]
    batches: dict[str, Optional[NodeBatch]]


def plan_node_batch(engine: Engine, node: str, rec: dict, links: DirectedLinks, by_mac: dict[str, str],
                    tc_prev: Optional[list[list[str]]], nftables: bool) -> Optional[NodeBatch]:
    """The batch that takes `node` from what its record says is applied (`rec`, `tc_prev`: the tc plan in
    place) to `links`; None when the node needs the controller's full apply (see the module docstring)."""
    iface = rec.get("iface")
    if (not engine.plans_ahead or rec.get("stale") or not iface or tc_prev is None or "nft" not in rec
            or rec.get("tc") != signature(tc_prev) or rec.get("linkd_links") or "tcp_buffers" in rec):
        return None
    egress, ingress, labels = node_links(links, node, by_mac)
    cmds = engine.plan_node(iface, egress, ingress, labels)
    if cmds.segment != ("gso_saved" in rec):
        return None
    out = NodeBatch(node, cmds.tc, signature(cmds.tc), signature(cmds.nft))
    if out.tc_sig != rec["tc"]:
        changes = tc_changes(tc_prev, cmds.tc)
        if changes:
            out.tc_lines, out.tc_kind = [" ".join(a[1:]) for a in changes], "in_place"
        else:
            out.tc_lines = ([f"qdisc del dev {iface} root"] if tc_prev else []) + [" ".join(a[1:]) for a in cmds.tc]
            out.tc_kind = "rebuilt"
    if out.nft_sig != rec["nft"] and (cmds.nft is not None or nftables):
        out.nft_line = one_line_nft(cmds.nft or nft_clear_script())
    return out
