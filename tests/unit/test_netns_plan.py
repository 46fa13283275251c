"""The netns backend's planned commands (pure) and the backend registry."""

import pytest

from swarm.runtime.backends import REGISTRY, default_backend_name, get_backend
from swarm.runtime.backends.netns.backend import host_link, marker, node_ns, plan_up, switch_ns, write_sysctls
from swarm.errors import CommandError, SpecError
from swarm.caps import Capabilities
from swarm.runtime.runner import RecordingRunner
from swarm.spec.model import SwarmSpec, plan_nodes, spec_from_dict

from conftest import golden

CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True)


def render(plan) -> str:
    """The plan as the processes `up` runs, each with its batch script."""
    parts = [f"# recorded before anything is made: {' '.join(plan.namespaces)}",
             "# ip -batch -", *plan.host, f"# ip -n {plan.switch_ns} -batch -", *plan.switch,
             f"# bridge -n {plan.switch_ns} -batch -", *plan.fdb,
             "# sysctls in every node namespace: " + " ".join(f"{k}={v}" for k, v in plan.sysctls.items())]
    for ns, lines in plan.nodes.items():
        parts += [f"# ip -n {ns} -batch -", *lines]
    return "\n".join(parts) + "\n"


def test_golden_netns_plan():
    spec = spec_from_dict({"name": "demo", "nodes": 2})
    text = render(plan_up(spec, plan_nodes(spec)))
    assert text == golden("netns_demo2.txt", text)


def test_up_plan_records_every_namespace_it_makes_and_makes_nothing_in_the_host_but_its_marked_link():
    spec = spec_from_dict({"name": "big", "nodes": 100, "networks": {"isl": {"subnet": "10.150.0.0/16", "mtu": 1400},
                                                                     "ground": {"subnet": "10.151.0.0/16"}}})
    nodes = plan_nodes(spec)
    plan = plan_up(spec, nodes)
    made = [line.split()[2] for line in plan.host if line.startswith("netns add ")]
    assert made == plan.namespaces == [switch_ns("big"), *(node_ns("big", n.name) for n in nodes)]
    assert plan.namespaces[0] == plan.switch_ns and list(plan.nodes) == plan.namespaces[1:]
    links = [line.split() for line in plan.host if line.startswith("link add ")]
    in_host = [words[2] for words in links if words[3] != "netns"]
    assert in_host == [host_link("big")]  # every other link (bridges, both ends of each veth) is made in its namespace
    assert plan.host[plan.host.index(" ".join(links[2])) + 1] == f"link set {host_link('big')} alias {marker('big')}"
    veths = [w for w in links if "veth" in w and w[2] in ("eth0", "eth1")]
    assert len(veths) == 200 and all(w[4] in plan.nodes and w[w.index("peer") + 4] == plan.switch_ns for w in veths)
    assert all(w[w.index("mtu") + 1] == ("1400" if w[2] == "eth1" else "1500") for w in veths)
    # each node port: enslaved, no learning, up; a static entry for its node's MAC
    ports = {w[w.index("peer") + 2] for w in veths}
    for port in ports:
        assert {f"link set {port} master {'ground' if port[0] == 'g' else 'isl'}",
                f"link set {port} type bridge_slave learning off", f"link set {port} up"} <= set(plan.switch)
    assert len(plan.fdb) == 200 and {line.split()[4] for line in plan.fdb} == ports
    assert {line.split()[2] for line in plan.fdb} == {m for n in nodes for m in (n.isl_mac, n.ground_mac)}
    assert plan.switch[0] == f"link set lo alias {marker('big')}"


def test_up_plan_node_batch_sets_marker_addresses_and_default_route():
    spec = spec_from_dict({"name": "demo", "nodes": 3, "networks": {"isl": {"subnet": "10.152.0.0/24"},
                                                                   "ground": {"subnet": "10.153.0.0/24"}}})
    nodes = plan_nodes(spec)
    plan = plan_up(spec, nodes)
    lines = plan.nodes[node_ns("demo", nodes[2].name)]
    assert lines[0] == f"link set lo alias {marker('demo')}"
    assert f"addr add {nodes[2].isl_ip}/24 brd + dev eth1" in lines
    assert f"addr add {nodes[2].ground_ip}/24 brd + dev eth0" in lines
    assert lines[-1] == "route add default via 10.153.0.1" and "link set eth0 up" in lines and "link set eth1 up" in lines
    assert plan.sysctls["net.ipv4.ip_forward"] == "1" and plan.sysctls["net.ipv6.conf.all.disable_ipv6"] == "1"


def test_sysctls_into_a_missing_namespace_fail_naming_it():
    with pytest.raises(CommandError) as err:
        write_sysctls(["swarm-emu_no-such-ns-here"], {"net.ipv4.ip_forward": "1"})
    assert "namespace swarm-emu_no-such-ns-here" in str(err.value.stderr)


def test_host_link_name_fits_kernel_limit():
    assert len(host_link("a" * 32)) <= 15


def test_registry_matches_spec_literal_and_unknown_name_is_an_error(tmp_path):
    from swarm.caps import BACKEND_TRAITS

    assert {name: cls.traits for name, cls in REGISTRY.items()} == BACKEND_TRAITS  # one table, one class a name
    choices = SwarmSpec.model_json_schema()["properties"]["backend"]["anyOf"][0]["enum"]
    assert choices == sorted(REGISTRY)
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


def fake_docker(containers: list[str], networks: list[str], *more) -> RecordingRunner:
    """A runner answering as a Docker daemon holding `containers` and `networks` would: what `docker rm` or
    `docker network rm` removed is no longer listed. `more`: further (match, answer) pairs."""
    from swarm.runtime.runner import Result

    removed: set[str] = set()

    def listing(ids):
        return lambda a: Result(a, 0, "".join(f"{i}\n" for i in ids if i not in removed))

    def remove(a):
        removed.update(a)
        return Result(a, 0)

    return RecordingRunner(answers=[
        (lambda a: a[:2] == ["docker", "ps"], listing(containers)),
        (lambda a: a[:3] == ["docker", "network", "ls"], listing(networks)),
        (lambda a: a[:2] == ["docker", "rm"] or a[:3] == ["docker", "network", "rm"], remove),
        *more,
    ])


def test_compose_down_removes_only_labelled_ids(tmp_path):
    from dataclasses import replace

    runner = fake_docker(["c1", "c2"], ["n1"])
    backend = get_backend("compose", runner, replace(CAPS, docker=True, compose=["docker-compose"]), tmp_path)
    assert backend.down("demo") == ["2 container(s)", "1 network(s)"]
    lists = [c for c in runner.calls if "ls" in c or "ps" in c]
    assert all("label=io.swarm-emu.swarm=demo" in c for c in lists)
    assert ["docker", "rm", "-f", "-v", "c1", "c2"] in runner.calls
    assert ["docker", "network", "rm", "n1"] in runner.calls


def test_compose_down_releases_one_endpoint_per_call_before_the_stop(tmp_path):
    """Docker 20.10 loses an endpoint-count update when a network's endpoints go at once (a parallel stop): the
    down takes each container off each of its networks in a call of its own, and only then stops them."""
    from dataclasses import replace
    from swarm.runtime.runner import Result

    runner = fake_docker(["c1", "c2"], [], (lambda a: a[:2] == ["docker", "inspect"] and "{{.Id}}" in a[3],
                                            lambda a: Result(a, 0, "c1 demo_isl demo_ground\nc2 demo_isl demo_ground\n")))
    backend = get_backend("compose", runner, replace(CAPS, docker=True, compose=["docker-compose"]), tmp_path)
    backend.down("demo")
    disconnects = [c for c in runner.calls if c[1:3] == ["network", "disconnect"]]
    assert disconnects == [["docker", "network", "disconnect", "--force", net, c]
                           for c in ("c1", "c2") for net in ("demo_isl", "demo_ground")]
    stop = next(i for i, c in enumerate(runner.calls) if c[1:2] == ["stop"])
    assert runner.calls.index(disconnects[-1]) < stop


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
