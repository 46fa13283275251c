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
    compose_note: str = ""  # why the Compose CLI runs as it does or not at all (PYTHONPATH shadowing v1's package)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BackendTraits:
    """What a runtime backend is, as data (BACKEND_TRAITS): each backend class takes its own from there
    (swarm.runtime.backends), and the spec, planners, services and experiments ask these questions instead of
    comparing the backend's name."""

    name: str  # for messages only
    containers: bool  # nodes are containers of an image (built at `up`); else namespaces sharing the host's files
    multi_host: bool = False  # nodes are spread over several Docker hosts
    runs_cfs: bool = False  # can run cFS nodes (their image, ulimits and IPC namespace per node)
    isl_multicast: bool = False  # multicast crosses the ISL network (Linux bridges: yes; Docker's internal: no)


#: Every runtime backend by name, as data. The spec's `backend:` choices and its checks come from here (the spec
#: sits below the runtime and cannot import its classes); swarm.runtime.backends.REGISTRY maps the same names
#: to the classes, each of which takes its traits from this table. Adding a backend: a row here, a class there.
BACKEND_TRAITS: dict[str, BackendTraits] = {t.name: t for t in (
    BackendTraits("swarm", containers=True, multi_host=True),
    BackendTraits("compose", containers=True, runs_cfs=True),
    BackendTraits("netns", containers=False, isl_multicast=True),
)}
#: The backend a spec with `hosts:` and no `backend:` runs on.
MULTI_HOST_BACKEND = next(name for name, traits in BACKEND_TRAITS.items() if traits.multi_host)
