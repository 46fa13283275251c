"""Orbit steps on the nft engine through one long-lived `tc -batch` / `nft -i` process per node (issue 27 item
3), live on netns: the batch protocol against the real tools (a failed line attributed, the process kept; a
dead process started again), and an orbit plan applied by the driver with the nft engine pinned, checking every
change's lag from links.csv, the links' end state, and that each node's tc and nft were each one process for
the whole run (processes counted where they start, in the runner).

Goal for the lag (BENCHMARKS.md, 100 nodes): p99 <= 50 ms, a benchmark figure. Asserted here (9 nodes, a busy host):
every change before the next step is due, and the median within the goal.
Names batchapply-*, subnets from tests/alloc.py."""
from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from netem.orbits.planner import plan as make_plan
from netem.runtime.orbits import LinkTimelineDriver, links_csv_writer
from netem.spec.orbits import parse_orbits
from swarm.runtime.runner import Runner
from swarm.runtime.shell import NFT, TC, PersistentShell, one_line_nft
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

from conftest import REPO, assert_links_in_plans_last_state, require
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]

LAG_GOAL_MS = 50.0
SPEEDUP = 20  # the plan's 5 s steps every 250 ms of wall time
NS = "batchapply-sh"
ORBITS = {"duration": "10min", "step": "5s",
          "satellites": [{"walker": {"total": 8, "planes": 2, "phasing": 1, "altitude": 550, "inclination": 53}}],
          "ground_stations": [{"name": "gs01", "lat": 30, "lon": 20, "min_elevation": 0}],
          "links": {"isl": {"max_range": "4000km",
                            "rate": {"bandwidth": "50MHz", "snr": "10dB", "at": "2000km", "max": "200Mbit",
                                     "step": "5Mbit"}},
                    "ground": {"rate": "50Mbit"}}}


class CountingRunner(Runner):
    """The real runner, noting every process it starts (long-lived ones and one-shot commands)."""

    def __init__(self) -> None:
        self.popens: list[list[str]] = []
        self.runs: list[list[str]] = []

    def popen(self, argv, *, stdout=True):
        self.popens.append([str(a) for a in argv])
        return super().popen(argv, stdout=stdout)

    def run(self, argv, **kw):
        self.runs.append([str(a) for a in argv])
        return super().run(argv, **kw)


def tool(argv: list[str]) -> str:
    """'tc' or 'nft' when the command runs one of them in a node (after `ip netns exec NS`, maybe behind the
    process label's wrapper), else ''."""
    return next((a for a in argv[4:] if a in ("tc", "nft")), "") if argv[:3] == ["ip", "netns", "exec"] else ""


@pytest.fixture
def bare_ns(need_netns, caps):
    require("nftables", caps.nftables, "nft cannot create tables here")
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    subprocess.run(["ip", "-n", NS, "link", "add", "ba0", "type", "veth", "peer", "name", "ba1"], check=True)
    subprocess.run(["ip", "-n", NS, "link", "set", "ba0", "up"], check=True)
    try:
        yield NS
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def test_the_protocol_against_the_real_tools(bare_ns):
    runner = CountingRunner()
    tc = PersistentShell(runner, ["ip", "netns", "exec", bare_ns, *TC.argv], TC, timeout=30)
    nft = PersistentShell(runner, ["ip", "netns", "exec", bare_ns, *NFT.argv], NFT, timeout=30)
    try:
        assert tc.run(["qdisc add dev ba0 root handle 5eed: htb default 0",
                       "class add dev ba0 parent 5eed: classid 5eed:1 htb rate 10mbit ceil 10mbit"]).ok
        bad = "class change dev ba0 parent 5eed: classid 5eed:9 htb rate 1mbit ceil 1mbit"
        good = "class change dev ba0 parent 5eed: classid 5eed:1 htb rate 20mbit ceil 20mbit"
        res = tc.run([bad, good], check=False)  # -force: the good line after the bad one is still applied
        assert [line for line, _ in res.errors] == [bad] and "No such file" in res.errors[0][1]
        shown = subprocess.run(["ip", "netns", "exec", bare_ns, "tc", "class", "show", "dev", "ba0"],
                               capture_output=True, text=True, check=True).stdout
        assert "rate 20Mbit" in shown
        table = one_line_nft('table netdev swarm_emu {\n chain links_in {\n  type filter hook ingress device "ba0" '
                             'priority -500; policy accept;\n  ether saddr 02:00:0a:9d:00:02 counter drop\n }\n}\n')
        assert nft.run([table]).ok
        listed = subprocess.run(["ip", "netns", "exec", bare_ns, "nft", "list", "table", "netdev", "swarm_emu"],
                                capture_output=True, text=True, check=True).stdout
        assert "ether saddr 02:00:0a:9d:00:02 counter packets 0 bytes 0 drop" in listed
        broken = "add rule netdev swarm_emu links_in ether saddr nonsense drop"
        res = nft.run([broken, table], check=False)
        assert [line for line, _ in res.errors] == [broken] and res.errors[0][1].startswith("Error:")
        assert (tc.starts, nft.starts) == (1, 1) and len(runner.popens) == 2  # failures kept the processes
        assert tc.proc is not None
        tc.proc.kill()
        tc.proc.wait()
        assert tc.run([good]).ok and tc.starts == 2  # a dead process is started again with the next batch
    finally:
        tc.close()
        nft.close()


@pytest.fixture
def nft_swarm(need_netns, caps):
    require("nftables", caps.nftables, "nft cannot create tables here")
    require("htb", caps.htb, "no sch_htb: the nft engine's rates need it")
    runner = CountingRunner()
    spec = spec_from_dict({"name": "batchapply-orb", "backend": "netns", "links": {"engine": "nft"},
                           "groups": [{"prefix": "sat", "count": 8}, {"prefix": "gs", "count": 1}],
                           "networks": nets(NET[0])})
    swarm = Swarm(spec, runner=runner, workdir=REPO)
    swarm.down()
    swarm.up()
    try:
        yield swarm, runner
    finally:
        swarm.down()


def test_an_orbit_plan_through_one_process_per_node_and_tool(nft_swarm, tmp_path):
    swarm, runner = nft_swarm
    plan = make_plan(parse_orbits(ORBITS))
    changes = plan.timeline[plan.timeline["t_start"] > 0]
    assert len(changes) >= 10 and swarm.links.engine.name == "nft"
    csv_path = tmp_path / "links.csv"
    driver = LinkTimelineDriver(swarm.links, plan, speedup=SPEEDUP, on_rows=links_csv_writer(csv_path))
    try:
        driver.prepare()
        runs_before = len(runner.runs)
        summary = driver.run()
    finally:
        driver.close()
    # no tc or nft process per change once the clock started: only the long-lived ones, one per node and tool
    assert [a for a in runner.runs[runs_before:] if tool(a)] == []
    started = [(a[3], tool(a)) for a in runner.popens if tool(a)]
    assert len(started) == len(set(started)) == summary["shell_processes"]
    assert {t for _, t in started} == {"tc", "nft"} and summary["shell_batches"] > len(started)
    for argv in (a for a in runner.popens if tool(a)):  # ps names the swarm and node of each (issue 29 #12)
        assert any(x.endswith(f"swarm-emu:batchapply-orb/{argv[3].rsplit('_', 1)[-1]}") for x in argv), argv
    assert summary["tc_in_place_commands"] > 0 and summary["nft_commands"] > 0
    # every planned change has its row with its lag (applied on both nodes - due)
    links = pd.read_csv(csv_path)
    assert len(links) == len(changes) and links["ok"].all() and (links["applied_by"] == "driver").all()
    assert (links["lag_ms"] >= 0).all() and not links["coalesced"].any()
    # What the results need: each change on both nodes before the next step is due (the state a step's
    # measurements see is that step's). The p99 goal is the driver's speed on a quiet host, a benchmark: on a
    # loaded 2-core host one descheduled Python driver holds a change ~100 ms (seen: p99 104 ms, p50 2.6 ms at load
    # 9), so only the median is held to it here.
    step_ms = 1000 * parse_orbits(ORBITS).step / SPEEDUP
    lag = links["lag_ms"]
    assert lag.max() < step_ms, f"lag max {lag.max():.1f} ms for steps {step_ms:.0f} ms apart (p50 {lag.median():.1f})"
    assert lag.median() <= LAG_GOAL_MS, f"lag p50 {lag.median():.1f} ms (p99 {lag.quantile(0.99):.1f})"
    assert_links_in_plans_last_state(swarm, plan)
