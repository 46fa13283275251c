"""`swarm probe`'s verdict for a person, from the probe's facts (swarm.cli.verdict.probe_verdict, pure).

The facts are this VM's as `swarm probe --json` printed them (2026-11-26: no sch_netem, no batman-adv, Docker
20.10 with docker-compose v1, the Rust parts built), then varied: a host without Docker, without root, with
kernel NetEm, with nothing built.
"""
from __future__ import annotations

import copy

from swarm.cli.verdict import probe_verdict

NO_DELAY = ["corrupt", "delay", "duplicate", "jitter", "jitter_correlation", "jitter_distribution",
            "loss_correlation", "loss_gemodel", "reorder"]
VM = {
    "kernel": "6.18.44-fc-v669", "root": True, "docker": True, "docker_version": "20.10.24+dfsg1",
    "compose": ["docker-compose"], "compose_version": "1.29.2", "netns": True, "sch_netem": False,
    "batman_adv": False, "nftables": True, "tbf": True, "iperf3_version": "iperf 3.12 (cJSON 1.7.15)",
    "batmand": True, "ddsperf": True, "htb": True, "nfqueue": True, "bridge_nf": True,
    "linkd": "/root/.cache/swarm-emu/linkd-target/release/swarm-linkd", "mesh_batman": "batmand",
    "impairment_engine": "userspace",
    "link_engines": {
        "netem": {"available": False, "lacks": ["sch_netem"], "unsupported": NO_DELAY, "delay": False},
        "userspace": {"available": True, "lacks": [], "unsupported": [], "delay": True},
        "nft": {"available": True, "lacks": ["sch_netem"], "unsupported": NO_DELAY, "delay": False},
    },
    "dtn_agents": {"dtn7": "/root/.cache/swarm-emu/dtn7/dtn7-0.21.0-65dc3f1ca147/bin"},
    "ltpcla": "/root/.cache/swarm-emu/ltpcla-target/release/swarm-ltpcla",
}


def _vary(**changes) -> dict:
    facts = copy.deepcopy(VM)
    facts.update(changes)
    return facts


def test_this_vm():
    assert probe_verdict(VM) == [
        "backends      netns yes; compose yes (docker-compose 1.29.2); swarm (several hosts) yes (list the hosts in the spec)",
        "link engines  netem no (lacks sch_netem); userspace yes (every condition, the default); nft yes (no delay)",
        "mesh          batmand (batman-adv kernel module: no)",
        "DTN agents    dtn7 built; cla: ltp built",
        "traffic       iperf3 yes; ddsperf yes",
        "every fact, for scripts: swarm probe --json",
    ]


def test_no_docker_daemon():
    lines = probe_verdict(_vary(docker=False, compose=[], compose_version=""))
    assert lines[0] == ("backends      netns yes; compose no (no Docker daemon answers); "
                        "swarm (several hosts) no (no Docker daemon answers)")


def test_docker_without_compose():
    assert "compose no (no docker compose / docker-compose)" in probe_verdict(_vary(compose=[], compose_version=""))[0]


def test_not_root_says_what_it_costs():
    lines = probe_verdict(_vary(root=False))
    assert lines[0].startswith("backends      netns no (needs root); compose yes")
    assert "not root: netns swarms, host link engines and kernel features need root" in lines


def test_kernel_netem_is_the_default_where_it_exists():
    engines = copy.deepcopy(VM["link_engines"])
    engines["netem"] = {"available": True, "lacks": [], "unsupported": [], "delay": True}
    lines = probe_verdict(_vary(link_engines=engines, impairment_engine="netem", sch_netem=True))
    assert lines[1] == ("link engines  netem yes (every condition, the default); userspace yes (every condition); "
                        "nft yes (no delay)")


def test_an_engine_missing_one_parameter_names_it():
    engines = copy.deepcopy(VM["link_engines"])
    engines["userspace"] = {"available": True, "lacks": ["x"], "unsupported": ["corrupt"], "delay": True}
    assert "userspace yes (no corrupt, the default)" in probe_verdict(_vary(link_engines=engines))[1]


def test_nothing_built_and_no_tools():
    lines = probe_verdict(_vary(dtn_agents={"dtn7": ""}, ltpcla="", iperf3_version="", ddsperf=False,
                                mesh_batman=None, batman_adv=False))
    assert lines[2] == "mesh          none (batman-adv kernel module: no)"
    assert lines[3] == ("DTN agents    dtn7 not built (built at the first DTN up, or make setup); "
                        "cla: ltp not built (make ltpcla)")
    assert lines[4] == "traffic       iperf3 no (not installed); ddsperf no (not installed)"
