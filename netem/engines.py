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
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from netem.spec.links import PARAMS, DirectedLinks, Impairment
from netem.tc import ASSUMED_BPS, netem_args, netem_limit, plan_netem, plan_nft, plan_rate, sorted_macs
from swarm.caps import Capabilities
from swarm.errors import SpecError
from swarm.units import format_rate, format_time

# userspace engine (swarm-linkd): where its rules and process live, see LinkdHold and UserspaceEngine
LINKD_CHAIN = "SWARM_EMU_LINKS"  # the framework's own chain in the node's mangle table (PREROUTING jumps to it)
LINKD_QUEUE = 0  # NFQUEUE number (queues are per network namespace: one engine per node)
LINKD_MAX_BYTES = 1 << 30  # data one node's engine may hold (rate x delay); beyond: a SpecError, nothing applied
LINKD_CONTROL = "/run/swarm-linkd.sock"  # the engine's control socket inside the node (its own /run)
LINKD_STATE = "/run/swarm-linkd.conf"  # its last configuration, read again if it restarts


@dataclass(frozen=True)
class LinkdHold:
    """Where a node's userspace engine takes the packets sent to the node: its iptables chain and NFQUEUE number.
    The default holds at the node's own ingress (mangle PREROUTING in the node; queues are per namespace, so 0).
    At a forwarding hop (the netns backend's switch namespace, mangle FORWARD) every node's engine shares one
    namespace, so each gets its own chain and queue there (`at_hop`)."""
    chain: str = LINKD_CHAIN
    queue: int = LINKD_QUEUE
    #: a cut (link down) also drops the link's non-IP frames (ARP, ...) at the node's ingress with nftables, which
    #: costs a process per change; False for plan-driven up/down at orbit rate: the engine drops the IP packets
    cut_frames: bool = True
    #: source MACs held with no conditions (pass-through: the rule and an empty `link <mac>` line exist, the engine
    #: passes their packets unchanged): links a timeline the engine runs will change (experiments.fault_schedule)
    passthrough: frozenset[str] = frozenset()

    @classmethod
    def at_hop(cls, node_index: int, cut_frames: bool = True) -> "LinkdHold":
        return cls(chain=f"{LINKD_CHAIN}_{node_index}", queue=node_index + 1, cut_frames=cut_frames)


@dataclass(frozen=True)
class NodeCommands:
    """What one node runs: tc argv lists that build its tree (empty: no qdisc of ours), an nft script that
    replaces its table (None: no table of ours), and whether its ISL interface must hand packets to the
    stack one segment at a time (`segment`, see `needs_segmentation`); for the userspace engine, the
    configuration of the node's engine process (`linkd`) and its iptables rules (`ipt`)."""

    tc: list[list[str]]
    nft: str | None
    segment: bool = False
    linkd: str | None = None  # userspace engine: its configuration (None: no link of this node's goes through it)
    ipt: str | None = None  # userspace engine: the iptables-restore script of its NFQUEUE rules


def needs_segmentation(egress: dict[str, Impairment]) -> bool:
    """True when a link this node sends on loses, corrupts, duplicates or reorders packets.

    Between namespaces and containers a TCP sender's segmentation offload (GSO/TSO) hands a veth up to 64 KB
    "super-packets" that stay whole all the way to the receiver, so a random drop would take ~40 segments
    at once: "1 % loss" would cost TCP about as much as 0.03 % real loss (measured here: 5.6 Gbit/s instead
    of ~0.1 Gbit/s). The executor then sets the sender's ISL interface to `gso_max_segs 1` (packets of one
    segment, as a NIC puts them on the wire), and restores the previous value when no longer needed.
    """
    for imp in egress.values():
        eff = imp.effective()
        if not eff.down and any(getattr(eff, p) is not None for p in ("loss", "corrupt", "duplicate", "reorder")):
            return True
    return False


# --------------------------------------------------------------------------------------------- engines
FEATURE_HELP = {
    "sch_netem": "NetEm (sch_netem)",
    "nftables": "nftables",
    "sch_htb": "the HTB qdisc (sch_htb)",
}


class Engine:
    """An impairment engine: which parameters it applies on this host, and its per-node plan."""

    name: ClassVar[str]
    summary: ClassVar[str]

    def __init__(self, caps: Capabilities):
        self.caps = caps

    def needs(self) -> dict[str, str]:
        """parameter -> the kernel feature it needs that this host lacks (only unsupported ones)."""
        raise NotImplementedError

    def available(self) -> bool:
        raise NotImplementedError

    def supported(self) -> list[str]:
        return [p for p in PARAMS if p not in self.needs()]

    def check(self, links: DirectedLinks, where: str = "links") -> None:
        """Raise SpecError for the first link with a parameter this engine cannot apply here."""
        missing = self.needs()
        for (src, dst), imp in sorted(links.items()):
            for param, value in imp.effective().values().items():
                if param in missing:
                    shown = _show(param, value)
                    feature = missing[param]
                    can = ", ".join("link up/down" if p == "up" else p for p in self.supported()
                                    if p not in ("jitter_distribution", "loss_correlation"))
                    also = ""
                    if self.name == "nft" and feature == "sch_netem":  # say why the userspace engine is not used
                        userspace = sorted(set(UserspaceEngine(self.caps).needs().values()))
                        if userspace:
                            also = (" and the userspace engine needs "
                                    f"{' and '.join(FEATURE_HELP.get(f, f) for f in userspace)}")
                    raise SpecError(
                        f"{where}: link {src}->{dst}: {param} {shown}: impairment engine '{self.name}' cannot apply it "
                        f"because this kernel lacks {FEATURE_HELP.get(feature, feature)}{also}; possible here: "
                        f"{can or 'nothing'}")

    def plan_node(self, iface: str, egress: dict[str, Impairment], ingress: dict[str, Impairment],
                  labels: dict[str, str] | None = None, hold: LinkdHold = LinkdHold()) -> NodeCommands:
        """One node's commands: `egress` maps each destination's MAC to the conditions of link node->dst,
        `ingress` each source's MAC to those of link src->node; `labels` name the ingress links by source
        MAC (for rule comments); `hold` says where the userspace engine takes the node's packets (only it
        uses it)."""
        raise NotImplementedError

    def describe(self) -> str:
        missing = sorted(set(self.needs().values()))
        lacks = f"; this host lacks {', '.join(missing)}: {', '.join(p for p in self.needs())} unavailable" if missing else ""
        return f"{self.name} ({self.summary}{lacks})"


def _show(param: str, value) -> str:
    if param in ("delay", "jitter"):
        return format_time(value)
    if param == "rate":
        return format_rate(value)
    if param == "up":
        return "down" if value is False else "up"
    if isinstance(value, float):
        return f"{value:g}%"
    return str(value)


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

    def plan_node(self, iface, egress, ingress, labels=None, hold=LinkdHold()) -> NodeCommands:
        # netem's `loss 100%` on a down link only sees unicast frames; the receiver's drop also stops broadcasts
        down = ({mac: imp for mac, imp in ingress.items() if imp.effective().down}
                if self.caps.nftables and hold.cut_frames else {})
        return NodeCommands(tc=plan_netem(iface, egress), nft=plan_nft(iface, down, labels),
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

    def plan_node(self, iface, egress, ingress, labels=None, hold=LinkdHold()) -> NodeCommands:
        return NodeCommands(tc=plan_rate(iface, egress), nft=plan_nft(iface, ingress, labels),
                            segment=needs_segmentation(egress))


# ------------------------------------------------------------------------------------------ TCP buffers
TCP_BUFFER_MIN = 6 * 2**20  # never below Linux's default tcp_rmem maximum (6 MiB)
TCP_BUFFER_MAX = 2**30


def tcp_buffer_bytes(links: DirectedLinks, node: str) -> int:
    """TCP buffer size for `node`: twice the largest bandwidth-delay product of a path it sends or receives
    on (rate of the link, or ASSUMED_BPS without one, x round trip = delay + jitter both ways), at least
    Linux's default 6 MiB; 0 when none of its links has a delay."""
    best = 0
    for (src, dst), imp in links.items():
        if node not in (src, dst):
            continue
        fwd, back = imp.effective(), links.get((dst, src), Impairment()).effective()
        rtt_ms = sum((x.delay or 0) + (x.jitter or 0) for x in (fwd, back))
        if rtt_ms <= 0:
            continue
        best = max(best, (fwd.rate or ASSUMED_BPS) * rtt_ms / 1000 / 8)
    if not best:
        return 0
    return int(min(TCP_BUFFER_MAX, max(TCP_BUFFER_MIN, 2 * best)))


def tcp_buffer_sysctls(size: int) -> dict[str, str]:
    """The sysctls that let TCP autotuning grow to `size` bytes (the net.core maxima bound setsockopt)."""
    return {"net.ipv4.tcp_rmem": f"4096 131072 {size}", "net.ipv4.tcp_wmem": f"4096 16384 {size}",
            "net.core.rmem_max": str(size), "net.core.wmem_max": str(size)}


# ------------------------------------------------------------------------------------ userspace engine
def _us(ms: float) -> str:
    return f"{round(ms * 1000)}us"


@lru_cache(maxsize=65536)  # pure; an orbit step re-plans every link of a node, most of them unchanged
def linkd_line(mac: str, imp: Impairment, label: str = "") -> str:
    """One link of the userspace engine's configuration (swarm-linkd's `link <src MAC> key=value ...`),
    with the same meaning as netem_args: same queue limit, same distributions and loss models."""
    eff = imp.effective()
    comment = f"  # {label}" if label else ""
    if eff.down:
        return f"link {mac.lower()} down{comment}"
    kv = []
    if eff.delay is not None:
        kv.append(f"delay={_us(eff.delay)}")
        if eff.jitter is not None:
            kv.append(f"jitter={_us(eff.jitter)}")
            if eff.jitter_distribution:
                kv.append(f"dist={eff.jitter_distribution}")
            if eff.jitter_correlation is not None:
                kv.append(f"delay_corr={eff.jitter_correlation:g}%")
    if eff.loss is not None:
        kv.append(f"loss={eff.loss:g}%")
        if eff.loss_correlation is not None:
            kv.append(f"loss_corr={eff.loss_correlation:g}%")
    if eff.loss_gemodel is not None:
        kv.append("ge=" + ",".join(f"{x:g}%" for x in eff.loss_gemodel))
    if eff.rate is not None:
        kv.append(f"rate={eff.rate}")
    for key in ("corrupt", "duplicate", "reorder"):
        if getattr(eff, key) is not None:
            kv.append(f"{key}={getattr(eff, key):g}%")
    kv.append(f"limit={netem_limit(eff)}")
    return f"link {mac.lower()} {' '.join(kv)}{comment}"


def plan_linkd(per_src: dict[str, Impairment], labels: dict[str, str] | None = None,
               passthrough: frozenset[str] = frozenset()) -> str | None:
    """The receiving node's engine configuration: one line per impaired source MAC, and a bare `link <mac>`
    (pass-through) for each source in `passthrough` without conditions (None: nothing)."""
    lines = [linkd_line(mac, per_src[mac], (labels or {}).get(mac, "")) if not per_src[mac].empty
             else f"link {mac.lower()}" + (f"  # {labels[mac]}" if labels and labels.get(mac) else "")
             for mac in sorted_macs(per_src) if not per_src[mac].empty or mac in passthrough]
    return "".join(f"{line}\n" for line in lines) or None


def plan_ipt(per_src: dict[str, Impairment], hold: LinkdHold = LinkdHold()) -> str | None:
    """iptables-restore script (table mangle, run with --noflush) that fills the framework's chain with one
    NFQUEUE rule per impaired source MAC; no --queue-bypass, so packets drop while no engine listens (fail
    closed). The chain is declared, which empties it first; the jump to it (from PREROUTING in the node, or from
    FORWARD at the hop for frames leaving through the node's port) is made by the runtime."""
    macs = [mac for mac in sorted_macs(per_src) if not per_src[mac].empty or mac in hold.passthrough]
    rules = "".join(f"-A {hold.chain} -m mac --mac-source {mac.lower()} -j NFQUEUE --queue-num {hold.queue}\n"
                    for mac in macs)
    return f"*mangle\n:{hold.chain} - [0:0]\n{rules}COMMIT\n" if macs else None


def linkd_held_bytes(imp: Impairment) -> int:
    """Bytes one link makes the engine hold: its rate over its delay (+ jitter); 0 without a rate."""
    eff = imp.effective()
    if eff.down or not eff.rate:
        return 0
    return int(eff.rate * ((eff.delay or 0) + (eff.jitter or 0)) / 1000 / 8)


class UserspaceEngine(Engine):
    name = "userspace"
    summary = ("swarm-linkd: every NetEm condition in userspace, on iptables NFQUEUE, selected by the sender's "
               "MAC: one process per swarm at a forwarding hop (the netns switch, the compose host), else in each node")

    def available(self) -> bool:
        return self.caps.nfqueue and bool(self.caps.linkd)

    def needs(self) -> dict[str, str]:
        if not self.caps.nfqueue:
            return {p: "nfqueue" for p in PARAMS}
        if not self.caps.linkd:
            return {p: "swarm-linkd" for p in PARAMS}
        return {}

    def check(self, links: DirectedLinks, where: str = "links") -> None:
        super().check(links, where)
        per_node: dict[str, int] = {}
        for (src, dst), imp in sorted(links.items()):
            held = linkd_held_bytes(imp)
            per_node[dst] = per_node.get(dst, 0) + held
            if held > LINKD_MAX_BYTES or per_node[dst] > LINKD_MAX_BYTES:
                eff = imp.effective()
                raise SpecError(
                    f"{where}: link {src}->{dst}: delay {format_time(eff.delay or 0)} at rate {format_rate(eff.rate)}: "
                    f"{dst}'s userspace engine would hold {per_node[dst] / 1e9:.2f} GB, above its bound of "
                    f"{LINKD_MAX_BYTES / 1e9:.2f} GB; lower the rate or the delay")

    def plan_node(self, iface, egress, ingress, labels=None, hold=LinkdHold()) -> NodeCommands:
        # a cut also drops at the ingress hook when nftables exists (that also stops ARP, which iptables never
        # sees); the engine drops the link's IP packets either way
        down = ({mac: imp for mac, imp in ingress.items() if imp.effective().down}
                if self.caps.nftables and hold.cut_frames else {})
        return NodeCommands(tc=[], nft=plan_nft(iface, down, labels), segment=False,
                            linkd=plan_linkd(ingress, labels, hold.passthrough), ipt=plan_ipt(ingress, hold))


FEATURE_HELP.update({"nfqueue": "the iptables NFQUEUE target (xt_NFQUEUE)",
                     "swarm-linkd": "the swarm-linkd binary (run `make setup`, which builds it with cargo)"})

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
                    f"{where}: link {src}->{dst}: {param} {_show(param, value)}: no impairment engine runs here: "
                    f"this kernel lacks nftables and {FEATURE_HELP['sch_netem']}, and the userspace engine needs "
                    f"{' and '.join(FEATURE_HELP[f] for f in userspace)}; links can only run unimpaired")

    def plan_node(self, iface, egress, ingress, labels=None, hold=LinkdHold()) -> NodeCommands:
        return NodeCommands(tc=[], nft=None)
