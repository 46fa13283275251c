"""The B.A.T.M.A.N. mesh, live (batmand; this kernel has no batman-adv): 4 nodes, a cut that forces a 2-hop route
(seen in batmand's routing table 66 AND by traceroute), the heal back to 1 hop, a node restart, `swarm mesh`,
convergence rows of a sweep with a fault timeline, and a leftover audit after `down` (no batmand process, no
namespace, no container). netns backend, and one compose case.

Subnets from tests/alloc.py and swarm names `mh-*` belong to these tests.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

from conftest import REPO, require
from alloc import octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]
MESH = {"protocol": "batman", "ogm_interval": "200ms", "purge_timeout": "5s", "converge_timeout": 60}


def make(name: str, backend: str, third: int, n: int = 4) -> Swarm:
    data = {"name": name, "nodes": n, "backend": backend, "mesh": MESH,
            "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third}.1.0/24"}}}
    return Swarm(spec_from_dict(data), workdir=REPO)


@pytest.fixture
def need_batmand(caps):
    require("batmand", caps.batmand, "batmand is not installed (apt-get install batmand)")


@pytest.fixture
def need_traceroute():
    import shutil

    require("traceroute", shutil.which("traceroute") is not None, "traceroute is not installed")


def batmand_pids(swarm: Swarm) -> list[int]:
    """batmand processes inside the swarm's nodes (by network namespace)."""
    ids = swarm.backend.netns_ids(swarm.name)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = open(f"/proc/{entry}/comm").read().strip()
            if comm == "batmand" and os.readlink(f"/proc/{entry}/ns/net") in ids:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def route(swarm: Swarm, src: str, dst: str) -> str:
    return swarm.exec(src, ["ip", "route", "show", "table", "66", swarm.node(dst).isl_ip]).stdout.strip()


def hops(swarm: Swarm, src: str, dst: str, expected: list[str]) -> list[str]:
    """Addresses traceroute saw on the way from src to dst's ISL address; tried up to 3 times (2 s apart) until
    they are `expected`. Once in ~6 runs here, the first traceroute right after a heal got no answer at all
    (`* * * * *`) while table 66 already showed the direct route; 1-3 s later it answered. Not diagnosed
    (ICMP answers are rate-limited by the kernel, and neighbours are re-resolved after a heal)."""
    for attempt in range(3):
        out = swarm.exec(src, ["traceroute", "-n", "-w", "1", "-q", "1", "-m", "5", swarm.node(dst).isl_ip],
                         check=False, timeout=60).stdout
        seen = [line.split()[1] for line in out.splitlines()[1:] if len(line.split()) > 1]
        if seen == expected:
            break
        time.sleep(2)
    return seen


def check_cut_and_heal(swarm: Swarm) -> None:
    """sat01 <-> sat03 cut: a 2-hop route via sat02 or sat04 (table and traceroute); healed: direct again."""
    mesh = swarm.mesh
    ip = {n.name: n.isl_ip for n in swarm.nodes}
    assert swarm.mesh_result["converged"], swarm.mesh_result
    assert route(swarm, "sat01", "sat03").startswith(f"{ip['sat03']} dev "), route(swarm, "sat01", "sat03")
    assert hops(swarm, "sat01", "sat03", [ip["sat03"]]) == [ip["sat03"]]

    swarm.links.cut("sat01", "sat03")
    timing = mesh.wait_converged(time.time())
    assert timing["converged"], timing
    shown = route(swarm, "sat01", "sat03")
    via = shown.split(" via ")[1].split()[0] if " via " in shown else ""
    relays = (ip["sat02"], ip["sat04"])
    assert via in relays, shown
    # sat02 and sat04 are equally good relays, and batmand may switch between them right after the cut (seen
    # in a fresh-clone CI run: table 66 via sat02, traceroute a moment later via sat04). So: every traceroute
    # must take two hops through one of them, and within 30 s a traceroute must be seen to follow table 66 while
    # the table stays the same across it.
    deadline, agreed, disagreed = time.monotonic() + 30, False, []
    while time.monotonic() < deadline and not agreed:
        before = route(swarm, "sat01", "sat03")
        seen = hops(swarm, "sat01", "sat03", [via, ip["sat03"]])
        after = route(swarm, "sat01", "sat03")
        if "*" in seen:  # no answer from a hop (ICMP rate limit, neighbours re-resolved): ask again
            time.sleep(1)
            continue
        assert len(seen) == 2 and seen[0] in relays and seen[1] == ip["sat03"], (before, seen)
        via_now = before.split(" via ")[1].split()[0] if " via " in before else ""
        if before == after:
            # A stable table with a traceroute that took the other relay is a flip there and back between the two
            # reads (seen once in a stress run: table via sat02 before and after, traceroute via sat04): look
            # again. A data plane that ignores table 66 never agrees with it, and fails below.
            if seen == [via_now, ip["sat03"]]:
                agreed = True
            else:
                disagreed.append((before, seen))
    assert agreed, f"table 66 and traceroute never agreed while the table held, for 30 s after the cut: {disagreed}"

    swarm.links.heal("sat01", "sat03")
    timing = mesh.wait_converged(time.time(), direct=frozenset({("sat01", "sat03"), ("sat03", "sat01")}))
    assert timing["converged"], timing
    # Right after a heal batmand may still switch between the direct link and a 2-hop route while the direct
    # link's quality window fills (seen twice in full CI runs: table 66 direct at convergence, via sat02 or
    # sat04 moments later; the convergence figure is the first direct snapshot, not a stable one). So:
    # within 30 s the direct route must be seen end to end, in table 66 and in a traceroute while the table
    # stays the same across it.
    deadline, seen, disagreed, direct = time.monotonic() + 30, [], [], False
    while time.monotonic() < deadline and not direct:
        before = route(swarm, "sat01", "sat03")
        out = swarm.exec("sat01", ["traceroute", "-n", "-w", "1", "-q", "1", "-m", "5", ip["sat03"]],
                         check=False, timeout=60).stdout
        after = route(swarm, "sat01", "sat03")
        seen = [line.split()[1] for line in out.splitlines()[1:] if len(line.split()) > 1]
        if before == after and "*" not in seen:  # a stable route and a full answer: they should agree
            via_now = before.split(" via ")[1].split()[0] if " via " in before else ""
            if seen == ([via_now] if via_now else []) + [ip["sat03"]]:
                direct = not via_now
            else:  # a flip there and back between the two reads (as after the cut): look again
                disagreed.append((before, seen))
        time.sleep(1)
    assert direct and seen == [ip["sat03"]], (seen, disagreed)  # the direct route, table and traceroute agreeing


@contextmanager
def meshed(swarm: Swarm):
    """The swarm up with its 4 batmand processes; on exit `down`, and no batmand left (leftover audit)."""
    swarm.down()
    pids: list[int] = []
    try:
        swarm.up()
        pids[:] = batmand_pids(swarm)
        assert len(pids) == 4, pids
        yield pids
    finally:
        swarm.down()
    assert not [p for p in pids if alive(p)], "batmand outlived the swarm"


# ------------------------------------------------------------------------------------------------ netns
def test_netns_mesh_cut_forces_two_hops_heal_restores_one(need_netns, need_batmand, need_traceroute, need_nft):
    swarm = make("mh-live", "netns", NET[0])
    with meshed(swarm) as pids:
        check_cut_and_heal(swarm)

        # the CLI: `swarm mesh --json` per node, and `swarm fault` printing the convergence
        env = {**os.environ, "SWARM_WORKDIR": str(REPO)}
        cli = lambda *a: subprocess.run([sys.executable, "-m", "swarm", *a], capture_output=True, text=True,  # noqa: E731
                                        env=env, timeout=120)
        res = cli("fault", swarm.name, "cut", "sat02", "sat04")
        assert res.returncode == 0 and "mesh batmand: converged" in res.stdout, res.stdout + res.stderr
        res = cli("mesh", swarm.name, "--json")
        report = json.loads(res.stdout)
        assert res.returncode == 0 and report["converged"] and report["implementation"] == "batmand", res.stdout
        sat02 = next(n for n in report["nodes"] if n["node"] == "sat02")
        assert sat02["next_hop"]["sat04"] in ("sat01", "sat03") and set(sat02["neighbours"]) == {"sat01", "sat03"}
        assert all(isinstance(q, int) and 0 < q <= 255 for q in sat02["neighbours"].values()), sat02
        res = cli("fault", swarm.name, "heal")
        assert res.returncode == 0 and "converged" in res.stdout and "after heal" in res.stdout, res.stdout
        status = json.loads(cli("status", swarm.name, "--json").stdout)
        assert status["mesh"] == "batmand"

        # a restarted node gets its mesh daemon back (all of its processes were ended)
        swarm.links.node_action("sat04", "restart")
        timing = swarm.mesh.wait_converged(time.time())
        assert timing["converged"], timing
        pids[:] = batmand_pids(swarm)
        assert len(pids) == 4, pids
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "swarm-emu_mh-live" not in left, left


def test_sweep_records_mesh_convergence_after_each_fault(need_netns, need_batmand, need_iperf3, need_nft, tmp_path):
    import pandas as pd

    from experiments.traffic.model import experiment_from_dict
    from analysis.traffic import write_report
    from experiments.store import ResultsStore, host_facts
    from experiments.traffic.run import run_sweep

    exp = experiment_from_dict({
        "name": "mh-tl", "sizes": [4], "protocols": ["udp"], "rates": ["1M"], "duration": "8s", "settle": 0,
        "backend": "netns", "pattern": "ring",
        "swarm": {"mesh": MESH, "networks": {"isl": {"subnet": f"10.{NET[1]}.0.0/24"}, "ground": {"subnet": f"10.{NET[1]}.1.0/24"}}},
        "faults": [{"at": "1s", "cut": ["sat01", "sat02"]}, {"at": "4s", "heal": "all"}]})
    store = ResultsStore.create(tmp_path, exp, host_facts())
    try:
        run_sweep(exp, store)
    finally:
        Swarm(exp.swarm_spec(4), workdir=REPO).down()
    mesh = pd.read_csv(store.dir / "mesh.csv")
    assert list(mesh["event"]) == ["up", "cut", "heal", "restore"], mesh
    assert mesh["converged"].all(), mesh
    assert (mesh["converge_s"] < 30).all() and (mesh["polls"] >= 1).all(), mesh
    assert ((mesh["resolution_s"] > 0) & (mesh["resolution_s"] <= mesh["converge_s"] + 0.001)).all(), mesh
    flows = pd.read_csv(store.dir / "flows.csv")
    cut = flows[(flows.src == "sat01") & (flows.dst == "sat02")].iloc[0]
    assert cut["ok"] and cut["lost_percent"] < 30, cut  # the mesh carried sat01 -> sat02 over 2 hops during the cut
    paths = write_report(store.dir, flows, json.loads((store.dir / "host.json").read_text()),
                         pd.read_csv(store.dir / "tests.csv"))
    html = paths["report_html"].read_text()
    assert "Mesh convergence" in html and paths["mesh_csv"].exists()


# ---------------------------------------------------------------------------------------------- compose
@pytest.mark.docker
def test_compose_mesh_cut_forces_two_hops(need_docker, need_nft):
    swarm = make("mh-compose-4", "compose", NET[2])
    with meshed(swarm):
        check_cut_and_heal(swarm)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=io.swarm-emu.swarm=mh-compose-4"],
                          capture_output=True, text=True).stdout.split()
    assert not left, left


@pytest.fixture
def need_nft(caps):
    require("nftables", caps.nftables, "nft cannot create tables here")
