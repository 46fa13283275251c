"""What a host can do, as data: filled in by the capability probe (swarm.runtime.probe), read by the planners
(link engine and mesh implementation choice) without their depending on the runtime."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Capabilities:
    """What the probe found on this host."""

    kernel: str
    root: bool
    docker: bool
    docker_version: str
    compose: list[str]  # argv prefix: ["docker", "compose"] or ["docker-compose"]; [] when none
    compose_version: str
    netns: bool
    sch_netem: bool
    batman_adv: bool
    nftables: bool
    tbf: bool
    iperf3_version: str
    batmand: bool
    ddsperf: bool
    htb: bool = False  # HTB qdisc: per-link rate limits of the impairment engines
    nfqueue: bool = False  # iptables NFQUEUE target: the userspace link engine's hook
    bridge_nf: bool = False  # iptables sees bridged frames (br_netfilter, -m physdev): the engine can hold at a hop
    linkd: str = ""  # path of the userspace link engine's binary (swarm-linkd, built by `make setup`); "" = none

    def as_dict(self) -> dict:
        return asdict(self)
