"""Impairment engines (pure planners): conditions per directed link -> the tc commands and nft script one
node runs for its ISL interface.

Each directed link a->b is impaired once, so each direction is set on its own and a link's delay is
applied exactly once: queueing (delay, rate, netem's loss) on a's ISL egress, selected by b's MAC address
as the frame's link-layer destination; nftables drops (the fallback engine's loss and every engine's cuts)
on b's ISL ingress, selected by a's MAC as the frame's link-layer source. Links are selected by MAC, not by
IP address, because with a mesh (swarm.mesh) a packet from a to c may be forwarded by b: it crosses the
links a->b and b->c, which only the frame's addresses say (its IP addresses stay a and c), and a cut must
also stop the mesh's broadcast hello packets (batmand's OGMs), which no IP destination selects. Drops are
made at the receiver because a packet dropped by netfilter on the sender's own output path is reported to
the sending socket (EPERM: iperf3 UDP aborts, TCP backs off locally), whereas a link loses packets
silently; it also keeps a link's rate ahead of its loss, as on a real channel.

Engines, in an explicit registry (ENGINES; the probe picks the first available in PREFERENCE):
- `netem` (kernel NetEm, the normal path where `sch_netem` exists): root HTB qdisc `5eed:` whose default
  sends unclassified traffic (broadcasts included) straight out; one HTB class per impaired destination (its
  rate, or unshaped), selected by a u32 filter on the destination MAC, with a netem leaf for delay, jitter,
  loss, corruption, duplication and reordering; a link that is down gets `loss 100%` and, where nftables
  exists, the receiver's ingress drop as well (which also stops broadcasts).
- `nft` (the fallback where `sch_netem` is missing, as on our VMs): an nftables table `netdev swarm_emu` in
  the receiving node drops frames per source MAC (`numgen random` for random loss; every frame for a link
  that is down) in the ISL device's ingress hook, and the sender's HTB classes (no netem leaf) limit the rate.
- `userspace` (where sch_netem is missing but iptables NFQUEUE works, as on our VMs): every NetEm condition in
  swarm-linkd (netem/linkd/, Rust), one process per receiving node; iptables queues the frames of each impaired
  source MAC to it (at a forwarding hop, the netns switch's mangle FORWARD, where the backend has one and
  br_netfilter works; else in the receiving node's mangle PREROUTING, see LinkdHold), and it holds, drops, corrupts, duplicates and releases
  them (rate composed with delay as NetEm's). Its configuration is `linkd_line` per link.
A parameter the active engine cannot apply is a SpecError naming the parameter and the missing kernel
feature, raised before anything is applied; never a silent no-op.

The package: base.py (the Engine interface, its traits, KernelPlan), kernel.py (netem, nft), userspace.py,
hold.py (where the userspace engine takes packets); drivers/ applies each engine's plans to a running swarm.
Outside this package nothing compares an engine's name (tests/unit/test_layering.py).
"""
from __future__ import annotations

from netem.engines.base import FEATURE_HELP, Engine, KernelPlan, show
from netem.engines.hold import AT_INGRESS
from netem.engines.kernel import NetemEngine, NftEngine
from netem.engines.userspace import UserspaceEngine
from netem.spec.links import PARAMS, DirectedLinks
from swarm.caps import Capabilities
from swarm.errors import SpecError

# The registry: kernel NetEm where sch_netem exists, else the userspace engine, else nftables + HTB.
ENGINES: dict[str, type[Engine]] = {NetemEngine.name: NetemEngine, UserspaceEngine.name: UserspaceEngine,
                                    NftEngine.name: NftEngine}
PREFERENCE = ("netem", "userspace", "nft")


def choose_engine(caps: Capabilities, pinned: str | None = None, skip: tuple[str, ...] = ()) -> Engine:
    """The engine to use here: `pinned` if given (a SpecError if this host cannot run it), else the first
    available in PREFERENCE that is not in `skip` (kernel NetEm where sch_netem exists, else the userspace
    engine, else nftables + HTB)."""
    if pinned is not None:
        if pinned not in ENGINES:
            raise SpecError(f"engine {pinned!r}: unknown impairment engine (known: {', '.join(ENGINES)})")
        engine = ENGINES[pinned](caps)
        if not engine.available():
            missing = sorted(set(engine.needs().values())) or ["sch_netem" if pinned == "netem" else "nftables"]
            usable = [n for n in PREFERENCE if ENGINES[n](caps).available()]
            where = "host" if "swarm-linkd" in missing else "kernel"
            raise SpecError(f"engine {pinned!r}: this {where} lacks {', '.join(FEATURE_HELP.get(f, f) for f in missing)}"
                            f" (usable here: {', '.join(usable) or 'none'})")
        return engine
    for name in PREFERENCE:
        engine = ENGINES[name](caps)
        if name not in skip and engine.available():
            return engine
    return NoEngine(caps)  # nothing available: every parameter is a clear error naming what is missing


class NoEngine(Engine):
    """No engine runs here (neither NetEm, nor NFQUEUE + swarm-linkd, nor nftables): every condition is refused
    with what each engine would need."""

    name = "none"
    summary = "no impairment engine runs on this host"

    def available(self) -> bool:
        return False

    def needs(self) -> dict[str, str]:
        return {p: "any" for p in PARAMS}

    def check(self, links: DirectedLinks, where: str = "links") -> None:
        for (src, dst), imp in sorted(links.items()):
            values = imp.effective().values()
            if values:
                param, value = next(iter(values.items()))
                userspace = sorted(set(UserspaceEngine(self.caps).needs().values()))
                raise SpecError(
                    f"{where}: link {src}->{dst}: {param} {show(param, value)}: no impairment engine runs here: "
                    f"this kernel lacks nftables and {FEATURE_HELP['sch_netem']}, and the userspace engine needs "
                    f"{' and '.join(FEATURE_HELP[f] for f in userspace)}; links can only run unimpaired")

    def plan_node(self, iface, egress, ingress, labels=None, hold=AT_INGRESS) -> KernelPlan:
        return KernelPlan(tc=[], nft=None)
