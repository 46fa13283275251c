"""Multi-host planning without a daemon: hosts spec, placement, overlay ranges and MTU, clock offsets."""
from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from swarm.errors import RuntimeFailure, SpecError
from swarm.runtime.clocks import ClockOffset, correct, estimate, resolution
from swarm.spec.hosts import HostSpec, Placeable, dynamic_range, node_mtu, overlay_driver_mtu, place


def nodes(n: int, group: str = "sat", **pins: str) -> list[Placeable]:
    return [Placeable(f"{group}{i:02d}", group, pins.get(f"{group}{i:02d}")) for i in range(1, n + 1)]


def test_spread_gives_contiguous_even_blocks():
    hosts = [HostSpec(name="a"), HostSpec(name="b", endpoint="unix:///run/b.sock")]
    got = place(nodes(16), hosts)
    assert [got[f"sat{i:02d}"] for i in range(1, 17)] == ["a"] * 8 + ["b"] * 8
    odd = place(nodes(5), hosts)
    assert list(odd.values()) == ["a", "a", "a", "b", "b"]


def test_spread_respects_capacity_and_pins():
    hosts = [HostSpec(name="a", capacity=4), HostSpec(name="b"), HostSpec(name="c", capacity=2)]
    got = place(nodes(10, sat03="c"), hosts)
    assert got["sat03"] == "c"
    counts = {h: list(got.values()).count(h) for h in "abc"}
    assert counts == {"a": 4, "b": 4, "c": 2}


def test_group_policy_keeps_groups_whole():
    hosts = [HostSpec(name="a"), HostSpec(name="b", endpoint="ssh://u@b")]
    got = place(nodes(3, "relay") + nodes(5, "obs"), hosts, "group")
    assert {got[f"relay{i:02d}"] for i in range(1, 4)} == {"a"}
    assert {got[f"obs{i:02d}"] for i in range(1, 6)} == {"b"}


@pytest.mark.parametrize("call, message", [
    (lambda: place([Placeable("x", "g", "zz", "node_list[0] ('x').host")], [HostSpec(name="a")]),
     "node_list[0] ('x').host 'zz': no such host (hosts: a)"),
    (lambda: place(nodes(3, sat01="a", sat02="a", sat03="a"), [HostSpec(name="a", capacity=2), HostSpec(name="b", endpoint="ssh://b")]),
     "hosts[0] ('a').capacity: 3 nodes pinned to it (sat01..sat03) exceed its capacity 2"),
    (lambda: place(nodes(9), [HostSpec(name="a", capacity=4), HostSpec(name="b", endpoint="ssh://b", capacity=4)]),
     "hosts: 9 nodes exceed the hosts' total capacity 8"),
    (lambda: place(nodes(5, "big"), [HostSpec(name="a", capacity=4), HostSpec(name="b", endpoint="ssh://b", capacity=4)], "group"),
     "placement.policy group: group 'big' (5 nodes) fits on no host (room: a 4, b 4)"),
])
def test_bad_placement_is_one_line_naming_host_and_field(call, message):
    with pytest.raises(SpecError) as err:
        call()
    assert str(err.value) == message


@pytest.mark.parametrize("fields, fragment", [
    ({"endpoint": "tcp://h:2376"}, "tls"),
    ({"endpoint": "http://h"}, "endpoint 'http://h'"),
    ({"endpoint": "tcp://h"}, "needs a port"),
    ({"endpoint": "ssh://u@h", "tls": {"ca": "a", "cert": "b", "key": "c"}}, "only for tcp://"),
    ({"advertise_addr": "h2"}, "advertise_addr 'h2'"),
    ({"name": "H 2"}, "name must match"),
])
def test_bad_host_fields(fields, fragment):
    with pytest.raises(ValidationError) as err:
        HostSpec(**{"name": "h2", **fields})
    assert fragment in str(err.value)


def test_docker_args_address_the_host():
    assert HostSpec(name="a").docker_args() == []
    assert HostSpec(name="b", endpoint="ssh://ops@b").docker_args() == ["-H", "ssh://ops@b"]
    tls = HostSpec(name="c", endpoint="tcp://c:2376", tls={"ca": "/p/ca.pem", "cert": "/p/c.pem", "key": "/p/k.pem"})
    assert tls.docker_args() == ["-H", "tcp://c:2376", "--tlsverify", "--tlscacert", "/p/ca.pem",
                                 "--tlscert", "/p/c.pem", "--tlskey", "/p/k.pem"]


def test_overlay_range_sits_above_the_nodes():
    assert dynamic_range("10.241.0.0/24", 16, 2) == "10.241.0.248/29"
    assert dynamic_range("10.77.0.0/16", 100, 4) == "10.77.255.240/28"
    with pytest.raises(SpecError, match=r"networks.isl.subnet '10.0.0.0/27': too small for 25 nodes"):
        dynamic_range("10.0.0.0/27", 25, 2)


def test_node_sees_spec_mtu_unless_the_underlay_is_too_small():
    hosts = [HostSpec(name="a"), HostSpec(name="b", endpoint="ssh://b", underlay_mtu=9000)]
    assert node_mtu(1400, hosts) == 1400 and overlay_driver_mtu(1400, hosts) == 1450
    assert node_mtu(1500, hosts) == 1450 and overlay_driver_mtu(1500, hosts) == 1500


def test_clock_offset_from_the_shortest_round_trip():
    # host clock 5 s ahead; exchanges with 10 ms, 2 ms (asymmetric) and 40 ms round trips
    samples = [(100.0, 105.006, 100.010), (200.0, 205.0015, 200.002), (300.0, 305.03, 300.040)]
    off = estimate("b", samples)
    assert off.rtt_s == pytest.approx(0.002) and off.uncertainty_s == pytest.approx(0.001)
    assert off.offset_s == pytest.approx(5.0005)
    assert off.to_orchestrator(off.to_host(123.0)) == pytest.approx(123.0)
    assert math.isnan(estimate("c", []).offset_s)


def test_resolution_and_correction():
    offs = {"a": ClockOffset("a", 0.0, 0.0, 0.0, 0), "b": ClockOffset("b", 2.0, 0.0005, 0.001, 9)}
    assert resolution(offs.values()) == pytest.approx(0.0005)
    three = [*offs.values(), ClockOffset("c", -1.0, 0.002, 0.004, 9)]
    assert resolution(three) == pytest.approx(0.0025)
    assert correct({"s1": 10.0, "s2": 12.0}, {"s1": "a", "s2": "b"}, offs) == {"s1": 10.0, "s2": 10.0}


# ---------------------------------------------------------------------------------------------------
# The spec piece and the per-host Compose files (no daemon: a recording runner)

import yaml  # noqa: E402

from swarm.caps import Capabilities  # noqa: E402
from swarm.runtime.backends.multihost.backend import HostCompose, SwarmBackend  # noqa: E402
from swarm.runtime.runner import RecordingRunner, Result  # noqa: E402
from swarm.spec.model import plan_nodes, spec_from_dict  # noqa: E402

CAPS = Capabilities(kernel="x", root=True, docker=True, docker_version="20.10", compose=["docker-compose"],
                    compose_version="1.29", netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True, htb=True)
HOSTS = [{"name": "main", "endpoint": "local"}, {"name": "lab2", "endpoint": "ssh://ops@lab2", "capacity": 3}]
NETS = {"isl": {"subnet": "10.241.0.0/24"}, "ground": {"subnet": "10.242.0.0/24"}}


def swarm_spec(**extra):
    return spec_from_dict({"name": "mh2-u", "nodes": 4, "backend": "swarm", "hosts": HOSTS, "networks": NETS, **extra})


@pytest.mark.parametrize("doc, message", [
    ({"backend": "compose"}, "hosts: given with backend 'compose'; hosts are for backend 'swarm'"),
    ({"hosts": []}, "hosts: empty"),
    ({"hosts": HOSTS + [{"name": "main", "endpoint": "ssh://x"}]}, "hosts[2] ('main').name: duplicate of hosts[0]"),
    ({"nodes": None, "node_list": [{"name": "a", "host": "nowhere"}, {"name": "b"}]},
     "node_list[0] ('a').host 'nowhere': no such host (hosts: main, lab2)"),
    ({"nodes": None, "groups": [{"prefix": "r", "count": 4, "host": "lab2"}]},
     "hosts[1] ('lab2').capacity: 4 nodes pinned to it (r01..r04) exceed its capacity 3"),
])
def test_bad_hosts_in_the_spec_are_one_line(doc, message):
    with pytest.raises(SpecError) as err:
        swarm_spec(**doc)
    assert message in str(err.value)


def test_a_pin_without_hosts_is_refused():
    with pytest.raises(SpecError, match=r"defaults.host 'lab2': pins a node to a host, but the spec lists no hosts"):
        spec_from_dict({"name": "x", "nodes": 2, "defaults": {"host": "lab2"}})


def test_each_host_gets_its_share_on_external_overlays(tmp_path):
    spec = swarm_spec()
    host = spec.hosts[1]
    hc = HostCompose(RecordingRunner(), CAPS, tmp_path, host, ["sat03", "sat04"])
    doc = yaml.safe_load(hc.write_compose(spec, "swarm-emu/node:abc").read_text())
    assert list(doc["services"]) == ["sat03", "sat04"]
    assert doc["networks"] == {"isl": {"external": True, "name": "mh2-u-isl"},
                               "ground": {"external": True, "name": "mh2-u-ground"}}
    assert doc["services"]["sat04"]["networks"]["isl"] == {"ipv4_address": "10.241.0.5"}
    assert hc.compose_argv("mh2-u", "up", "-d")[:3] == ["docker-compose", "-H", "ssh://ops@lab2"]
    v2 = HostCompose(RecordingRunner(), Capabilities(**{**CAPS.as_dict(), "compose": ["docker", "compose"]}), tmp_path, host)
    assert v2.compose_argv("mh2-u", "ps")[:4] == ["docker", "-H", "ssh://ops@lab2", "compose"]


def test_preflight_names_the_unreachable_host_and_creates_nothing(tmp_path):
    runner = RecordingRunner(answers=[
        (lambda a: a[:3] == ["docker", "-H", "ssh://ops@lab2"] and "version" in a,
         lambda a: Result(a, 1, "", "error during connect: ssh: connect to host lab2 port 22: No route to host")),
        (lambda a: "version" in a, lambda a: Result(a, 0, "20.10.24\n")),
    ])
    backend = SwarmBackend(runner, CAPS, tmp_path)
    spec = swarm_spec()
    with pytest.raises(SpecError) as err:
        backend.check_spec(spec, plan_nodes(spec))
    assert str(err.value) == ("hosts[1] ('lab2').endpoint 'ssh://ops@lab2': unreachable: "
                              "error during connect: ssh: connect to host lab2 port 22: No route to host")
    assert all(a[-2:] == ["--format", "{{.Server.Version}}"] for a in runner.calls)  # asked, created nothing
    assert not (tmp_path / ".swarm").exists()


@pytest.mark.parametrize("doc, message", [
    ({"mesh": {"protocol": "batman"}}, "mesh.protocol 'batman': the swarm backend's overlays carry no broadcast"),
    ({"apps": ["swarm-app"], "app": {"multicast": True}}, "app.multicast true: the swarm backend's overlays carry no multicast"),
])
def test_broadcast_needs_refused_across_hosts_before_any_host_is_asked(doc, message, tmp_path):
    runner = RecordingRunner()
    spec = swarm_spec(**doc)
    with pytest.raises(SpecError, match=message):
        SwarmBackend(runner, CAPS, tmp_path).check_spec(spec, plan_nodes(spec))
    assert runner.calls == []


def test_a_transient_overlay_attach_failure_is_tried_again_and_others_are_not(tmp_path, monkeypatch):
    """Seen in CI: `network connect` on a worker answered "attaching to network failed ... context deadline
    exceeded" once; the same request succeeds a moment later. Anything else fails at once."""
    import swarm.runtime.backends.multihost.backend as sb
    monkeypatch.setattr(sb.time, "sleep", lambda s: None)
    spec = swarm_spec()
    host = spec.hosts[1]
    fails = {"n": 1}

    def connect(a):
        if fails["n"]:
            fails["n"] -= 1
            return Result(a, 1, "", "Error response from daemon: attaching to network failed, make sure your network "
                                    "options are correct and check manager logs: context deadline exceeded")
        return Result(a, 0)

    runner = RecordingRunner(answers=[(lambda a: "connect" in a, connect)])
    assert SwarmBackend(runner, CAPS, tmp_path)._anchor(spec, host, "img") == f"{spec.name}-anchor-{host.name}"
    assert sum("connect" in a for a in runner.calls) == 2 and sum("rm" in a for a in runner.calls) == 2

    runner = RecordingRunner(answers=[(lambda a: "connect" in a, lambda a: Result(a, 1, "", "Error: No such network"))])
    with pytest.raises(sb.CommandError):
        SwarmBackend(runner, CAPS, tmp_path)._anchor(spec, host, "img")
    assert sum("connect" in a for a in runner.calls) == 1


def test_a_node_not_ready_across_hosts_is_reported_with_each_hosts_overlay_peers(tmp_path, monkeypatch):
    """A node that runs but does not answer over the overlay: the error says which hosts each engine's
    overlay gossip knows (Docker 20.10's `network inspect --verbose` Peers), and a host that does not answer."""
    spec = swarm_spec()
    peers = '[{"Name":"a","IP":"10.249.255.1"},{"Name":"b","IP":"10.249.255.2"}]'

    def inspect(a):
        return Result(a, 1, "", "Cannot connect") if "ssh://ops@lab2" in a else Result(a, 0, peers)

    runner = RecordingRunner(answers=[(lambda a: "inspect" in a, inspect)])
    backend = SwarmBackend(runner, CAPS, tmp_path)
    monkeypatch.setattr(backend, "hosts", lambda swarm: list(spec.hosts))
    assert backend.not_ready_detail("mh2-u", "sat03") == (
        "overlay mh2-u-isl gossip peers as each host sees them: main [10.249.255.1, 10.249.255.2]; lab2 (no answer)")
    assert all(a[-4:] == ["--verbose", "--format", "{{json .Peers}}", "mh2-u-isl"] for a in runner.calls)


def test_leaving_the_swarm_is_asked_again_until_the_engine_says_inactive(tmp_path, monkeypatch):
    """Seen here: a worker answered `swarm leave --force` with "context deadline exceeded" and stayed active
    (no node ID); asked again it left at once. A leave that never takes is reported with Docker's words."""
    import swarm.runtime.backends.multihost.backend as sb
    monkeypatch.setattr(sb.time, "sleep", lambda s: None)
    state = {"left": False, "fails": 1}

    def leave(a):
        if state["fails"]:
            state["fails"] -= 1
            return Result(a, 1, "", "Error response from daemon: context deadline exceeded")
        state["left"] = True
        return Result(a, 0, "Node left the swarm.")

    def info(a):
        return Result(a, 0, "inactive\n" if state["left"] else "active\n")

    runner = RecordingRunner(answers=[(lambda a: "leave" in a, leave), (lambda a: "info" in a, info)])
    assert SwarmBackend(runner, CAPS, tmp_path)._leave(["docker", "-H", "ssh://ops@lab2"]) == ""
    assert sum("leave" in a for a in runner.calls) == 2

    state.update(left=False, fails=99)
    runner = RecordingRunner(answers=[(lambda a: "leave" in a, leave), (lambda a: "info" in a, info)])
    why = SwarmBackend(runner, CAPS, tmp_path)._leave(["docker"])
    assert why == "Error response from daemon: context deadline exceeded"
    assert sum("leave" in a for a in runner.calls) == sb.LEAVE_ATTEMPTS


def test_a_leave_waits_for_the_engines_ingress_sandbox_and_gwbridge_removal_outlasts_its_release(tmp_path, monkeypatch):
    """Seen in CI: leaving 0.4 s after `swarm init`, while the engine was still setting up the ingress network,
    left a stale `ingress` and a docker_gwbridge held by `ingress-sbox`. The leave is asked only once the
    sandbox exists; docker_gwbridge removal is retried while the sandbox still holds it, and not otherwise."""
    import swarm.runtime.backends.multihost.backend as sb
    monkeypatch.setattr(sb.time, "sleep", lambda s: None)
    polls = {"n": 0, "rm": 0}

    def containers(a):  # the sandbox shows up on the third look at the ingress network, its gateway a look later
        if a[-1] == "docker_gwbridge":
            return Result(a, 0, '{"ingress-sbox":{"Name":"gateway_ingress-sbox"}}' if polls["n"] >= 4 else "{}")
        polls["n"] += 1
        return Result(a, 0, '{"ingress-sbox":{"Name":"ingress-endpoint"}}' if polls["n"] >= 3 else "{}")

    def leave(a):
        assert polls["n"] >= 4, "left before the ingress sandbox and its gateway existed"
        return Result(a, 0, "Node left the swarm.")

    runner = RecordingRunner(answers=[(lambda a: "{{json .Containers}}" in a, containers),
                                      (lambda a: "leave" in a, leave),
                                      (lambda a: "info" in a, lambda a: Result(a, 0, "inactive\n"))])
    backend = SwarmBackend(runner, CAPS, tmp_path)
    assert backend._leave(["docker"], "ingress") == ""
    assert polls["n"] == 4 and runner.calls[2][-1] == "ingress"

    def rm(a):
        polls["rm"] += 1
        return Result(a, 0, "") if polls["rm"] >= 3 else Result(
            a, 1, "", "Error response from daemon: error while removing network: network docker_gwbridge id 39 has active endpoints")

    backend = SwarmBackend(RecordingRunner(answers=[(lambda a: "rm" in a, rm)]), CAPS, tmp_path)
    assert backend._remove_gwbridge(["docker"]) and polls["rm"] == 3
    other = RecordingRunner(answers=[(lambda a: "rm" in a, lambda a: Result(a, 1, "", "Error: No such network: docker_gwbridge"))])
    assert not SwarmBackend(other, CAPS, tmp_path)._remove_gwbridge(["docker"]) and len(other.calls) == 1


def test_overlays_are_attached_host_by_host_manager_first_each_after_the_peers_agree(tmp_path, monkeypatch):
    """Engines joining a new overlay at once timed out in CI; the anchors go one host at a time, and a host
    is attached only once the ones before it list each other as the overlay's gossip peers."""
    import swarm.runtime.backends.multihost.backend as sb
    monkeypatch.setattr(sb.time, "sleep", lambda s: None)
    spec = swarm_spec()
    attached: list[str] = []
    polls = {"n": 0}

    def run(a):
        attached.append("lab2" if "ssh://ops@lab2" in a else "main")
        return Result(a, 0, "id\n")

    def peers(a):  # the second host shows up in the peer lists on the second poll
        polls["n"] += 1
        both = '[{"IP":"10.249.255.1"},{"IP":"10.249.255.2"}]'
        return Result(a, 0, both if polls["n"] > 2 else '[{"IP":"10.249.255.1"}]')

    runner = RecordingRunner(answers=[(lambda a: "run" in a, run), (lambda a: "{{json .Peers}}" in a, peers)])
    got = SwarmBackend(runner, CAPS, tmp_path)._attach_overlays(spec, list(spec.hosts), "img", lambda *a: None)
    assert got == {"main": "mh2-u-anchor-main", "lab2": "mh2-u-anchor-lab2"} and attached == ["main", "lab2"]
    assert polls["n"] == 4  # both hosts asked until both list 2 peers
    first_poll = next(i for i, a in enumerate(runner.calls) if "{{json .Peers}}" in a)
    assert first_poll > max(i for i, a in enumerate(runner.calls) if "run" in a)  # only after the last anchor ran


def test_a_host_whose_overlay_agent_never_starts_stops_up_with_its_name(tmp_path, monkeypatch):
    """Seen in CI: the second host listed no gossip peers at all (not even itself) and every node there was
    'not ready after 62 s'. When a host still lists nobody once the wait for peers is over, `up` stops at once
    and names the host; a host that lists only itself is merely late (readiness judges it)."""
    import swarm.runtime.backends.multihost.backend as sb
    monkeypatch.setattr(sb.time, "sleep", lambda s: None)
    import swarm.runtime.backends.multihost.overlays as overlays
    monkeypatch.setattr(overlays, "PEER_WAIT_S", 0.0)
    spec = swarm_spec()

    def peers(lab2_sees: str):
        return lambda a: Result(a, 0, lab2_sees if "ssh://ops@lab2" in a else '[{"IP":"10.249.255.1"}]')

    for lab2_sees, fails in (("null", True), ('[{"IP":"10.249.255.2"}]', False)):
        runner = RecordingRunner(answers=[(lambda a: "run" in a, lambda a: Result(a, 0, "id\n")),
                                          (lambda a: "{{json .Peers}}" in a, peers(lab2_sees))])
        backend = SwarmBackend(runner, CAPS, tmp_path)
        if fails:
            with pytest.raises(RuntimeFailure, match=r"^host lab2: its Docker engine did not join the overlay's gossip"):
                backend._attach_overlays(spec, list(spec.hosts), "img", lambda *a: None)
        else:
            assert set(backend._attach_overlays(spec, list(spec.hosts), "img", lambda *a: None)) == {"main", "lab2"}


# ------------------------------------------------------- ssh:// hosts: the client tools, checked before any host
from swarm.runtime.backends.multihost.preflight import ssh_tools_missing  # noqa: E402


def _bin(tmp_path, folder: str = "bin", **programs: str):
    """A PATH folder holding the given programs (name -> script text), each executable."""
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    for name, text in programs.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return str(d)


def test_an_ssh_host_without_the_ssh_client_is_one_line_naming_it_and_nothing_is_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _bin(tmp_path, **{"docker-compose": "#!/bin/sh\n"}))
    runner = RecordingRunner()
    spec = swarm_spec()
    with pytest.raises(SpecError) as err:
        SwarmBackend(runner, CAPS, tmp_path).check_spec(spec, plan_nodes(spec))
    assert str(err.value) == ("hosts[1] ('lab2').endpoint 'ssh://ops@lab2': needs the OpenSSH client 'ssh' "
                              "(Debian package openssh-client), which is not in PATH")
    assert runner.calls == [] and not (tmp_path / ".swarm").exists()


def test_a_python_docker_compose_whose_interpreter_lacks_paramiko_is_named(tmp_path):
    # a real interpreter that cannot import paramiko: Python without its site directories
    path = _bin(tmp_path, ssh="#!/bin/sh\n", **{"docker-compose": "#!/usr/bin/python3 -S\nimport sys\n"})
    why = ssh_tools_missing(["docker-compose"], path=path)
    assert why == (f"docker-compose ({path}/docker-compose, Python) needs paramiko for ssh:// hosts, which its "
                   "interpreter /usr/bin/python3 -S cannot import (Debian package python3-paramiko)")
    assert "\n" not in why
    assert ssh_tools_missing(["docker", "compose"], path=path) == ""  # the Go plugin runs ssh itself
    compiled = _bin(tmp_path, "compiled", ssh="#!/bin/sh\n", **{"docker-compose": "\x7fELF"})
    assert ssh_tools_missing(["docker-compose"], path=compiled) == ""


def test_the_machines_own_docker_compose_and_ssh_pass_where_installed():
    import shutil
    if not (shutil.which("ssh") and shutil.which("docker-compose")):
        pytest.skip("no ssh client or docker-compose here")
    assert ssh_tools_missing(["docker-compose"]) == ""


def test_hosts_without_ssh_endpoints_do_not_need_the_ssh_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _bin(tmp_path))
    runner = RecordingRunner(answers=[(lambda a: "version" in a, lambda a: Result(a, 1, "", "no engine"))])
    spec = spec_from_dict({"name": "mh2-u", "nodes": 2, "backend": "swarm", "networks": NETS,
                           "hosts": [{"name": "main", "endpoint": "local"}, {"name": "b", "endpoint": "unix:///run/b.sock"}]})
    with pytest.raises(SpecError, match="unreachable"):  # asked, not refused for ssh
        SwarmBackend(runner, CAPS, tmp_path).check_spec(spec, plan_nodes(spec))


def test_a_host_asked_again_to_leave_says_a_docker_gwbridge_that_stays(tmp_path, monkeypatch):
    """A worker unreachable at one `down` leaves at the next; the docker_gwbridge its join made goes with it, or
    `remaining` says that it stays and why (a bridge Docker's ingress sandbox still holds), never silently."""
    import swarm.runtime.backends.multihost.backend as sb
    import swarm.runtime.backends.multihost.release as rel
    monkeypatch.setattr(sb.time, "sleep", lambda s: None)
    monkeypatch.setattr(rel, "GWBRIDGE_RM_S", 0.0)
    held = "Error response from daemon: error while removing network: network docker_gwbridge id 39 has active endpoints"
    runner = RecordingRunner(answers=[(lambda a: "leave" in a, lambda a: Result(a, 0, "Node left the swarm.")),
                                      (lambda a: "info" in a, lambda a: Result(a, 0, "inactive\n")),
                                      (lambda a: "rm" in a, lambda a: Result(a, 1, "", held))])
    plan = {"pending_leave": [{"args": ["-H", "ssh://ops@lab2"], "gwbridge": True}]}
    removed, remaining = [], []
    assert SwarmBackend(runner, CAPS, tmp_path)._finish_rejoins(plan, removed, remaining) == removed
    assert removed == ["-H ssh://ops@lab2: left the Swarm"] and plan["pending_leave"] == []
    assert len(remaining) == 1 and remaining[0].startswith("host -H ssh://ops@lab2: docker_gwbridge still held by")


def test_a_bridge_held_only_by_the_left_engines_orphaned_ingress_gateway_is_let_go_of_and_nothing_else(tmp_path,
                                                                                                     monkeypatch):
    """Reproduced with the second engine under load: the leave's ingress release never came and docker_gwbridge
    stayed held by `gateway_ingress-sbox` for minutes. After GWBRIDGE_FORCE_S that endpoint alone is disconnected
    by force (engine out of the Swarm) and the bridge goes; with anything else on the bridge nothing is forced."""
    import swarm.runtime.backends.multihost.backend as sb
    import swarm.runtime.backends.multihost.release as rel
    clock = {"t": 0.0}
    monkeypatch.setattr(sb.time, "sleep", lambda s: clock.update(t=clock["t"] + s))
    monkeypatch.setattr(rel.time, "monotonic", lambda: clock["t"])
    held = "Error response from daemon: error while removing network: network docker_gwbridge id 39 has active endpoints"

    def engine(on_bridge: str):
        state = {"attached": True}

        def rm(a):
            return Result(a, 1, "", held) if state["attached"] else Result(a, 0, "docker_gwbridge")

        def disconnect(a):
            state["attached"] = False
            return Result(a, 0, "")
        return RecordingRunner(answers=[(lambda a: "rm" in a, rm), (lambda a: "disconnect" in a, disconnect),
                                        (lambda a: "info" in a, lambda a: Result(a, 0, "inactive\n")),
                                        (lambda a: "inspect" in a, lambda a: Result(a, 0, on_bridge))])

    orphan = engine("gateway_ingress-sbox ")
    assert SwarmBackend(orphan, CAPS, tmp_path)._remove_gwbridge(["docker"])
    forced = [a for a in orphan.calls if "disconnect" in a]
    assert forced == [["docker", "network", "disconnect", "-f", "docker_gwbridge", "gateway_ingress-sbox"]]
    assert clock["t"] >= rel.GWBRIDGE_FORCE_S  # Docker's own release was given its time first
    clock["t"] = 0.0
    theirs = engine("gateway_ingress-sbox someones-container ")
    assert not SwarmBackend(theirs, CAPS, tmp_path)._remove_gwbridge(["docker"])
    assert not any("disconnect" in a for a in theirs.calls)
