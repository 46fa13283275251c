"""The netns backend's planned commands (pure) and the backend registry."""

import pytest

from swarm.runtime.backends import REGISTRY, default_backend_name, get_backend
from swarm.runtime.backends.netns.backend import host_link, plan_node, plan_switch
from swarm.errors import SpecError
from swarm.caps import Capabilities
from swarm.runtime.runner import RecordingRunner
from swarm.spec.model import BACKENDS, plan_nodes, spec_from_dict

from conftest import golden

CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True)


def test_golden_netns_plan():
    spec = spec_from_dict({"name": "demo", "nodes": 2})
    plan = plan_switch(spec) + [cmd for n in plan_nodes(spec) for cmd in plan_node(spec, n)]
    text = "\n".join(" ".join(cmd) for cmd in plan) + "\n"
    assert text == golden("netns_demo2.txt", text)


def test_host_link_name_fits_kernel_limit():
    assert len(host_link("a" * 32)) <= 15


def test_registry_matches_spec_literal_and_unknown_name_is_an_error(tmp_path):
    assert tuple(sorted(REGISTRY)) == tuple(sorted(BACKENDS))
    with pytest.raises(SpecError, match="backend 'k8s': unknown backend"):
        get_backend("k8s", RecordingRunner(), CAPS, tmp_path)


def test_default_backend_follows_docker():
    assert default_backend_name(CAPS) == "netns"
    from dataclasses import replace
    assert default_backend_name(replace(CAPS, docker=True, compose=["docker-compose"])) == "compose"


def test_compose_backend_refuses_without_docker(tmp_path):
    backend = get_backend("compose", RecordingRunner(), CAPS, tmp_path)
    with pytest.raises(SpecError, match="Docker is not running"):
        backend.check_available()


def test_compose_down_removes_only_labelled_ids(tmp_path):
    from dataclasses import replace
    from swarm.runtime.runner import Result

    removed: set[str] = set()  # a fake daemon: what was removed is no longer listed

    def listing(ids):
        return lambda a: Result(a, 0, "".join(f"{i}\n" for i in ids if i not in removed))

    def remove(a):
        removed.update(x for x in a if x in ("c1", "c2", "n1"))
        return Result(a, 0)

    runner = RecordingRunner(answers=[
        (lambda a: a[:2] == ["docker", "ps"], listing(["c1", "c2"])),
        (lambda a: a[:3] == ["docker", "network", "ls"], listing(["n1"])),
        (lambda a: a[:2] == ["docker", "rm"] or a[:3] == ["docker", "network", "rm"], remove),
    ])
    backend = get_backend("compose", runner, replace(CAPS, docker=True, compose=["docker-compose"]), tmp_path)
    assert backend.down("demo") == ["2 container(s)", "1 network(s)"]
    lists = [c for c in runner.calls if "ls" in c or "ps" in c]
    assert all("label=io.swarm-emu.swarm=demo" in c for c in lists)
    assert ["docker", "rm", "-f", "-v", "c1", "c2"] in runner.calls
    assert ["docker", "network", "rm", "n1"] in runner.calls


def test_up_refuses_a_subnet_a_host_interface_uses(tmp_path):
    import json as _json
    from swarm.runtime.swarm import Swarm
    from swarm.runtime.runner import Result

    addrs = [{"ifname": "br-1234", "addr_info": [{"family": "inet", "local": "10.78.0.1", "prefixlen": 16, "scope": "global"}]}]
    runner = RecordingRunner(answers=[(lambda a: a[:2] == ["ip", "-j"], lambda a: Result(a, 0, _json.dumps(addrs)))])
    swarm = Swarm(spec_from_dict({"name": "x", "nodes": 2}), backend="netns", runner=runner, caps=CAPS, workdir=tmp_path)
    with pytest.raises(SpecError, match=r"networks.ground.subnet '10.78.0.0/16': overlaps 10.78.0.0/16 on host interface br-1234"):
        swarm.up()
    assert not any(c[:3] == ["ip", "netns", "add"] for c in runner.calls)
    assert not (tmp_path / ".swarm").exists()
