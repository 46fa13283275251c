"""The mesh's pure parts: the `mesh:` spec key, the implementation choice, batmand and batman-adv plans,
parsers of recorded batmand / `ip route` output, and the convergence judgement."""
from __future__ import annotations

from swarm.runtime.backends import TRAITS
import json
from dataclasses import replace

import pytest

from netem.engines.kernel import NetemEngine
from swarm.errors import SpecError
from netem.spec.links import impairment
from swarm.mesh.implementations import choose_implementation
from swarm.mesh.implementations.batman_adv import plan_batman_adv
from swarm.mesh.implementations.batmand import BATMAND_HOST_TABLE, batmand_argv, parse_batmand_originators, parse_route_table
from swarm.mesh.plan import evaluate, healed_pairs, reachable, usable_neighbours
from swarm.spec.mesh import MeshSpec
from swarm.caps import Capabilities
from swarm.spec.model import spec_from_dict

from conftest import REPO, golden

FIX = REPO / "tests" / "fixtures" / "mesh"
CAPS = Capabilities(kernel="x", root=True, docker=True, docker_version="20.10", compose=["docker-compose"],
                    compose_version="1.29", netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True, htb=True)
NAMES = ["sat01", "sat02", "sat03", "sat04"]


def spec(mesh):
    return spec_from_dict({"name": "m", "nodes": 4, "mesh": mesh}, "m.yaml")


# ------------------------------------------------------------------------------------------------ spec
def test_mesh_key_shorthand_and_mapping():
    assert spec_from_dict({"name": "m", "nodes": 2}).mesh == MeshSpec()
    assert not MeshSpec().enabled
    assert spec("batman").mesh == MeshSpec(protocol="batman")
    full = spec({"protocol": "batman", "implementation": "batmand", "ogm_interval": "250ms", "purge_timeout": "5s",
                 "converge_timeout": 30}).mesh
    assert (full.ogm_interval, full.purge_timeout, full.converge_timeout) == (250, 5000, 30.0)


@pytest.mark.parametrize("mesh, needle", [
    ("olsr", "m.yaml: mesh.protocol: Input should be 'batman' or 'none' (got 'olsr')"),
    ({"protocol": "batman", "implementation": "babel"}, "mesh.implementation: Input should be 'auto', 'batmand' or 'batman-adv' (got 'babel')"),
    ({"protocol": "batman", "ogm": 1}, "mesh: unknown field 'ogm'"),
    ({"protocol": "batman", "ogm_interval": "fast"}, "mesh.ogm_interval: ogm_interval 'fast': expected a duration"),
    ({"protocol": "batman", "ogm_interval": "10ms"}, "mesh.ogm_interval: Input should be greater than or equal to 50"),
])
def test_bad_mesh_is_one_line_naming_field_and_value(mesh, needle):
    with pytest.raises(SpecError) as exc:
        spec(mesh)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_bad_mesh_exits_2_and_starts_nothing(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "s.yaml").write_text("name: mh-bad\nnodes: 4\nmesh: olsr\n")
    res = subprocess.run([sys.executable, "-m", "swarm", "up", "s.yaml"], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "SWARM_WORKDIR": str(tmp_path)}, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["error: s.yaml: mesh.protocol: Input should be 'batman' or 'none' (got 'olsr')"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


# ------------------------------------------------------------------------------------------ choice
def test_auto_takes_the_kernel_module_where_it_exists_else_batmand():
    batman = MeshSpec(protocol="batman")
    assert choose_implementation(MeshSpec(), CAPS, TRAITS["netns"]) is None
    assert choose_implementation(batman, CAPS, TRAITS["netns"]) == "batmand"
    assert choose_implementation(batman, replace(CAPS, batman_adv=True), TRAITS["compose"]) == "batman-adv"
    pinned = MeshSpec(protocol="batman", implementation="batmand")
    assert choose_implementation(pinned, replace(CAPS, batman_adv=True), TRAITS["netns"]) == "batmand"


def test_pinned_implementation_this_host_cannot_run_is_a_spec_error():
    with pytest.raises(SpecError, match="mesh.implementation 'batman-adv': this kernel lacks the batman-adv module"):
        choose_implementation(MeshSpec(protocol="batman", implementation="batman-adv"), CAPS, TRAITS["compose"])
    no_batmand = replace(CAPS, batmand=False)
    with pytest.raises(SpecError, match="batmand is not installed on this host"):
        choose_implementation(MeshSpec(protocol="batman"), no_batmand, TRAITS["netns"])
    assert choose_implementation(MeshSpec(protocol="batman"), no_batmand, TRAITS["compose"]) == "batmand"  # the image has it


# ------------------------------------------------------------------------------------------- plans
def test_batmand_command():
    assert batmand_argv(MeshSpec(protocol="batman"), "eth1") == [
        "batmand", "--no-detach", "-o", "1000", "--purge-timeout", "10000", "eth1"]
    assert batmand_argv(MeshSpec(protocol="batman", ogm_interval=200, purge_timeout=None), "eth0") == [
        "batmand", "--no-detach", "-o", "200", "eth0"]


def test_golden_batman_adv_plan():
    """batman-adv cannot run here (no module): its plan is checked as text only."""
    cmds = plan_batman_adv(MeshSpec(protocol="batman", ogm_interval=500), "eth1", "10.77.0.2", 16, 1500)
    out = "".join(" ".join(c) + "\n" for c in cmds)
    assert out == golden("mesh_batman_adv_eth1.txt", out)
    assert ["ip", "link", "set", "dev", "bat0", "mtu", "1468"] in cmds  # 1500 less batman-adv's 32-byte header


def test_netns_daemons_get_a_private_run(tmp_path):
    from swarm.runtime.backends.netns.backend import NetnsBackend
    from swarm.runtime.runner import Runner

    backend = NetnsBackend(Runner(), CAPS, tmp_path)
    prefix = backend.private_run_prefix("mh", "sat01")
    assert prefix == ["ip", "netns", "exec", "swarm-emu_mh_sat01", "sh", "-c", 'mount --bind "$0" /run && exec "$@"',
                      str(tmp_path / ".swarm" / "mh" / "nodes" / "sat01" / "run")]


def test_netem_engine_also_drops_a_down_link_at_the_receiver():
    """netem's loss 100% on the sender sees only unicast frames; broadcasts (OGMs) need the receiver's drop."""
    mac = "02:42:0a:4d:00:03"
    cmds = NetemEngine(replace(CAPS, sch_netem=True)).plan_node("eth1", {}, {mac: impairment(up=False)}, {mac: "sat02->sat01"})
    assert f'ether saddr {mac} counter drop comment "sat02->sat01 down"' in cmds.nft
    cmds = NetemEngine(replace(CAPS, sch_netem=True)).plan_node("eth1", {}, {mac: impairment(loss="5%")})
    assert cmds.nft is None


# ------------------------------------------------------------------------------------------ parsers
def test_batmand_uses_policy_routing_table_66_for_hosts():
    rules = (FIX / "batmand_ip_rule.txt").read_text()
    assert f"6600:\tfrom all to 10.140.0.0/16 lookup {BATMAND_HOST_TABLE}" in rules
    assert "6700:\tfrom all to 10.140.0.0/16 lookup 67" in rules


def test_parse_route_table_direct_and_two_hop():
    assert parse_route_table((FIX / "batmand_1hop_route66.json").read_text()) == {
        "10.140.0.3": "10.140.0.3", "10.140.0.4": "10.140.0.4"}
    assert parse_route_table((FIX / "batmand_2hop_route66.json").read_text()) == {
        "10.140.0.3": "10.140.0.3", "10.140.0.4": "10.140.0.3"}
    assert parse_route_table("") == {} and parse_route_table("[]") == {}
    unreachable = json.dumps([{"type": "unreachable", "dst": "default", "flags": []}])
    assert parse_route_table(unreachable) == {}


def test_parse_batmand_originators():
    two = parse_batmand_originators((FIX / "batmand_2hop_originators.txt").read_text())
    assert [(o.address, o.tq, o.next_hop) for o in two] == [("10.140.0.4", 204, "10.140.0.3"),
                                                           ("10.140.0.3", 244, "10.140.0.3")]
    assert two[0].candidates == {"10.140.0.4": 0, "10.140.0.3": 204}
    one = parse_batmand_originators((FIX / "batmand_1hop_originators.txt").read_text())
    assert {o.address: o.next_hop for o in one} == {"10.140.0.4": "10.140.0.4", "10.140.0.3": "10.140.0.3"}
    assert parse_batmand_originators("garbage\n") == []


def test_enslaved_interfaces_from_recorded_ip_link():
    from swarm.mesh.plan import enslaved_interfaces

    assert enslaved_interfaces((FIX / "ip_link_show_master.txt").read_text()) == ["eth1"]
    assert enslaved_interfaces("") == []


# -------------------------------------------------------------------------------------- convergence
def full_mesh_routes(names):
    return {n: {d: d for d in names if d != n} for n in names}


def test_full_mesh_direct_routes_have_converged():
    assert evaluate(NAMES, full_mesh_routes(NAMES), set(), set()).converged


def test_missing_route_has_not_converged():
    routes = full_mesh_routes(NAMES)
    del routes["sat02"]["sat04"]
    snap = evaluate(NAMES, routes, set(), set())
    assert not snap.converged and snap.problems["sat02"] == ["no route to sat04"]


def test_cut_needs_a_two_hop_route():
    down = {("sat01", "sat03"), ("sat03", "sat01")}
    routes = full_mesh_routes(NAMES)
    snap = evaluate(NAMES, routes, down, set())
    assert snap.problems["sat01"] == ["route to sat03 via sat03, which it does not hear"]
    routes["sat01"]["sat03"], routes["sat03"]["sat01"] = "sat02", "sat04"
    assert evaluate(NAMES, routes, down, set()).converged


def test_one_way_down_link_is_unusable_both_ways():
    adj = usable_neighbours(NAMES, {("sat01", "sat02")}, set())
    assert "sat02" not in adj["sat01"] and "sat01" not in adj["sat02"]


def test_partition_needs_stale_routes_gone_and_stopped_nodes_are_left_out():
    groups = ({"sat01", "sat02"}, {"sat03", "sat04"})
    down = {(a, b) for a in NAMES for b in NAMES if a != b and (a in groups[0]) != (b in groups[0])}
    assert reachable(usable_neighbours(NAMES, down, set()))["sat01"] == {"sat02"}
    routes = full_mesh_routes(NAMES)
    snap = evaluate(NAMES, routes, down, set())
    assert snap.problems["sat01"] == ["stale route to unreachable sat03 via sat03", "stale route to unreachable sat04 via sat04"]
    routes = {n: {d: d for d in NAMES if d != n and ((d in groups[0]) == (n in groups[0]))} for n in NAMES}
    assert evaluate(NAMES, routes, down, set()).converged
    routes = {n: {d: d for d in ("sat01", "sat02", "sat03") if d != n} for n in ("sat01", "sat02", "sat03")}
    snap = evaluate(NAMES, routes, set(), {"sat04"})
    assert snap.converged and "sat04" not in snap.problems


def test_heal_needs_the_direct_route_back():
    routes = full_mesh_routes(NAMES)
    routes["sat01"]["sat03"] = "sat02"
    healed = healed_pairs({("sat01", "sat03"), ("sat03", "sat01")}, set())
    assert evaluate(NAMES, routes, set(), set()).converged  # a 2-hop route is a route
    snap = evaluate(NAMES, routes, set(), set(), direct=healed)
    assert snap.problems["sat01"] == ["route to sat03 still via sat02, not over the healed link"]


def test_swarm_mesh_of_a_swarm_without_mesh_is_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    from swarm.runtime.state import write_state

    spec_doc = {"name": "mh-nomesh", "nodes": 2, "backend": "netns"}
    write_state(tmp_path, "mh-nomesh", {"name": "mh-nomesh", "backend": "netns", "spec": spec_doc, "image": ""})
    res = subprocess.run([sys.executable, "-m", "swarm", "mesh", "mh-nomesh"], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "SWARM_WORKDIR": str(tmp_path)}, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: swarm 'mh-nomesh': has no mesh (its spec says mesh: none; set `mesh: batman`)"]


def test_wait_converged_times_the_first_converged_snapshot_and_its_resolution(monkeypatch):
    """Snapshots: unconverged, unconverged, converged: converged_ts is the end of the third, and the change
    happened after the second began (resolution)."""
    from swarm.runtime import mesh as mesh_mod
    from swarm.mesh.plan import MeshSnapshot
    from swarm.runtime.mesh import Mesh

    clock = iter([100.0 + 0.1 * i for i in range(100)])
    monkeypatch.setattr(mesh_mod.time, "time", lambda: next(clock))
    monkeypatch.setattr(mesh_mod.time, "sleep", lambda s: None)
    outcomes = iter([{"sat01": ["no route to sat02"]}, {"sat01": ["no route to sat02"]}, {"sat01": []}])
    m = Mesh.__new__(Mesh)
    m.spec, m.implementation = MeshSpec(protocol="batman"), "batmand"
    m.snapshot = lambda direct=frozenset(), state=None: MeshSnapshot(mesh_mod.time.time(), {}, next(outcomes))
    timing = m.wait_converged(since=99.95)
    # each tick of the clock is one reading: snapshot 1 taken 100.0, done 100.1 (100.2: the pause's length);
    # snapshot 2 taken 100.3, done 100.4 (100.5); snapshot 3 taken 100.6, done 100.7: converged
    assert timing["converged"] and timing["polls"] == 3
    assert timing["converged_ts"] == 100.7 and timing["converge_s"] == 0.75 and timing["resolution_s"] == 0.4


def test_an_events_own_link_state_judges_the_routes_not_the_saved_one():
    """A timeline the userspace engine runs saves the link state only at its end: the watcher's measurement of a
    cut is judged against the state the cut left (passed with the event), else the old direct routes would pass
    as converged the instant the cut is applied (stress run: 0.056 s, while batmand needed its purge timeout)."""
    from types import SimpleNamespace

    from netem.state import LinkState
    from swarm.runtime.mesh import Mesh

    m = Mesh.__new__(Mesh)
    m.names = NAMES
    m.links = SimpleNamespace(load=lambda: LinkState())  # saved: nothing cut yet
    m.node_routes = lambda node: {d: d for d in NAMES if d != node}  # every route still direct
    cut = LinkState(cuts={("sat01", "sat03"), ("sat03", "sat01")})
    assert m.snapshot().converged
    after_cut = m.snapshot(state=cut)
    assert not after_cut.converged and after_cut.problems["sat03"] == ["route to sat01 via sat01, which it does not hear"]


def test_batman_adv_originators_json_recorded_in_the_kernel_lab():
    """`batctl meshif bat0 oj` from sat01 (02:42:0a:dc:00:02) of three batman-adv nodes on one bridge (kernel lab,
    batman-adv 2022.3): every originator with its best next hop (flagged `best`) and every candidate's TQ."""
    from swarm.mesh.implementations.batman_adv import parse_batadv_neighbours, parse_batadv_originators

    origs = {o.address: o for o in parse_batadv_originators((FIX / "batadv_oj.json").read_text())}
    assert set(origs) == {"02:42:0a:dc:00:03", "02:42:0a:dc:00:04"}
    assert origs["02:42:0a:dc:00:03"].next_hop == "02:42:0a:dc:00:03" and origs["02:42:0a:dc:00:03"].tq == 252
    assert origs["02:42:0a:dc:00:04"].candidates == {"02:42:0a:dc:00:03": 182, "02:42:0a:dc:00:04": 201}
    assert parse_batadv_neighbours((FIX / "batadv_nj.json").read_text()) == {"02:42:0a:dc:00:04": 0.104,
                                                                            "02:42:0a:dc:00:03": 0.132}
    # an originator without a best entry (being purged) has no route; a 2-hop best route is kept as such
    two_hop = json.dumps([{"orig_address": "02:42:0a:dc:00:04", "neigh_address": "02:42:0a:dc:00:03", "tq": 190,
                           "best": True}, {"orig_address": "02:42:0a:dc:00:05", "neigh_address": "02:42:0a:dc:00:05",
                                           "tq": 0}])
    assert [(o.address, o.next_hop) for o in parse_batadv_originators(two_hop)] == [
        ("02:42:0a:dc:00:04", "02:42:0a:dc:00:03")]


def test_batman_adv_routes_are_named_by_the_nodes_isl_macs():
    """Mesh.node_routes under batman-adv: originator and next-hop MACs -> node names, through the backend."""
    from types import SimpleNamespace

    from swarm.mesh.implementations.batman_adv import batadv_originators_argv
    from swarm.runtime.mesh import Mesh

    calls = []

    def exec_(swarm, node, argv, check=True, timeout=None):
        calls.append((node, argv))
        return SimpleNamespace(ok=True, stdout=(FIX / "batadv_oj.json").read_text())

    nodes = [SimpleNamespace(name=f"sat0{i}", isl_ip=f"10.220.0.{i + 1}", isl_mac=f"02:42:0A:DC:00:0{i + 1}")
             for i in (1, 2, 3)]
    m = Mesh.__new__(Mesh)
    m.implementation = "batman-adv"
    m.swarm = SimpleNamespace(name="kl", backend=SimpleNamespace(exec=exec_))
    m.by_addr = {n.isl_ip: n.name for n in nodes} | {n.isl_mac.lower(): n.name for n in nodes}
    assert m.node_routes("sat01") == {"sat02": "sat02", "sat03": "sat03"}
    assert calls == [("sat01", batadv_originators_argv())]
