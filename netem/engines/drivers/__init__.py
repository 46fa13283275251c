"""Link engine drivers: an engine (netem.engines) plans what each node runs; its driver applies the plans to a
running swarm. Every driver has the interface of KernelDriver: `hold` (where the engine takes a node's packets),
`apply` (one node's plan), `placement` (where its processes run), `notes` (what a user should know), `close`.
The link controller (netem.runtime.links) keeps the state, the transactions, the selection and the faults, and
calls the driver; DRIVERS says which driver runs each engine.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from netem.engines import ENGINES, NoEngine, choose_engine
from netem.engines.base import Engine
from netem.engines.drivers.kernel import KernelDriver
from netem.engines.drivers.linkd import Linkd
from netem.engines.drivers.userspace import UserspaceDriver
from netem.engines.kernel import NetemEngine, NftEngine
from netem.engines.userspace import UserspaceEngine
from swarm.caps import Capabilities

if TYPE_CHECKING:
    from swarm.runtime.backends.base import Backend
    from swarm.runtime.context import SwarmContext

DRIVERS: dict[type[Engine], type[KernelDriver]] = {NetemEngine: KernelDriver, NftEngine: KernelDriver,
                                                   UserspaceEngine: UserspaceDriver, NoEngine: KernelDriver}


def driver_for(engine: Engine, swarm: "SwarmContext", linkd: Linkd) -> KernelDriver:
    """The driver that applies `engine`'s plans on `swarm`."""
    return DRIVERS[type(engine)](engine, swarm, linkd)


def engine_for(caps: Capabilities, backend: "Backend", pinned: str | None = None) -> Engine:
    """The impairment engine a swarm on `backend` uses here (netem.engines.choose_engine): on a container backend an
    engine that runs processes of its own (the userspace engine) is a default only where it runs at the backend's
    forwarding hop (compose: on the host beside the swarm's bridge), else only when pinned, inside each node (its
    binary copied in)."""
    hop = backend.hop() if caps.bridge_nf else None
    skip = tuple(n for n, cls in ENGINES.items() if cls.runs_processes) if backend.traits.containers and not hop else ()
    return choose_engine(caps, pinned, skip)
