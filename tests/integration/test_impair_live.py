"""Link impairments and faults, live: loss through nftables measured with iperf3 UDP, rate through HTB measured
with TCP, cut / partition / heal by reachability, node stop / kill / pause / restart, the fault timeline of a
sweep, and teardown. netns backend, plus the compose backend for loss and a restart (whose container comes
back with a new network namespace, so the conditions must be set again). Kernel NetEm tests run where
sch_netem exists and skip here.

Loss is set while the UDP flow runs (iperf3 never retransmits its UDP setup handshake, esnet/iperf#862: on a
lossy link a flow fails to start with that probability, after a 30 s timeout), and measured from the
receiver's intervals after the change; this is also the run-time change the issue asks for.

Tolerances (stated, and why):
- loss: |measured - set| <= 4 percentage points. 3.5 s of UDP at 5 Mbit/s is ~1,500 datagrams; the binomial
  standard deviation of the measured loss is 0.8 pp at 10 % and 1.2 pp at 30 %, so 4 pp is > 3 sigma.
- rate: TCP goodput / set rate in [0.90, 1.02]. HTB counts whole frames (payload + 66 bytes of TCP/IP/Ethernet
  headers per 1448-byte segment), so goodput tops out at 1448/1514 = 0.956 of the rate.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import NamedTuple

import pytest

from swarm.runtime.swarm import Swarm
from netem.spec.links import impairment
from experiments.traffic.tools.iperf3.parse import parse_client_json
from swarm.spec.model import spec_from_dict

from conftest import REPO, listening, require, wait_until
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]
LOSS_TOLERANCE_PP = 4.0
RATE_BOUNDS = (0.90, 1.02)
UDP_SETUP_ERRORS = ("stream socket", "cookie")  # iperf3's UDP handshake has no retransmission (esnet/iperf#862)


def run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def make(name: str, backend: str, third: int, n: int = 3, links: dict | None = None, engine: str | None = None) -> Swarm:
    """A swarm of `n` nodes; `engine` pins the link engine (these tests exercise nft, and netem where named;
    the userspace engine, preferred over nft on a host without sch_netem, has tests of its own)."""
    data = {"name": name, "nodes": n, "backend": backend,
            "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}}}
    if links or engine:
        data["links"] = {**(links or {}), **({"engine": engine} if engine else {})}
    return Swarm(spec_from_dict(data), workdir=REPO)


@pytest.fixture
def need_nft(caps):
    require("nftables", caps.nftables, "nft cannot create tables here")


@pytest.fixture
def netns_swarm(need_netns, need_iperf3, need_nft):
    swarms = []

    def factory(name: str, third: int, **kw) -> Swarm:
        swarm = make(name, "netns", third, engine="nft", **kw)
        swarm.down()
        swarms.append(swarm)
        swarm.up()
        return swarm

    try:
        yield factory
    finally:
        for swarm in swarms:
            swarm.down()


_port = iter(range(5400, 6000))


def iperf(swarm: Swarm, src: str, dst: str, *extra: str, seconds: int = 3, attempts: int = 5):
    """One iperf3 flow src -> dst (fresh one-off server per attempt); retried only when iperf3's UDP setup
    handshake itself was lost, which it never retransmits."""
    dst_ip = swarm.node(dst).isl_ip
    for _ in range(attempts):
        port = str(next(_port))
        swarm.exec(dst, ["iperf3", "-s", "-1", "-D", "-J", "-B", dst_ip, "-p", port])
        wait_until(lambda: listening(swarm, dst, int(port)), 30, f"iperf3 server on {dst}:{port}")
        res = swarm.exec(src, ["iperf3", "-c", dst_ip, "-p", port, "-B", swarm.node(src).isl_ip, "-t", str(seconds),
                               "-J", "--get-server-output", *extra], check=False, timeout=seconds + 60)
        flow = parse_client_json(res.stdout)
        if flow.ok or not any(e in flow.error for e in UDP_SETUP_ERRORS):
            return flow
    return flow


def udp_rcvbuf_drops(swarm: Swarm, node: str) -> int:
    """Datagrams `node`'s kernel dropped because a UDP socket's receive buffer was full (/proc/net/snmp
    RcvbufErrors, per network namespace): losses of a starved receiver on a loaded host, not of the link."""
    lines = [ln.split() for ln in swarm.exec(node, ["cat", "/proc/net/snmp"]).stdout.splitlines() if ln.startswith("Udp:")]
    return int(dict(zip(lines[0][1:], lines[1][1:]))["RcvbufErrors"])


class Loss(NamedTuple):
    """What a UDP flow says of a link's loss, in %: between `low` and `high` (see udp_loss)."""

    low: float
    high: float

    def near(self, pct: float, tolerance: float) -> bool:
        """The link's loss `pct` is within `tolerance` points of what was measured."""
        return self.low - tolerance <= pct <= self.high + tolerance


def udp_loss(swarm: Swarm, src: str, dst: str, change=None, seconds: int = 8) -> Loss:
    """Loss % of a 5 Mbit/s UDP flow src -> dst. With `change` (a callable), the flow starts on the link as
    it is, `change()` runs 1 s in, and the loss is counted over the receiver's intervals from 1.5 s on.

    The link's loss is what the engine dropped; a receiver starved of CPU on a loaded host drops more at its
    socket (a CI run measured 34.5 % for 30 %), which iperf3 counts as lost too. Those drops are counted by the
    receiver's kernel over the whole flow, but when they happened is not known: taken off entirely they make the
    figure low by those that fell before 1.5 s (a stress run: 5.2 % for 10 %, 139 drops taken off), left in they make
    it high by those in the counted intervals. So the link's loss lies between the two, `low` and `high` (equal
    when the receiver dropped nothing), and a test asks whether its condition lies within its tolerance of that
    range. Without `change` the same flow on the link as it is, counted the same way: a stress run measured 3.9 % on
    a link with no condition (`< 1` failed) when the plain iperf3 figure still held the receiver's own drops."""
    change = change or (lambda: None)
    dst_ip, port = swarm.node(dst).isl_ip, str(next(_port))
    swarm.exec(dst, ["iperf3", "-s", "-1", "-D", "-J", "-B", dst_ip, "-p", port])
    wait_until(lambda: listening(swarm, dst, int(port)), 30, f"iperf3 server on {dst}:{port}")
    argv = ["iperf3", "-c", dst_ip, "-p", port, "-B", swarm.node(src).isl_ip, "-u", "-b", "5M", "-t", str(seconds),
            "-i", "0.5", "-J", "--get-server-output"]
    drops_before = udp_rcvbuf_drops(swarm, dst)
    proc = subprocess.Popen(swarm.backend.exec_prefix(swarm.name, src) + argv, stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    change()
    out, _ = proc.communicate(timeout=seconds + 60)
    receiver_drops = udp_rcvbuf_drops(swarm, dst) - drops_before
    flow = parse_client_json(out)
    assert flow.ok and flow.intervals_from_receiver, flow.error
    after = [iv for iv in flow.intervals if iv.start >= 1.5]
    packets, lost = sum(iv.packets for iv in after), sum(iv.lost_packets for iv in after)
    assert packets > 1000, packets
    if receiver_drops:
        print(f"udp_loss: {receiver_drops} datagrams dropped at {dst}'s full socket buffer, not by the link "
              f"(counted lost {lost} of {packets})")
    return Loss(100.0 * max(lost - receiver_drops, 0) / packets, 100.0 * lost / packets)


def tcp_rate(swarm: Swarm, src: str, dst: str) -> float:
    flow = iperf(swarm, src, dst)
    assert flow.ok, flow.error
    return flow.bits_per_second


def wait_for(predicate, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def node_tables(swarm: Swarm, node: str) -> str:
    return swarm.exec(node, ["nft", "list", "tables"]).stdout


def node_root_qdisc(swarm: Swarm, node: str) -> dict:
    iface = swarm.links.isl_iface(swarm.node(node))
    return json.loads(swarm.exec(node, ["tc", "-j", "qdisc", "show", "dev", iface, "root"]).stdout)[0]


def host_has_ours() -> bool:
    """Anything of the framework's impairments in the host namespace (there must never be)."""
    return "swarm_emu" in run(["nft", "list", "tables"]) or "5eed:" in run(["tc", "qdisc", "show"])


# ------------------------------------------------------------------------------------------ netns
def test_loss_through_nft_measured_with_udp(netns_swarm):
    swarm = netns_swarm("imp-loss", NET[0])
    ctl = swarm.links
    assert ctl.engine.name in ("nft", "netem")
    measured = {}
    for pct in (10, 30):
        change = lambda: ctl.impair(impairment(loss=f"{pct}%"), between=["sat01", "sat02"], direction="a->b")  # noqa: E731
        measured[pct] = udp_loss(swarm, "sat01", "sat02", change)
        assert measured[pct].near(pct, LOSS_TOLERANCE_PP), measured
        ctl.impair(impairment(loss=0), between=["sat01", "sat02"])
    assert udp_loss(swarm, "sat02", "sat01").low < 1  # directed: the other way is untouched
    assert udp_loss(swarm, "sat01", "sat03").low < 1
    # TCP sees per-packet loss, not loss of 64 KB offload bursts (the sender segments while its link is lossy)
    ctl.impair(impairment(loss="2%"), between=["sat01", "sat02"], direction="a->b")
    assert "gso_max_segs 1 " in swarm.exec("sat01", ["ip", "-d", "link", "show", "eth1"]).stdout
    assert tcp_rate(swarm, "sat01", "sat02") < 1e9
    ctl.clear()
    assert "swarm_emu" not in node_tables(swarm, "sat02")
    assert "gso_max_segs 65535 " in swarm.exec("sat01", ["ip", "-d", "link", "show", "eth1"]).stdout
    assert not host_has_ours()  # nothing on the host: everything lives in the nodes


def test_rate_through_htb_measured_with_tcp(netns_swarm):
    swarm = netns_swarm("imp-rate", NET[2], links={"overrides": [{"between": ["sat01", "sat02"], "rate": "20Mbit"}]})
    ratio = tcp_rate(swarm, "sat01", "sat02") / 20e6
    assert RATE_BOUNDS[0] <= ratio <= RATE_BOUNDS[1], ratio
    assert node_root_qdisc(swarm, "sat01")["handle"] == "5eed:"
    # changing the loss keeps the rate (the rate is not re-set by a change of another parameter)
    swarm.links.impair(impairment(loss="0.5%"), between=["sat01", "sat02"])
    assert [r.configured for r in swarm.links.rows()][:1] == ["loss 0.5% rate 20Mbit"]
    swarm.links.impair(impairment(loss=0), between=["sat01", "sat02"])
    ratio = tcp_rate(swarm, "sat01", "sat02") / 20e6
    assert RATE_BOUNDS[0] <= ratio <= RATE_BOUNDS[1], ratio
    assert tcp_rate(swarm, "sat01", "sat03") > 200e6  # other links unshaped
    swarm.links.clear()
    assert node_root_qdisc(swarm, "sat01")["kind"] == "noqueue"


def test_cut_partition_and_heal_by_reachability(netns_swarm):
    swarm = netns_swarm("imp-cut", NET[4], n=4)
    ctl = swarm.links
    ctl.cut("sat01", "sat03")
    failing = {(s, d) for s, row in swarm.reachability().items() for d, ok in row.items() if not ok}
    assert failing == {("sat01", "sat03"), ("sat03", "sat01")}
    ctl.heal()
    ctl.partition([["sat01", "sat02"], ["sat03", "sat04"]])
    matrix = swarm.reachability()
    for s, row in matrix.items():
        for d, ok in row.items():
            assert ok == ((s in ("sat01", "sat02")) == (d in ("sat01", "sat02"))), (s, d)
    ctl.heal("sat01", "sat03")  # one link back, the rest of the partition stays
    matrix = swarm.reachability()
    assert matrix["sat01"]["sat03"] and matrix["sat03"]["sat01"] and not matrix["sat01"]["sat04"]
    ctl.heal()
    assert all(all(row.values()) for row in swarm.reachability().values())


def test_a_frame_with_another_nodes_source_mac_does_not_redirect_its_traffic(netns_swarm):
    """A corrupting link can flip a bit of a frame's source MAC into another node's (sat03 ...:04 and sat04
    ...:05 differ by one bit). A learning switch would then send that node's frames to the wrong port until the
    entry aged out (CI, kernel NetEm corrupt 10 %: 93 % of pings lost); the switch's node ports do not learn."""
    swarm = netns_swarm("imp-fdb", NET[8], n=4)
    n3, n4 = swarm.node("sat03"), swarm.node("sat04")
    for here, there in ((n3, n4), (n4, n3)):  # no ARP from sat04 that would re-teach a learning switch
        swarm.exec(here.name, ["ip", "neigh", "replace", there.isl_ip, "lladdr", there.isl_mac, "nud", "permanent",
                               "dev", "eth1"])

    def replies() -> int:
        out = swarm.exec("sat03", ["ping", "-n", "-c", "5", "-i", "0.2", "-W", "1", n4.isl_ip], check=False).stdout
        return int(re.search(r"(\d+) received", out).group(1))

    assert replies() == 5
    spoof = ("import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(('eth1', 0)); "
             f"s.send(bytes.fromhex('ffffffffffff{n4.isl_mac.replace(':', '')}88b5') + bytes(46))")
    run(["ip", "netns", "exec", "swarm-emu_imp-fdb_sat03", sys.executable, "-c", spoof])
    assert replies() == 5


def test_node_faults_and_restart(netns_swarm):
    swarm = netns_swarm("imp-node", NET[6], links={"overrides": [{"node": "sat02", "loss": "1%"}]})
    ctl = swarm.links
    states = lambda: swarm.backend.node_states(swarm.name)  # noqa: E731
    pid = int(run(["ip", "netns", "pids", "swarm-emu_imp-node_sat02"]).split()[0])
    proc_state = lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]  # noqa: E731
    ctl.node_action("sat02", "pause")
    assert wait_for(lambda: proc_state() == "T"), proc_state()
    ctl.node_action("sat02", "unpause")
    assert wait_for(lambda: proc_state() in ("S", "R")), proc_state()
    ctl.node_action("sat02", "stop")
    assert states()["sat02"] == "exited" and not swarm.reachability()["sat01"]["sat02"]
    assert ctl.summary()["node_faults"] == {"sat02": "stop"}
    ctl.node_action("sat02", "restart")
    assert states()["sat02"] == "running"
    assert all(all(row.values()) for row in swarm.reachability().values())
    assert "sat01->sat02 loss 1%" in swarm.exec("sat02", ["nft", "list", "ruleset"]).stdout
    ctl.node_action("sat02", "kill")
    assert states()["sat02"] == "exited"
    ctl.node_action("sat02", "restart")
    new_pid = int(run(["ip", "netns", "pids", "swarm-emu_imp-node_sat02"]).split()[0])
    assert new_pid != pid and ctl.summary()["node_faults"] == {}
    assert swarm.reachability()["sat03"]["sat02"]


def test_sweep_fault_timeline_recorded_and_plotted(need_netns, need_iperf3, need_nft, tmp_path):
    import pandas as pd

    from experiments.traffic.model import experiment_from_dict
    from analysis.traffic import write_report
    from experiments.store import ResultsStore, host_facts
    from experiments.traffic.run import run_sweep

    exp = experiment_from_dict({
        "name": "imp-tl", "sizes": [3], "protocols": ["udp"], "rates": ["2M"], "duration": "5s", "settle": 0,
        "backend": "netns", "pattern": "ring",
        "swarm": {"networks": nets(NET[8])},
        "links": {"default": {"loss": "0.5%"}, "engine": "nft"},
        "faults": [{"at": "1.5s", "cut": ["sat01", "sat02"]}, {"at": "3s", "heal": "all"},
                   {"at": "3.5s", "impair": {"between": ["sat02", "sat03"], "direction": "a->b", "loss": "50%"}}]})
    store = ResultsStore.create(tmp_path, exp, host_facts())
    try:
        run_sweep(exp, store)
    finally:
        Swarm(exp.swarm_spec(3), workdir=REPO).down()
    faults = pd.read_csv(store.dir / "faults.csv")
    assert list(faults["kind"]) == ["cut", "heal", "impair"] and faults["ok"].all(), faults
    late = faults["offset_s"] - faults["at_s"]
    assert ((late >= 0) & (late < 0.5)).all(), faults
    flows = pd.read_csv(store.dir / "flows.csv")
    def said(flow) -> str:  # what a failure needs to be understood: the flow's error and timing vs the release
        return (f"{flow.src}->{flow.dst} ok={flow.ok} error={flow.error!r} lost={flow.lost_percent} "
                f"start+{flow.start_ts - flow.release_ts:.3f}s exit+{flow.exit_ts - flow.release_ts:.3f}s "
                f"raw: {sorted(p.name for p in store.dir.glob('raw/*/*'))}")

    cut_flow = flows[(flows.src == "sat01") & (flows.dst == "sat02")].iloc[0]
    assert 15 < cut_flow["lost_percent"] < 50, said(cut_flow)  # 1.5 s of 5 cut (30 %) plus 0.5 % loss
    lossy = flows[(flows.src == "sat02") & (flows.dst == "sat03")].iloc[0]
    assert 10 < lossy["lost_percent"] < 35, said(lossy)  # 50 % over the last 1.5 s of 5 (15 %)
    host = json.loads((store.dir / "host.json").read_text())
    assert host["impairment_engine"] == "nft"
    paths = write_report(store.dir, flows, host, pd.read_csv(store.dir / "tests.csv"))
    assert paths["faults_n003-udp-2Mbps-r1"].exists()
    assert "Faults: throughput and loss around each fault" in paths["report_html"].read_text()


def test_cli_impair_and_fault(netns_swarm):
    import sys

    swarm = netns_swarm("imp-cli", NET[10])

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                              timeout=120)

    res = cli("impair", swarm.name, "--between", "sat01", "sat02", "--loss", "2%")
    assert res.returncode == 0, res.stderr
    res = cli("impair", swarm.name, "--between", "sat01", "sat02", "--rate", "10M")
    shown = json.loads(cli("impair", swarm.name, "--show", "--json").stdout)
    assert shown["engine"] == "nft"
    assert {(r["src"], r["dst"]): r["configured"] for r in shown["links"]} == {
        ("sat01", "sat02"): "loss 2% rate 10Mbit", ("sat02", "sat01"): "loss 2% rate 10Mbit"}
    res = cli("impair", swarm.name, "--between", "sat01", "sat02", "--delay", "100ms")
    assert res.returncode == 2 and "sch_netem" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = cli("impair", swarm.name, "--between", "sat01", "sat09", "--loss", "1%")
    assert res.returncode == 2 and "'sat09'" in res.stderr
    res = cli("impair", swarm.name, "--all", "--loss", "150%")
    assert res.returncode == 2 and "150%" in res.stderr
    assert cli("fault", swarm.name, "cut", "sat01", "sat03").returncode == 0
    assert not swarm.reachability()["sat01"]["sat03"]
    res = cli("fault", swarm.name, "partition", "sat01,sat02", "sat02,sat03")
    assert res.returncode == 2 and "overlap" in res.stderr
    assert cli("fault", swarm.name, "heal").returncode == 0
    assert cli("fault", swarm.name, "node", "sat03", "restart").returncode == 0
    assert swarm.reachability()["sat01"]["sat03"]
    status = json.loads(cli("status", swarm.name, "--json").stdout)
    assert status["impairment_engine"] == "nft"
    assert cli("impair", swarm.name, "--clear").returncode == 0
    assert "swarm_emu" not in node_tables(swarm, "sat01")


def test_netem_commands_are_accepted_by_tcs_parser(need_netns):
    """tc parses netem options in userspace before the kernel sees the qdisc: here (no sch_netem) a command is
    right when the only complaint is the kernel's 'qdisc kind is unknown'."""
    from netem.tc import plan_netem

    cmds = plan_netem("eth1", {"02:42:0a:01:00:03": impairment(delay="250ms", jitter="10ms", jitter_distribution="normal",
                                                      loss="1%", loss_correlation="25%", corrupt="0.1%",
                                                      duplicate="1%", reorder="5%", rate="10M"),
                               "02:42:0a:01:00:04": impairment(up=False)})
    script = "ip link add eth1 type veth peer name p1 && ip link set eth1 up\n" + "\n".join(
        " ".join(c) + " 2>&1 || true" for c in cmds)
    out = subprocess.run(["unshare", "--net", "--", "sh", "-ec", script], capture_output=True, text=True).stdout
    assert "Usage" not in out and "What is" not in out, out
    assert out.count("Specified qdisc kind is unknown") in (0, 2), out


# Kernel NetEm itself is tested where the kernel has it: inside the kernel lab's guest
# (tests/kernel_lab/test_kernel_netem.py: one-way delay, every condition, a live delay change that keeps a
# link's loss, --clear), so CI exercises it on hosts without sch_netem too.


# ----------------------------------------------------------------------------------------- compose
@pytest.mark.docker
def test_compose_loss_and_restart_reapplies_conditions(need_docker, need_iperf3, need_nft):
    swarm = make("imp-compose", "compose", NET[12], engine="nft")  # the nft table in the container (the compose default is now the host engine: test_hostengine_live)
    swarm.down()
    try:
        swarm.up()
        set_loss = lambda: swarm.links.impair(impairment(loss="30%"), between=["sat01", "sat02"], direction="a->b")  # noqa: E731
        loss = udp_loss(swarm, "sat01", "sat02", set_loss)
        assert loss.near(30, LOSS_TOLERANCE_PP), loss
        swarm.links.node_action("sat02", "restart")  # a new network namespace: the table must come back
        assert "sat01->sat02 loss 30%" in swarm.exec("sat02", ["nft", "list", "ruleset"]).stdout
        addrs = swarm.exec("sat02", ["ip", "-o", "-4", "addr"]).stdout
        assert f"10.{NET[12]}.0.3/24" in addrs and f"10.{NET[13]}.0.3/24" in addrs
        swarm.links.impair(impairment(loss=0), between=["sat01", "sat02"])
        loss = udp_loss(swarm, "sat01", "sat02", set_loss)  # set again, live, after the restart
        assert loss.near(30, LOSS_TOLERANCE_PP), loss
        swarm.links.impair(impairment(loss=0), between=["sat01", "sat02"])
        swarm.links.node_action("sat03", "stop")
        assert swarm.backend.node_states(swarm.name)["sat03"] == "exited"
        assert not swarm.reachability()["sat01"]["sat03"]
        swarm.links.node_action("sat03", "restart")
        matrix = swarm.reachability()
        assert all(all(row.values()) for row in matrix.values()), matrix
    finally:
        swarm.down()
    assert not run(["docker", "ps", "-aq", "--filter", "label=io.swarm-emu.swarm=imp-compose"]).split()
