"""The kernel engines (pure planners): `netem` (kernel NetEm under an HTB root) and `nft` (the fallback without
sch_netem: nftables drops and HTB rates). See netem.engines for where each acts on a link, netem.tc for the
commands; their driver is netem.engines.drivers.kernel."""
from __future__ import annotations

from netem.engines.base import FEATURE_HELP, Engine, KernelPlan, needs_segmentation
from netem.engines.hold import AT_INGRESS
from netem.engines.userspace import UserspaceEngine
from netem.spec.links import PARAMS, DirectedLinks, Impairment
from netem.tc import netem_args, plan_netem, plan_nft, plan_rate
from swarm.errors import SpecError


class NetemEngine(Engine):
    name = "netem"
    summary = "kernel NetEm leaves under an HTB root, one class per impaired destination"

    def available(self) -> bool:
        return self.caps.sch_netem

    def needs(self) -> dict[str, str]:
        missing = {} if self.caps.sch_netem else {p: "sch_netem" for p in PARAMS}
        if not self.caps.htb:
            missing.setdefault("rate", "sch_htb")
        return missing

    def check(self, links: DirectedLinks, where: str = "links") -> None:
        super().check(links, where)
        check_duplicate_alone(links, where)

    def plan_node(self, iface, egress, ingress, labels=None, hold=AT_INGRESS) -> KernelPlan:
        # netem's `loss 100%` on a down link only sees unicast frames; the receiver's drop also stops broadcasts
        down = ({mac: imp for mac, imp in ingress.items() if imp.effective().down}
                if self.caps.nftables and hold.cut_frames else {})
        return KernelPlan(tc=plan_netem(iface, egress), nft=plan_nft(iface, down, labels),
                            segment=needs_segmentation(egress))


def check_duplicate_alone(links: DirectedLinks, where: str = "links") -> None:
    """A sender whose link duplicates may have no other netem leaf (SpecError otherwise, before anything is applied).

    Linux refuses a duplicating netem in a qdisc tree that holds any other netem ("netem: cannot mix
    duplicating netems with other netems in tree"; a 2025 fix against a duplication loop, in mainline and the
    stable kernels: measured in the kernel lab on Debian's 6.1.0-56, 6.1.192). Every impaired destination of a
    node is a netem leaf under the node's one HTB root, so `duplicate` works only on a sender's only netem link;
    a cut link counts (its leaf is `loss 100%`)."""
    leaves: dict[str, list[tuple[str, Impairment]]] = {}
    for (src, dst), imp in sorted(links.items()):
        if netem_args(imp):
            leaves.setdefault(src, []).append((dst, imp.effective()))
    for src, mine in leaves.items():
        for dst, eff in mine:
            if eff.duplicate is not None and not eff.down and len(mine) > 1:
                others = ", ".join(f"{src}->{d}" for d, _ in mine if d != dst)
                raise SpecError(
                    f"{where}: link {src}->{dst}: duplicate {eff.duplicate:g}%: kernel NetEm cannot duplicate on one "
                    f"link while {src} has netem conditions on others ({others}): Linux refuses a duplicating netem "
                    f"in a qdisc tree with other netems (since 2025, stable kernels included)")


class NftEngine(Engine):
    name = "nft"
    summary = "nftables drops for loss and cuts, HTB classes for rate"
    owns_nft_table = True
    NEEDS_NETEM = ("delay", "jitter", "jitter_distribution", "jitter_correlation", "loss_correlation", "loss_gemodel",
                   "corrupt", "duplicate", "reorder")

    def available(self) -> bool:
        return self.caps.nftables

    def needs(self) -> dict[str, str]:
        missing = {p: "sch_netem" for p in self.NEEDS_NETEM}
        if not self.caps.nftables:
            missing.update({"loss": "nftables", "up": "nftables"})
        if not self.caps.htb:
            missing["rate"] = "sch_htb"
        return missing

    def why_not_others(self, feature: str) -> str:
        """Where sch_netem is missing, say why the userspace engine is not used instead."""
        userspace = sorted(set(UserspaceEngine(self.caps).needs().values())) if feature == "sch_netem" else []
        return (" and the userspace engine needs " + " and ".join(FEATURE_HELP.get(f, f) for f in userspace)
                if userspace else "")

    def plan_node(self, iface, egress, ingress, labels=None, hold=AT_INGRESS) -> KernelPlan:
        return KernelPlan(tc=plan_rate(iface, egress), nft=plan_nft(iface, ingress, labels),
                            segment=needs_segmentation(egress))

