"""The compose backend's forwarding hop: the host, beside the swarm's ISL bridge (hostengine.py says how the
swarm's userspace link engine lives there: its chains, NFQUEUE range, processes and their cleanup). The bridge
port towards a node is the container's host-side veth; every frame between two containers crosses it."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import swarm.runtime.backends.compose.hostengine as he
from flightsw import protocol as proto
from swarm.errors import RuntimeFailure
from swarm.runtime.backends.base import ForwardingHop
from swarm.runtime.host import BRIDGE_NF, claim_settings, read_sysctl
from swarm.runtime.runner import Runner

PLACEMENT = "on the host at the swarm's ISL bridge (compose; one engine per swarm)"


class HostSide(Protocol):
    """What the hop uses of its compose backend (ComposeBackend): its runner, state folders, bridge ports."""

    runner: Runner
    _hold: dict[str, int]  # swarm -> its NFQUEUE base on the host

    def isl_ports(self, swarm: str) -> dict[int, str]: ...

    def state_dir(self, swarm: str) -> Path: ...

    def _drop_empty_mangle(self) -> None: ...


class ComposeHop(ForwardingHop):
    """The host as the forwarding hop of the compose backend's swarms (see ComposeBackend.hop for where)."""

    placement = PLACEMENT

    def __init__(self, backend: HostSide):
        self.backend = backend

    def port(self, swarm: str, node_index: int, iface: str) -> tuple[list[str], str] | None:
        """The host (no argv prefix) and the node's port on the swarm's ISL bridge; None for a node that is not
        running (no port)."""
        port = self.backend.isl_ports(swarm).get(node_index)
        return ([], port) if port else None

    def hold(self, swarm: str, node_index: int, nodes: int) -> tuple[str, int]:
        """The node's chain and NFQUEUE number on the host: the swarm's tagged chain, and its base (allocated once
        per swarm under the host-wide lock, recorded in the swarm's state) + the node's index."""
        b = self.backend
        base = b._hold.get(swarm)
        record = b.state_dir(swarm) / he.STATE_FILE
        if base is None:
            try:
                got = he.read_record(b.state_dir(swarm))
                base = int(got["queue_base"]) if int(got.get("queues", 0)) > nodes else None
            except (ValueError, KeyError, TypeError):
                base = None
        if base is None:
            save = b.runner.run(["iptables-save"], check=False, timeout=30).stdout
            with he.queue_registry() as reg:
                base = he.allocate_for(reg, swarm, nodes + 1, save, str(record))  # indexes 0..nodes
                he.update_record(b.state_dir(swarm), queue_base=base, queues=nodes + 1, tag=he.swarm_tag(swarm))
        b._hold[swarm] = base
        return he.chain_name(swarm, node_index), base + node_index

    def comment(self, swarm: str) -> str | None:
        return he.rule_comment(swarm)

    def prepare(self, swarm: str) -> None:
        """Bridged IPv4 must go through the host's iptables (net.bridge.bridge-nf-call-iptables=1, which Docker
        sets for its bridges). Where it is off it is turned on, recorded in the host-wide ledger for this swarm
        (swarm.runtime.host: `down` of the last swarm needing it turns it back off, and says so) and in the
        swarm's state (the probe, `status` and `impair --show` say so): a global setting is never changed
        silently, nor left changed."""
        before = read_sysctl(BRIDGE_NF)
        done = claim_settings(self.backend.runner, swarm, {BRIDGE_NF: 1})
        if done.get(BRIDGE_NF, 0) < 0:
            raise RuntimeFailure(f"{BRIDGE_NF}=1: could not be set on the host (the host engine needs it)")
        if done:
            he.update_record(self.backend.state_dir(swarm),
                             note=f"set {BRIDGE_NF}=1 on the host (it was {before}) so the host engine sees the "
                                  "bridge's frames; `down` sets it back")

    def release(self, swarm: str) -> None:
        """A link's host chain was removed while the swarm runs (e.g. `impair --clear`): if it was the last rule
        anyone had in mangle, drop the table, or `down` (which then finds no chain of ours) would leave it."""
        self.backend._drop_empty_mangle()

    def notes(self, swarm: str) -> list[str]:
        note = he.read_record(self.backend.state_dir(swarm)).get("note")
        return [note] if note else []

    def start_daemon(self, swarm: str, argv: list[str], name: str) -> bool:
        """One process on the host for the whole swarm (the link engine), in a session of its own so it outlives
        the CLI; recorded in the swarm's state as it starts (and found by its `--swarm` label after a crash)."""
        b = self.backend
        log = b.state_dir(swarm) / "logs" / f"hop.{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = proto.labelled(list(argv), proto.label(swarm, name))  # ps: swarm-emu:<swarm>/linkd, as every process
        he.update_record(b.state_dir(swarm), starting=argv[:8])
        proc = b.runner.start(argv, stdout_path=str(log))
        he.update_record(b.state_dir(swarm), pids=[proc.pid], started=time.time())
        return True

    def stop_daemon(self, swarm: str, name: str) -> None:
        """End the swarm's host engine (every labelled process of it)."""
        he.kill_engines(swarm)
