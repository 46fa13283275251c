"""Mesh implementations behind one interface (swarm.mesh.implementations.base.MeshImplementation), in an explicit
registry: the kernel's batman-adv and the userspace batmand.

`mesh.implementation` names an entry or `auto` (the first of PREFERENCE this host runs); the spec's choices are
checked against IMPLEMENTATIONS by a unit test. Nothing outside this package compares an implementation's
name: what differs is asked of the implementation (tests/unit/test_layering.py holds the rule).
"""
from __future__ import annotations

from swarm.caps import BackendTraits, Capabilities
from swarm.errors import SpecError
from swarm.mesh.implementations.base import MeshImplementation, MeshStart
from swarm.mesh.implementations.batman_adv import BatmanAdv
from swarm.mesh.implementations.batmand import Batmand
from swarm.spec.mesh import MeshSpec

IMPLEMENTATIONS: dict[str, MeshImplementation] = {m.name: m for m in (Batmand(), BatmanAdv())}
PREFERENCE = (BatmanAdv.name, Batmand.name)  # the kernel module where it exists, else the daemon


def get_implementation(name: str) -> MeshImplementation:
    """The implementation called `name` (the spec has validated it)."""
    return IMPLEMENTATIONS[name]


def choose_implementation(mesh: MeshSpec, caps: Capabilities, backend: BackendTraits) -> str | None:
    """The name of the implementation this host runs, or None (no mesh); a pinned one this host cannot run, or
    none at all under `auto`, is a SpecError saying why (under `auto`: why the last resort cannot run)."""
    if not mesh.enabled:
        return None
    names = PREFERENCE if mesh.implementation == "auto" else (mesh.implementation,)
    why = ""
    for name in names:
        why = IMPLEMENTATIONS[name].unavailable(caps, backend)
        if not why:
            return name
    raise SpecError(why)


__all__ = ["IMPLEMENTATIONS", "MeshImplementation", "MeshStart", "PREFERENCE", "choose_implementation",
           "get_implementation"]
