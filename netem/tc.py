"""The kernel's side of the link engines (pure): tc argv lists (an HTB root, a class and u32 filter per
destination MAC, netem leaves) and the nftables script that drops per source MAC at a node's ingress.

netem/engines/ says which engine uses which of these (kernel NetEm: `plan_netem` + the cut's `plan_nft`;
nft: `plan_rate` + `plan_nft`); netem/incremental.py relies on `plan_htb` giving a destination the same class
id and leaf handle from one plan to the next.
"""
from __future__ import annotations

import math

from netem.spec.links import Impairment

TC_MAJOR = "5eed"  # handle of the framework's root qdisc: teardown removes a root qdisc only with this handle
NFT_FAMILY, NFT_TABLE = "netdev", "swarm_emu"
NFT_PRIORITY = -500  # ingress hook priority: before anything else that may run there
UNSHAPED = "100gbit"  # HTB class rate for a destination that has conditions but no rate of its own
LOSS_SCALE = 1_000_000  # nft random loss resolution: 1e-4 %
ASSUMED_BPS = 10**9  # rate assumed for sizing a netem queue when the link has no rate of its own


# ------------------------------------------------------------------------------------------ formatting
def tc_time(ms: float) -> str:
    return f"{int(ms)}ms" if float(ms).is_integer() else f"{round(ms * 1000)}us"


def tc_rate(bps: int) -> str:
    for mult, unit in ((10**9, "gbit"), (10**6, "mbit"), (10**3, "kbit")):
        if bps % mult == 0:
            return f"{bps // mult}{unit}"
    return f"{bps}bit"


def tc_pct(pct: float) -> str:
    return f"{pct:g}%"


def sorted_macs(per_dst: dict[str, Impairment]) -> list[str]:
    """Link-layer addresses in order (the framework's MACs end in the IPv4 address: address order)."""
    return sorted(per_dst, key=lambda mac: mac.lower())


def _quantum(bps: int | None) -> str:
    rate_bytes = (bps or 12_500_000_000 * 8) // 8
    return str(max(1514, min(200_000, rate_bytes // 10)))


def netem_limit(imp: Impairment) -> int:
    """Queue length (packets) a netem leaf needs to hold one delay's worth of traffic at the link's rate."""
    delay_s = ((imp.delay or 0) + (imp.jitter or 0)) / 1000
    in_flight = (imp.rate or ASSUMED_BPS) * delay_s / (8 * 1500)
    return int(min(1_000_000, max(1000, math.ceil(1.5 * in_flight))))


def netem_args(imp: Impairment) -> list[str]:
    """The netem options for one link's effective conditions (empty: nothing for netem to do)."""
    eff = imp.effective()
    if eff.down:
        return ["loss", "100%"]
    args: list[str] = []
    if eff.delay is not None:
        args += ["delay", tc_time(eff.delay)]
        if eff.jitter is not None:
            args.append(tc_time(eff.jitter))
            if eff.jitter_correlation is not None:
                args.append(tc_pct(eff.jitter_correlation))
            if eff.jitter_distribution:
                args += ["distribution", eff.jitter_distribution]
    if eff.loss is not None:
        args += ["loss", "random", tc_pct(eff.loss)]
        if eff.loss_correlation is not None:
            args.append(tc_pct(eff.loss_correlation))
    if eff.loss_gemodel is not None:
        args += ["loss", "gemodel", *(tc_pct(x) for x in eff.loss_gemodel)]
    if eff.corrupt is not None:
        args += ["corrupt", tc_pct(eff.corrupt)]
    if eff.duplicate is not None:
        args += ["duplicate", tc_pct(eff.duplicate)]
    if eff.reorder is not None:
        args += ["reorder", tc_pct(eff.reorder)]
    return ["limit", str(netem_limit(eff))] + args if args else []


def plan_htb(iface: str, per_dst: dict[str, Impairment], leaf: bool) -> list[list[str]]:
    """Root HTB + one class and u32 filter per destination MAC in `per_dst` (+ a netem leaf when `leaf`).

    u32 `match ether dst` (offset -14 from the network header, where the frame's header sits on egress) is
    used because the flower classifier is missing from some kernels (ours)."""
    if not per_dst:
        return []
    dev = ["dev", iface]
    cmds = [["tc", "qdisc", "add", *dev, "root", "handle", f"{TC_MAJOR}:", "htb", "default", "0"]]
    for i, ip in enumerate(sorted_macs(per_dst), start=1):
        eff = per_dst[ip].effective()
        classid = f"{TC_MAJOR}:{i:x}"
        rate = tc_rate(eff.rate) if eff.rate and not eff.down else UNSHAPED
        cmds.append(["tc", "class", "add", *dev, "parent", f"{TC_MAJOR}:", "classid", classid, "htb", "rate", rate,
                     "ceil", rate, "quantum", _quantum(eff.rate if not eff.down else None)])
        if leaf and (args := netem_args(eff)):
            cmds.append(["tc", "qdisc", "add", *dev, "parent", classid, "handle", f"{i:x}:", "netem", *args])
        cmds.append(["tc", "filter", "add", *dev, "parent", f"{TC_MAJOR}:", "protocol", "all", "prio", "1", "u32",
                     "match", "ether", "dst", ip, "flowid", classid])
    return cmds


def plan_netem(iface: str, per_dst: dict[str, Impairment]) -> list[list[str]]:
    """Kernel NetEm: classful HTB root, a class + u32 filter per impaired destination, netem leaves."""
    return plan_htb(iface, {ip: imp for ip, imp in per_dst.items() if not imp.empty}, leaf=True)


def plan_rate(iface: str, per_dst: dict[str, Impairment]) -> list[list[str]]:
    """HTB rate limits only (the nft engine's shaping): a class + filter per destination with a rate."""
    shaped = {ip: imp for ip, imp in per_dst.items() if imp.effective().rate and not imp.down}
    return plan_htb(iface, shaped, leaf=False)


def plan_nft(iface: str, per_src: dict[str, Impairment], labels: dict[str, str] | None = None) -> str | None:
    """nftables table `netdev swarm_emu` of a receiving node, dropping frames that arrive on its ISL interface
    per source MAC (the link's sender): all of them (link down) or a random share (loss). The script replaces
    the table atomically (one transaction). `labels` name each source's link for the rule comments. None:
    nothing to drop."""
    rules = []
    for mac in sorted_macs(per_src):
        eff = per_src[mac].effective()
        label = (labels or {}).get(mac, mac)
        match = f"ether saddr {mac}"
        if eff.down:
            rules.append(f'{match} counter drop comment "{label} down"')
        elif eff.loss is not None:
            threshold = round(eff.loss / 100 * LOSS_SCALE)
            if threshold >= LOSS_SCALE:
                rules.append(f'{match} counter drop comment "{label} loss 100%"')
            elif threshold > 0:
                rules.append(f"{match} numgen random mod {LOSS_SCALE} < {threshold} counter drop "
                             f'comment "{label} loss {eff.loss:g}%"')
    if not rules:
        return None
    body = "".join(f"\t\t{r}\n" for r in rules)
    return (f"table {NFT_FAMILY} {NFT_TABLE}\n"
            f"delete table {NFT_FAMILY} {NFT_TABLE}\n"
            f"table {NFT_FAMILY} {NFT_TABLE} {{\n"
            f"\tchain links_in {{\n"
            f"\t\ttype filter hook ingress device \"{iface}\" priority {NFT_PRIORITY}; policy accept;\n"
            f"{body}"
            f"\t}}\n"
            f"}}\n")


def nft_clear_script() -> str:
    """Removes the framework's table if it exists (and only it)."""
    return f"table {NFT_FAMILY} {NFT_TABLE}\ndelete table {NFT_FAMILY} {NFT_TABLE}\n"
