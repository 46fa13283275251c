"""What a swarm runs besides its nodes (cFS, apps, link conditions, the mesh, DTN agents), as add-ons behind one
small protocol, looked up in a registry like the backends.

`Swarm.up` runs ordered phases: preflight (the backend's checks, then each add-on's `check`) -> images (the
node image, then each add-on's `prepare`, which may extend it) -> nodes (the backend starts them and they
answer) -> add-ons (each one's `start`, in registry order) -> ready. A fault that restarts a node calls every
add-on's `on_node_restart`. Add-ons receive the swarm's SwarmContext, never the `Swarm` facade, use the services
it holds (swarm.runtime.services: one link controller, mesh and DTN agents per swarm) and keep what they measured
(`facts`). Adding one: subclass AddOn, add it to ADDONS at the place its start belongs.
"""
from __future__ import annotations

import json
import time
from typing import ClassVar

from swarm.runtime.cfs_image import ensure_cfs_image, host_ulimits
from swarm.cfs.node import NO_CFS, OPERATIONAL_LINE, CfsRuntime, cfs_nodes, check_cfs
from swarm.runtime.dtn import host_udp_rcvbuf
from swarm.runtime.dtn_image import check_install_tree, ensure_dtn_image, ensure_tree_image
from swarm.errors import NodeFailed
from swarm.mesh.plan import STABLE_S
from swarm.mesh.implementations import choose_implementation
from swarm.runtime.context import SwarmContext
from swarm.runtime.services import dtn_of, links_of, mesh_of
from swarm.spec.apps import check_runnable


class AddOn:
    """One add-on of a swarm: every method may do nothing. One instance per `Swarm`, so it can keep facts."""

    name: ClassVar[str]
    #: Order of `prepare` (images build on each other: the DTN image extends the node image, cFS images extend
    #: that); add-ons with equal rank prepare in registry order.
    prepare_rank: ClassVar[int] = 0

    def enabled(self, ctx: SwarmContext) -> bool:
        """Whether the swarm's spec asks for this add-on."""
        return True

    def check(self, ctx: SwarmContext) -> None:
        """Preflight: SpecError naming the field and value for what cannot run here; creates nothing."""

    def prepare(self, ctx: SwarmContext, image: str) -> str:
        """Before the nodes are created: build or find what the nodes need; returns the node image to use
        ('' on backends without images)."""
        return image

    def start(self, ctx: SwarmContext, timeout: float | None) -> None:
        """After every node answers: start in the nodes, and wait until ready (`timeout`: None for its own
        default). Raising rolls the swarm back."""

    def on_node_restart(self, ctx: SwarmContext, node: str, timeout: float) -> None:
        """A fault restarted `node` (its processes were all ended): start this add-on's part there again."""

    def facts(self) -> dict:
        """What it measured at `start` (for `swarm up`'s output and the run's files)."""
        return {}

    def stop(self, ctx: SwarmContext) -> None:
        """Before the nodes are removed. Everything the add-ons start lives in the nodes and goes with them."""


class CfsAddOn(AddOn):
    """cFS nodes: their install trees checked, their images built, their CFE_ES_Main OPERATIONAL awaited."""

    name = "cfs"
    prepare_rank = 2

    def __init__(self) -> None:
        #: The cFS nodes' images and ulimits (`prepare`), handed to the backend's `up` by Swarm.up.
        self.runtime = NO_CFS

    def enabled(self, ctx: SwarmContext) -> bool:
        return bool(cfs_nodes(ctx.nodes))

    def check(self, ctx: SwarmContext) -> None:
        check_cfs(ctx.spec, list(ctx.nodes), ctx.backend.traits)

    def prepare(self, ctx: SwarmContext, image: str) -> str:
        """Build (or find) the cFS image of each install tree and keep them, with the ulimits this host allows,
        for the backend (`runtime`)."""
        if not ctx.backend.traits.containers:
            return image
        installs = sorted({n.spec.cfs.install for n in cfs_nodes(ctx.nodes) if n.spec.cfs is not None})
        images = {inst: ensure_cfs_image(ctx.runner, ctx.workdir, image, inst, ctx.message) for inst in installs}
        ulimits, lowered = host_ulimits()
        if lowered:
            ctx.message(f"cFS nodes: this host cannot raise resource limits (no CAP_SYS_RESOURCE); "
                        f"lowered {', '.join(lowered)}")
        self.runtime = CfsRuntime(images=images, ulimits=ulimits)
        return image

    def start(self, ctx: SwarmContext, timeout: float | None) -> None:
        """Wait until every cFS node's log shows CFE_ES_Main entering OPERATIONAL state; NodeFailed with the
        log tail when a node's process ends or the time is up."""
        timeout = timeout or 60 + 0.5 * len(ctx.nodes)
        backend, name = ctx.backend, ctx.name
        pending = cfs_nodes(ctx.nodes)
        total = len(pending)
        deadline = time.monotonic() + timeout
        while pending:
            ctx.progress(total - len(pending), total, "cFS nodes OPERATIONAL")
            states = backend.node_states(name)
            for node in list(pending):
                if OPERATIONAL_LINE in backend.logs(name, node.name, tail=100_000):
                    pending.remove(node)
                elif states.get(node.name) != "running":
                    raise NodeFailed(node.name, f"cFS process {states.get(node.name, 'missing')} before OPERATIONAL",
                                     backend.logs(name, node.name))
            if pending and time.monotonic() > deadline:
                raise NodeFailed(pending[0].name, f"cFS not OPERATIONAL after {timeout:.0f} s",
                                 backend.logs(name, pending[0].name))
            if pending:
                time.sleep(0.5)
        if total:
            ctx.progress(total, total, "cFS nodes OPERATIONAL")


class AppsAddOn(AddOn):
    """The DDS apps of the spec (`apps:`): a user's app image must exist and needs a container backend."""

    name = "apps"

    def enabled(self, ctx: SwarmContext) -> bool:
        return bool(ctx.spec.apps)

    def check(self, ctx: SwarmContext) -> None:
        check_runnable(ctx.spec.apps, ctx.backend.traits,
                       lambda image: ctx.runner.run(["docker", "image", "inspect", image], check=False).ok)


class LinksAddOn(AddOn):
    """The spec's link conditions (`links:`), applied by the link controller (netem.runtime.links)."""

    name = "links"

    def enabled(self, ctx: SwarmContext) -> bool:
        return bool(ctx.spec.links)

    def check(self, ctx: SwarmContext) -> None:
        links_of(ctx).spec_links()  # a parameter this host's impairment engine cannot apply: SpecError

    def start(self, ctx: SwarmContext, timeout: float | None) -> None:
        links_of(ctx).apply_spec()


class MeshAddOn(AddOn):
    """The mesh (`mesh:`): started on every node, its convergence awaited and kept (mesh.json)."""

    name = "mesh"

    def __init__(self) -> None:
        self.result: dict | None = None  # convergence after `up`

    def enabled(self, ctx: SwarmContext) -> bool:
        return ctx.spec.mesh.enabled

    def check(self, ctx: SwarmContext) -> None:
        choose_implementation(ctx.spec.mesh, ctx.caps, ctx.backend.traits)  # one this host lacks: SpecError

    def start(self, ctx: SwarmContext, timeout: float | None) -> None:
        """Start the mesh on every node and wait until its routes have converged. Not converging in time is
        reported, not fatal: the swarm is up, its mesh is slow, and that is worth measuring."""
        mesh = mesh_of(ctx)
        started = time.time()
        mesh.start()
        self.result = mesh.wait_converged(started, progress=ctx.progress, stable_s=STABLE_S)
        (ctx.dir / "mesh.json").write_text(json.dumps({"up": self.result}))
        if not self.result["converged"] and self.result["polls"]:
            ctx.message(f"mesh {mesh.implementation}: not converged {mesh.spec.converge_timeout:g} s after start "
                        f"({self.result.get('problem', '')})")

    def on_node_restart(self, ctx: SwarmContext, node: str, timeout: float) -> None:
        if ctx.spec.mesh.enabled:
            mesh_of(ctx).start([node])

    def facts(self) -> dict:
        return {"mesh": self.result} if self.result is not None else {}


class DtnAddOn(AddOn):
    """The DTN agents (every node with a `dtn:` piece): binaries or image prepared, agents started."""

    name = "dtn"
    prepare_rank = 1

    def __init__(self) -> None:
        self.seconds: float | None = None  # how long the agents took to be ready after the nodes

    def enabled(self, ctx: SwarmContext) -> bool:
        return dtn_of(ctx).enabled

    def check(self, ctx: SwarmContext) -> None:
        """Agents that need containers, and the install trees of agents the user builds (programs, libraries,
        one build per swarm): SpecError naming what is missing, before anything is built or started."""
        agents = dtn_of(ctx)
        agents.check_backend()
        trees = agents.user_trees()
        for agent in agents.agents():
            if agent.install.user_tree:
                check_install_tree(agent.install, trees.get(agent.name), agent.title)
        for note in agents.host_notes(host_udp_rcvbuf()):  # what the host should have set (e.g. ION's LTP buffer)
            ctx.message(note)

    def prepare(self, ctx: SwarmContext, image: str) -> str:
        """Containers: the node image plus each agent's programs (layered in turn; an agent the user builds
        from their install tree); namespaces: the programs (built now, or a SpecError naming what is missing)."""
        agents = dtn_of(ctx)
        if ctx.backend.traits.containers:
            if agents.ltp:
                agents.plans()  # cla: ltp: every LTP peer has a rate and a delay (SpecError naming the field)
            built = [a for a in agents.agents() if not a.install.user_tree]
            for i, agent in enumerate(built):  # swarm-ltpcla goes in with the last (it serves dtn7's nodes)
                image = ensure_dtn_image(ctx.runner, ctx.workdir, image, agent.install, agent.title, ctx.message,
                                         ltp=agents.ltp and i == len(built) - 1)
            trees = agents.user_trees()
            for agent in agents.agents():
                if agent.install.user_tree:
                    image = ensure_tree_image(ctx.runner, ctx.workdir, image, agent.install, trees.get(agent.name),
                                              agent.title, ctx.message)
            return image
        agents.check()  # the agents' programs (and swarm-ltpcla, with its peers' rates and delays) or a SpecError
        return image

    def start(self, ctx: SwarmContext, timeout: float | None) -> None:
        self.seconds = dtn_of(ctx).start(timeout or 30 + 0.5 * len(ctx.nodes))

    def on_node_restart(self, ctx: SwarmContext, node: str, timeout: float) -> None:
        """Its agent again (an empty bundle store unless dtn.storage is persistent)."""
        if ctx.node(node).spec.dtn is not None:
            dtn_of(ctx).start(timeout, nodes=[node])

    def facts(self) -> dict:
        return {"dtn_seconds": self.seconds} if self.seconds is not None else {}


#: Every add-on, in the order their `check` and `start` run.
ADDONS: dict[str, type[AddOn]] = {a.name: a for a in (CfsAddOn, AppsAddOn, LinksAddOn, MeshAddOn, DtnAddOn)}
