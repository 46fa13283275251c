"""A running swarm's services, each built once per context and kept there: the link controller, the mesh, the
DTN agents.

`Swarm.up` checks the spec's links, applies them and starts the mesh; faults, `impair` and the mesh's
convergence read the same link state afterwards. Building each service once means the spec's links are
resolved and checked once (999,000 directed links at 1,000 nodes: seconds), the engine's driver keeps its open
shells and processes, and the mesh and the faults share one controller. A new context (another spec, another
runner) builds new services.
"""
from __future__ import annotations

from netem.runtime.links import LinkController
from swarm.runtime.context import SwarmContext
from swarm.runtime.dtn import DtnAgents
from swarm.runtime.mesh import Mesh


def links_of(ctx: SwarmContext) -> LinkController:
    """The swarm's link controller: conditions, faults, node actions (a restart calls ctx.on_node_restart)."""
    return ctx.service("links", lambda: LinkController(ctx, on_node_restart=ctx.on_node_restart))


def mesh_of(ctx: SwarmContext) -> Mesh:
    """The swarm's mesh, reading link state through the swarm's link controller. SpecError if this host cannot
    run the implementation the spec pins (nothing is kept then)."""
    return ctx.service("mesh", lambda: Mesh(ctx, links_of(ctx)))


def dtn_of(ctx: SwarmContext) -> DtnAgents:
    """The swarm's DTN agents (its programs' folders found or built once)."""
    return ctx.service("dtn", lambda: DtnAgents(ctx))
