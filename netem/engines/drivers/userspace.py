"""The userspace engine's driver: a node's plan applied as the kernel part (the nft drop of a cut link's frames)
and the configuration and NFQUEUE rules of the swarm-linkd engine serving the node, whose processes (at the
backend's forwarding hop, else in each node) netem.engines.drivers.linkd starts and talks to."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from netem.engines.base import Engine, KernelPlan
from netem.engines.drivers.kernel import KernelDriver
from netem.engines.drivers.linkd import KERNEL_HELD_PACKETS, Linkd
from netem.engines.hold import LinkdHold
from netem.engines.userspace import UserspacePlan
from netem.state import LinkState, signature

if TYPE_CHECKING:
    from swarm.runtime.context import SwarmContext
    from swarm.spec.model import NodePlan


class UserspaceDriver(KernelDriver):
    """The kernel driver's part, then the node's engine: configuration first, then the rules that queue packets
    to it (so no packet of a new link meets an engine that does not know it); rules first when a link goes away."""

    def __init__(self, engine: Engine, swarm: "SwarmContext", linkd: Linkd):
        super().__init__(engine, swarm, linkd)
        self.linkd = linkd

    def hold(self, node: "NodePlan", iface: str, cut_frames: bool = True) -> LinkdHold:
        return self.linkd.hold(node, iface, cut_frames)

    def apply(self, node: "NodePlan", iface: str, rec: dict, plan: KernelPlan, force: bool, clearing: bool) -> None:
        if not isinstance(plan, UserspacePlan):
            raise TypeError(f"the userspace engine's driver applies a UserspacePlan, not {type(plan).__name__}")
        super().apply(node, iface, rec, plan, force, clearing)
        self._apply_linkd(node, iface, rec, plan, force, clearing)

    def placement(self) -> str | None:
        """At the backend's forwarding hop (the netns switch, the compose host) or in each node."""
        return self.linkd.placement()

    def notes(self, state: LinkState) -> list[str]:
        """Nodes whose engine should run but does not answer (their impaired links drop everything), engines that
        were restarted, packets the kernel dropped on their way to an engine; what the backend did at its hop."""
        running = self.swarm.backend.node_states(self.swarm.name)
        notes = list(self.linkd.hop_notes())
        self.not_answering = set()
        held = [node for node, rec in sorted(state.nodes.items())
                if rec.get("linkd_links") and running.get(node) == "running"]

        def ask(node: str) -> tuple[dict | None, dict]:
            answer = self.linkd.ping(node)
            return answer, (self.linkd.stats(node, links=False)[0] if answer else {})

        with ThreadPoolExecutor(max(1, min(8, len(held)))) as pool:  # 1,000 engines' sockets: not one after another
            answers = dict(zip(held, pool.map(ask, held)))
        for node in held:
            answer, head = answers[node]
            if not answer:
                self.not_answering.add(node)
                notes.append(f"{node}: its userspace link engine is not answering: the links into {node} drop every "
                             "packet (fail closed) until it restarts (see its log, .swarm/<name>/logs/hop.linkd.log "
                             f"for the swarm's engine, else {node}.linkd.log)")
                continue
            if answer.get("restarted") == "1":
                notes.append(f"{node}: its userspace link engine died and was restarted with its configuration; "
                             "the packets it held then were dropped (see its log)")
            dropped = int(head.get("kernel_dropped", 0)) + int(head.get("kernel_user_dropped", 0))
            if dropped:
                notes.append(f"{node}: the kernel dropped {dropped} packet(s) on their way to its userspace link engine "
                             f"(held {head.get('held_peak')} at most, {head.get('kernel_held_peak', '?')} of them in "
                             f"the kernel's queue): this kernel's NFQUEUE holds at most {KERNEL_HELD_PACKETS:,} packets "
                             "per queue; the engine keeps IPv4 packets past that itself, not IPv6 ones (nor GSO "
                             "super-packets queued before it turned GSO off), and a burst faster than it reads its "
                             "queue can still overflow it")
        return notes

    def _apply_linkd(self, plan: "NodePlan", iface: str, rec: dict, cmds: UserspacePlan, force: bool,
                     clearing: bool) -> None:
        """The engine is started when a node first has a link through it, and restarted if it is gone."""
        node = plan.name
        sig = signature([cmds.linkd, cmds.ipt])
        had = bool(rec.get("linkd_links"))
        if not (cmds.linkd or had or (clearing and "linkd" not in rec)):
            return
        if rec.get("linkd") == sig and not (force or clearing) and not (cmds.linkd and not self.linkd.ping(node)):
            return  # unchanged, and its engine answers (a dead engine is started again)
        if cmds.linkd:
            self.linkd.ensure_running(plan, iface, rec)
            reply = self.linkd.configure(node, cmds.linkd)
            if rec.get("linkd_ipt") != signature(cmds.ipt) or force or clearing:  # a changed delay needs no rule
                self.linkd.set_rules(plan, iface, cmds.ipt)
                rec["linkd_ipt"] = signature(cmds.ipt)
            rec["linkd_gen"] = int(reply.get("gen", 0))
            rec["linkd_set_at_ns"] = int(reply.get("set_at_ns", 0))
        else:
            self.linkd.remove_rules(plan, iface)
            rec.pop("linkd_ipt", None)
            if had and self.linkd.ping(node):
                reply = self.linkd.configure(node, None)
                rec["linkd_gen"] = int(reply.get("gen", 0))
                rec["linkd_set_at_ns"] = int(reply.get("set_at_ns", 0))
        rec["linkd"] = sig
        rec["linkd_links"] = (cmds.linkd or "").count("\n")
