"""The userspace engine (pure planner): every NetEm condition in swarm-linkd (netem/linkd/, Rust), which holds
the packets iptables NFQUEUE hands it; its configuration is `linkd_line` per link, its rules `plan_ipt`. Its
driver (netem.engines.drivers.userspace) runs its processes, at the backend's forwarding hop where there is one."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from netem.engines.base import Engine, KernelPlan
from netem.engines.hold import AT_INGRESS, LINKD_MAX_BYTES, LinkdHold
from netem.spec.links import PARAMS, DirectedLinks, Impairment
from netem.tc import netem_limit, plan_nft, sorted_macs
from swarm.errors import SpecError
from swarm.units import format_rate, format_time


@dataclass(frozen=True)
class UserspacePlan(KernelPlan):
    """The userspace engine's plan for one node: the kernel part (no tc tree; the nft drop of a cut link's
    frames) and the configuration of the node's engine process (`linkd`, None: no link of the node's goes
    through it) with its iptables rules (`ipt`, the iptables-restore script of its NFQUEUE rules)."""

    linkd: str | None = None
    ipt: str | None = None


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


#: senders sharing one condition from which a node's engine holds it once, as its default (`link *`, one
#: catch-all rule): below it a node keeps a line and a rule per sender, as small swarms always had
DEFAULT_MIN_SENDERS = 16


@dataclass(frozen=True)
class IngressSplit:
    """A node's ingress held as the engine's default plus exceptions (pure, see split_ingress): `default` the
    condition most senders share (None: no default, a line and a rule per sender), `exceptions` the senders with
    a line of their own (another condition, or pass-through), `exempt` the senders with no condition, which a
    rule returns before the catch-all queues the rest."""

    default: Impairment | None
    exceptions: dict[str, Impairment]
    exempt: list[str]


def split_ingress(per_src: dict[str, Impairment], hold: LinkdHold = AT_INGRESS) -> IngressSplit:
    """Defaults and exceptions (pure): where the swarm's other nodes are known (`hold.senders`) and at least
    DEFAULT_MIN_SENDERS of them share one condition, that condition is the default when it saves lines and rules
    (its senders outnumber those with no condition); a 1,000-node swarm with one delay on every link then costs
    one line and one rule per node, not 999. With `hold.others` (every unlisted sender's condition) that is the
    default and every listed sender another line, a bare one without a condition (it passes through the engine,
    which a timeline then changes at its instant): no sender is exempt."""
    if hold.others is not None:
        return _split_with_others(per_src, hold.others)
    impaired = {mac: imp for mac, imp in per_src.items() if not imp.empty}
    if hold.senders and len(impaired) >= DEFAULT_MIN_SENDERS:
        default, shared = _most_shared(impaired)
        free = [m for m in hold.senders if m not in impaired and m not in hold.passthrough]
        if shared >= DEFAULT_MIN_SENDERS and shared > len(free):
            exceptions = {m: imp for m, imp in per_src.items()
                          if imp is not default and imp != default and (not imp.empty or m in hold.passthrough)}
            return IngressSplit(default, exceptions, sorted(free, key=str.lower))
    return IngressSplit(None, {m: imp for m, imp in per_src.items() if not imp.empty or m in hold.passthrough}, [])


def _split_with_others(per_src: dict[str, Impairment], others: Impairment) -> IngressSplit:
    """split_ingress with every unlisted sender's condition given: that is the default, the listed others lines."""
    if others.empty:
        return IngressSplit(None, per_src, [])
    return IngressSplit(others, {m: imp for m, imp in per_src.items() if imp is not others and imp != others}, [])


def _most_shared(impaired: dict[str, Impairment]) -> tuple[Impairment, int]:
    """The condition most senders have, and how many (by identity first: a default is one object; then by value)."""
    by_id: dict[int, list] = {}
    for imp in impaired.values():
        entry = by_id.setdefault(id(imp), [imp, 0])
        entry[1] += 1
    counts: dict[Impairment, int] = {}
    for imp, n in by_id.values():
        counts[imp] = counts.get(imp, 0) + n
    return max(counts.items(), key=lambda kv: kv[1])


def plan_linkd(per_src: dict[str, Impairment], labels: dict[str, str] | None = None,
               passthrough: frozenset[str] = frozenset(), hold: LinkdHold | None = None) -> str | None:
    """The receiving node's engine configuration: one line per impaired source MAC, and a bare `link <mac>`
    (pass-through) for each source in `passthrough` without conditions (None: nothing); with a default
    (split_ingress) its `link *` line first and lines only for the exceptions."""
    hold = hold or LinkdHold(passthrough=passthrough)
    split = split_ingress(per_src, hold)
    others = len(hold.senders) - len(per_src) if hold.others is not None else 0  # unlisted: the default's too
    head = [linkd_line("*", split.default, f"default: {len(per_src) - len(split.exceptions) + others} senders")] \
        if split.default is not None else []
    lines = head + [linkd_line(mac, split.exceptions[mac], (labels or {}).get(mac, "")) if not split.exceptions[mac].empty
                    else f"link {mac.lower()}" + (f"  # {labels[mac]}" if labels and labels.get(mac) else "")
                    for mac in sorted_macs(split.exceptions)]
    return "".join(f"{line}\n" for line in lines) or None


def plan_ipt(per_src: dict[str, Impairment], hold: LinkdHold = AT_INGRESS) -> str | None:
    """iptables-restore script (table mangle, run with --noflush) that fills the framework's chain with one
    NFQUEUE rule per impaired source MAC (with a default, split_ingress: a RETURN per sender with no condition,
    then one NFQUEUE rule for every other frame); no --queue-bypass, so packets drop while no engine listens
    (fail closed). The chain is declared, which empties it first; the jump to it (from PREROUTING in the node, or
    from FORWARD at the hop for frames leaving through the node's port) is made by the runtime."""
    split = split_ingress(per_src, hold)
    queue = f"-j NFQUEUE --queue-num {hold.queue}\n"
    if split.default is not None:
        rules = "".join(f"-A {hold.chain} -m mac --mac-source {mac.lower()} -j RETURN\n" for mac in split.exempt)
        rules += f"-A {hold.chain} {queue}"
    else:
        rules = "".join(f"-A {hold.chain} -m mac --mac-source {mac.lower()} {queue}"
                        for mac in sorted_macs(split.exceptions))
    return f"*mangle\n:{hold.chain} - [0:0]\n{rules}COMMIT\n" if rules else None


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

    runs_processes = True
    schedules = True
    plans_ahead = False
    holds_others = True

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
        if not any(linkd_held_bytes(imp) for imp in {id(imp): imp for imp in links.values()}.values()):
            return  # nothing held for a rate: no bound to reach
        per_node: dict[str, int] = {}
        for (src, dst), imp in sorted(links.items()):
            held = linkd_held_bytes(imp)
            per_node[dst] = per_node.get(dst, 0) + held
            if held > LINKD_MAX_BYTES or per_node[dst] > LINKD_MAX_BYTES:
                eff = imp.effective()
                raise SpecError(
                    f"{where}: link {src}->{dst}: delay {format_time(eff.delay or 0)} at rate {format_rate(eff.rate or 0)}: "
                    f"{dst}'s userspace engine would hold {per_node[dst] / 1e9:.2f} GB, above its bound of "
                    f"{LINKD_MAX_BYTES / 1e9:.2f} GB; lower the rate or the delay")

    def plan_node(self, iface, egress, ingress, labels=None, hold=AT_INGRESS) -> UserspacePlan:
        # a cut also drops at the ingress hook when nftables exists (that also stops ARP, which iptables never
        # sees); the engine drops the link's IP packets either way
        down = ({mac: imp for mac, imp in ingress.items() if imp.effective().down}
                if self.caps.nftables and hold.cut_frames and hold.others is None else {})
        return UserspacePlan(tc=[], nft=plan_nft(iface, down, labels), segment=False,
                             linkd=plan_linkd(ingress, labels, hold.passthrough, hold), ipt=plan_ipt(ingress, hold))
