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


@dataclass(frozen=True)
class BackendTraits:
    """What a runtime backend is, as data: each backend class declares its own (swarm.runtime.backends), and the
    planners, services and experiments ask these questions instead of comparing the backend's name."""

    name: str  # for messages only
    containers: bool  # nodes are containers of an image (built at `up`); else namespaces sharing the host's files
    multi_host: bool = False  # nodes are spread over several Docker hosts
    runs_cfs: bool = False  # can run cFS nodes (their image, ulimits and IPC namespace per node)
    isl_multicast: bool = False  # multicast crosses the ISL network (Linux bridges: yes; Docker's internal: no)
