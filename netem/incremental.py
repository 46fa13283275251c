"""In-place changes of a node's tc tree (pure): when a link's rate or delay moves but the node's tree keeps
its shape, `tc class change` / `tc qdisc change` the classes and netem leaves that differ instead of deleting
the root and building it again.

Why: rebuilding drops every packet queued in the tree (a netem leaf holds a whole delay's worth of traffic)
and costs two commands (the root check and the batch); orbit-driven links change rate and delay every few
seconds. The engines' planners (netem.tc.plan_htb) give a destination the same class id and leaf
handle as long as the set of impaired destinations is unchanged (ids follow MAC order), so two plans of the
same shape differ only in the parameters of their `add` lines.
"""
from __future__ import annotations

from typing import Optional

Argv = list[str]


def _identity(argv: Argv) -> Optional[tuple]:
    """What names a tc object in a plan line: (object, dev, parent/classid/handle ...) up to its kind."""
    if len(argv) < 4 or argv[0] != "tc" or argv[2] != "add":
        return None
    obj = argv[1]
    if obj == "class":  # tc class add dev D parent P classid C htb <params>
        return (obj, *argv[3:argv.index("htb") + 1]) if "htb" in argv else None
    if obj == "qdisc":  # tc qdisc add dev D (root | parent P) handle H <kind> <params>
        for kind in ("netem", "htb"):
            if kind in argv:
                return (obj, *argv[3:argv.index(kind) + 1])
        return None
    if obj == "filter":
        return (obj, *argv[3:])  # a filter changes only by being another filter
    return None


def tc_changes(old: list[Argv], new: list[Argv]) -> Optional[list[Argv]]:
    """The `change` commands that turn the applied tree `old` into `new`, or None when the shapes differ
    (other objects, order, a filter or root changed, a leaf added or removed): then rebuild. [] when equal."""
    if len(old) != len(new):
        return None
    out: list[Argv] = []
    for o, n in zip(old, new):
        if o == n:
            continue
        io, in_ = _identity(o), _identity(n)
        if io is None or io != in_ or o[1] == "filter":
            return None
        if o[1] == "qdisc" and "root" in o:
            return None  # the root's own options (default class) changed: rebuild
        out.append(n[:2] + ["change"] + n[3:])
    return out
