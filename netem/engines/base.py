"""The engine interface (pure): which parameters an engine applies on this host, and its plan for one node.

An engine is a planner, registered in netem.engines.ENGINES; its driver (netem.engines.drivers) executes the
plans on a running swarm. What differs between engines is said by the class attributes below, never by
comparing an engine's name outside this package.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from netem.engines.hold import AT_INGRESS, LinkdHold
from netem.spec.links import PARAMS, DirectedLinks, Impairment
from netem.tc import ASSUMED_BPS
from swarm.caps import Capabilities
from swarm.errors import SpecError
from swarm.units import format_rate, format_time


@dataclass(frozen=True)
class KernelPlan:
    """What the kernel engines (netem, nft) have one node run: tc argv lists that build its tree (empty: no qdisc
    of ours), an nft script that replaces its table (None: no table of ours), and whether its ISL interface must
    hand packets to the stack one segment at a time (`segment`, see `needs_segmentation`)."""

    tc: list[list[str]]
    nft: str | None
    segment: bool = False


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


FEATURE_HELP = {
    "sch_netem": "NetEm (sch_netem)",
    "nftables": "nftables",
    "sch_htb": "the HTB qdisc (sch_htb)",
    "nfqueue": "the iptables NFQUEUE target (xt_NFQUEUE)",
    "swarm-linkd": "the swarm-linkd binary (run `make setup`, which builds it with cargo)",
}


class Engine:
    """An impairment engine: which parameters it applies on this host, and its per-node plan."""

    name: ClassVar[str]
    summary: ClassVar[str]
    # What differs between engines, asked by the runtime instead of comparing names:
    #: its loss and cuts live in an nft table of its own (a node whose record is lost may hold one: clear it)
    owns_nft_table: ClassVar[bool] = False
    #: runs processes of its own (on a container backend a default only at the backend's forwarding hop)
    runs_processes: ClassVar[bool] = False
    #: takes a timeline of link changes ahead of time and applies each at its instant (fault schedules, orbit
    #: plans), holding links it will change as pass-through (prearm); and counts each link's packets
    schedules: ClassVar[bool] = False
    #: an orbit step's change can be planned ahead as lines for the long-lived tc and nft processes
    plans_ahead: ClassVar[bool] = True
    #: its plan_node takes `hold.others`, one condition for every sender the plan does not list (an orbit plan's
    #: never-up pairs as one default); other engines are given every pair
    holds_others: ClassVar[bool] = False

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
        distinct = {id(imp): imp for imp in links.values()}  # a default is one object on N(N-1) pairs
        bad = {key for key, imp in distinct.items() if any(p in missing for p in imp.effective().values())}
        if not bad:
            return
        for (src, dst), imp in sorted((pair, imp) for pair, imp in links.items() if id(imp) in bad):
            for param, value in imp.effective().values().items():
                if param in missing:
                    shown = show(param, value)
                    feature = missing[param]
                    can = ", ".join("link up/down" if p == "up" else p for p in self.supported()
                                    if p not in ("jitter_distribution", "loss_correlation"))
                    also = self.why_not_others(feature)
                    raise SpecError(
                        f"{where}: link {src}->{dst}: {param} {shown}: impairment engine '{self.name}' cannot apply it "
                        f"because this kernel lacks {FEATURE_HELP.get(feature, feature)}{also}; possible here: "
                        f"{can or 'nothing'}")

    def why_not_others(self, feature: str) -> str:
        """What the error for a parameter needing `feature` adds about the other engines ("" here)."""
        return ""

    def plan_node(self, iface: str, egress: dict[str, Impairment], ingress: dict[str, Impairment],
                  labels: dict[str, str] | None = None, hold: LinkdHold = AT_INGRESS) -> KernelPlan:
        """One node's commands: `egress` maps each destination's MAC to the conditions of link node->dst,
        `ingress` each source's MAC to those of link src->node; `labels` name the ingress links by source
        MAC (for rule comments); `hold` says where the userspace engine takes the node's packets (only it
        uses it)."""
        raise NotImplementedError

    def describe(self) -> str:
        missing = sorted(set(self.needs().values()))
        lacks = f"; this host lacks {', '.join(missing)}: {', '.join(p for p in self.needs())} unavailable" if missing else ""
        return f"{self.name} ({self.summary}{lacks})"


def show(param: str, value) -> str:
    if param in ("delay", "jitter"):
        return format_time(value)
    if param == "rate":
        return format_rate(value)
    if param == "up":
        return "down" if value is False else "up"
    if isinstance(value, float):
        return f"{value:g}%"
    return str(value)


# TCP buffers sized from the links' bandwidth-delay product (links: {tcp_buffers: bdp}), for every engine
TCP_BUFFER_MIN = 6 * 2**20  # never below Linux's default tcp_rmem maximum (6 MiB)
TCP_BUFFER_MAX = 2**30


def tcp_buffer_bytes(links: DirectedLinks, node: str) -> int:
    """TCP buffer size for `node`: twice the largest bandwidth-delay product of a path it sends or receives
    on (rate of the link, or ASSUMED_BPS without one, x round trip = delay + jitter both ways), at least
    Linux's default 6 MiB; 0 when none of its links has a delay."""
    best = 0.0
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

