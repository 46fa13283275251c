"""The userspace link engine on the host for compose swarms, live (real Docker, real host iptables and NFQUEUE,
real swarm-linkd, plain ping): the default engine on a kernel without NetEm delays a link by the amount set; two
compose swarms at once hold distinct queue ranges and chains; a killed engine fails closed and comes back; `down`
removes the engine process and the host chains and leaves Docker's own rules; after a crash of `up` (kill -9 of
the CLI once the engine runs) and with the swarm's state gone, `swarm wipe NAME` removes everything.

Tolerances: plain ping from inside the sender container; the engine holds packets on the host before they reach
the receiver, so the kernel stamps the real arrival: RTT of a 100 ms link each way is 200 ms + scheduling on a
shared 2-core host: [198, 240] ms for each reply.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from compose.render import container_name
from swarm.runtime.backends.base import swarm_dir
from swarm.runtime.backends.compose import hostengine as he
from swarm.runtime.probe import capabilities

from conftest import REPO, require, wait_until

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.serial]  # asserts on the host's whole mangle table


@pytest.fixture
def need_host_engine(caps):
    require("docker", caps.docker and bool(caps.compose), "no Docker daemon or Compose CLI answered")
    require("root", caps.root, "not running as root")
    require("nfqueue", caps.nfqueue, "iptables NFQUEUE target refused")
    require("swarm-linkd", bool(caps.linkd), "swarm-linkd not built (make setup)")
    require("bridge_nf", caps.bridge_nf, "iptables does not see bridged frames (br_netfilter)")
    if caps.sch_netem:
        pytest.skip("this kernel has NetEm: compose uses kernel NetEm by default, not the host engine")


def cli(*args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                         timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    if check:
        assert res.returncode == 0, res.stderr + res.stdout
    return res


def spec(tmp_path, name: str, third: int, nodes: int = 3, links: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nnodes: {nodes}\nbackend: compose\n"
                    f"networks:\n  isl: {{subnet: 10.{third}.0.0/24}}\n  ground: {{subnet: 10.{third}.1.0/24}}\n"
                    + links)
    return str(path)


def rtts(swarm: str, src: str, dst_ip: str, count: int = 5, interval: float = 0.2, wait: float = 2) -> list[float]:
    res = subprocess.run(["docker", "exec", container_name(swarm, src), "ping", "-n", "-c", str(count), "-i",
                          str(interval), "-W", str(wait), dst_ip], capture_output=True, text=True, timeout=120)
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", res.stdout)]


def isl_ip(third: int, index: int) -> str:
    return f"10.{third}.0.{index + 1}"


def mangle() -> str:
    return subprocess.run(["iptables-save", "-t", "mangle"], capture_output=True, text=True).stdout


def filter_rules() -> list[str]:
    return subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout.splitlines()


FIREWALL_COMMANDS = {"iptables", "iptables-nft", "iptables-restore", "iptables-nft-restore", "iptables-save",
                     "ip6tables", "nft"}


def firewall_commands_running() -> list[int]:
    """Pids of iptables/nft processes on the host (read from /proc)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                comm = open(f"/proc/{pid}/comm").read().strip()
            except OSError:
                continue
            if comm in FIREWALL_COMMANDS:
                found.append(int(pid))
    return found


def wait_reachable(swarm: str, src: str, dst_ip: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not rtts(swarm, src, dst_ip, count=1, wait=1) and time.monotonic() < deadline:
        time.sleep(0.5)


def test_default_engine_delays_on_the_host_fails_closed_and_down_cleans(need_host_engine, tmp_path):
    name, third = "hostengine-live", 132
    cli("down", name)
    docker_rules = filter_rules()
    try:
        cli("up", spec(tmp_path, name, third))
        status = json.loads(cli("status", name, "--json").stdout)
        assert status["impairment_engine"] == "userspace"  # no --engine, no links: section: the default
        assert "on the host" in status["userspace_engine"]
        sat02 = isl_ip(third, 2)
        wait_reachable(name, "sat01", sat02)
        res = cli("impair", name, "--between", "sat01", "sat02", "--delay", "100ms")
        assert "engine userspace" in res.stdout
        got = rtts(name, "sat01", sat02, count=10)
        assert len(got) >= 9 and all(198 <= r <= 240 for r in got), got
        got = rtts(name, "sat01", isl_ip(third, 3), count=3)  # an unimpaired link: no engine on its way
        assert got and max(got) < 100, got  # undelayed: under half the 200 ms RTT, at any load

        # no binary in the node image: the engine is one process on the host, named by its swarm in `ps`
        assert subprocess.run(["docker", "exec", container_name(name, "sat02"), "test", "-e",
                               "/usr/local/bin/swarm-linkd"]).returncode != 0
        engines = he.host_engines(name)
        assert sorted(loop for _, loop in engines.values()) == [False, True], engines
        chains = he.our_chains(mangle(), name)
        assert chains and all(c.startswith(he.chain_prefix(name)) for c in chains)
        record = json.loads((swarm_dir(REPO, name) / he.STATE_FILE).read_text())
        assert record["tag"] == he.swarm_tag(name) and record["pids"]
        queues = he.queues_in_rules(mangle())
        assert {record["queue_base"] + 1, record["queue_base"] + 2} <= queues

        # the engine is killed: its links fail closed (nothing passes undelayed), the restart loop brings it
        # back with its configuration
        engine = next(pid for pid, (_, loop) in engines.items() if not loop)
        os.kill(engine, signal.SIGKILL)
        assert rtts(name, "sat01", sat02, count=1, wait=0.3) == []
        wait_until(lambda: rtts(name, "sat01", sat02, count=1, wait=1), 30, "the restarted engine passing sat01 -> sat02")
        got = rtts(name, "sat01", sat02)
        assert got and all(198 <= r <= 240 for r in got), got
        notes = json.loads(cli("impair", name, "--show", "--json").stdout)["notes"]
        assert any(n.startswith("sat02: its userspace link engine died and was restarted") for n in notes), notes

        # the engine and its restart loop are killed: still closed, `impair --show` names the silent engines,
        # and setting the link again starts a new engine
        for pid in he.host_engines(name):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        assert rtts(name, "sat01", sat02, count=2, wait=0.5) == []
        shown = json.loads(cli("impair", name, "--show", "--json").stdout)
        assert any("sat02: its userspace link engine is not answering" in n for n in shown["notes"]), shown["notes"]
        cli("impair", name, "--between", "sat01", "sat02", "--delay", "100ms", timeout=120)
        got = rtts(name, "sat01", sat02)
        assert got and all(198 <= r <= 240 for r in got), got

        # a restarted container has a new veth: the jump and the engine follow it
        cli("fault", name, "node", "sat02", "restart", timeout=180)
        wait_reachable(name, "sat01", sat02, timeout=30)
        got = rtts(name, "sat01", sat02)
        assert got and all(198 <= r <= 240 for r in got), got
        assert mangle().count(f"-j {he.chain_name(name, 2)}") == 1  # one jump, through the new port
    finally:
        res = cli("down", name, check=False)
    assert res.returncode == 0, res.stderr
    assert "host engine process" in res.stdout and "host chain" in res.stdout, res.stdout
    assert he.host_engines(name) == {}
    assert he.our_chains(mangle(), name) == [] and he.chain_prefix(name) not in mangle()
    assert filter_rules() == docker_rules  # Docker's own rules: as they were before the swarm
    reg = json.loads((he.QUEUE_DIR / "linkd-queues.json").read_text())
    assert name not in reg


def test_two_compose_swarms_hold_distinct_queues_and_chains(need_host_engine, tmp_path):
    a, b = "hostengine-two-a", "hostengine-two-b"
    links = "links:\n  default: {delay: %s}\n"
    try:
        for name, third, delay in ((a, 133, "50ms"), (b, 134, "100ms")):
            cli("down", name)
            cli("up", spec(tmp_path, name, third, nodes=2, links=links % delay))
        save = mangle()
        ra = json.loads((swarm_dir(REPO, a) / he.STATE_FILE).read_text())
        rb = json.loads((swarm_dir(REPO, b) / he.STATE_FILE).read_text())
        span_a = set(range(ra["queue_base"], ra["queue_base"] + ra["queues"]))
        span_b = set(range(rb["queue_base"], rb["queue_base"] + rb["queues"]))
        assert not span_a & span_b
        assert set(he.our_chains(save, a)).isdisjoint(he.our_chains(save, b)) and he.our_chains(save, b)
        assert len({s for s, _ in he.host_engines().values() if s in (a, b)}) == 2
        for name, third, lo, hi in ((a, 133, 98, 140), (b, 134, 198, 240)):
            wait_reachable(name, "sat01", isl_ip(third, 2), timeout=30)
            got = rtts(name, "sat01", isl_ip(third, 2))
            assert got and all(lo <= r <= hi for r in got), (name, got)
        cli("down", a)
        assert he.our_chains(mangle(), a) == [] and he.our_chains(mangle(), b)  # b keeps its chains and engine
        assert he.host_engines(a) == {} and he.host_engines(b)
        got = rtts(b, "sat01", isl_ip(134, 2))
        assert got and all(198 <= r <= 240 for r in got), got
    finally:
        cli("down", a, check=False)
        cli("down", b, check=False)
    assert he.host_engines(a) == {} and he.host_engines(b) == {}


def test_crash_during_up_then_wipe_without_state(need_host_engine, tmp_path):
    """kill -9 of the CLI once its swarm's engine runs (spec with delayed links), the swarm's state removed as
    well: `swarm wipe NAME` finds the engine by its label and the chains by their tag."""
    name = "hostengine-crash"
    cli("down", name)
    path = spec(tmp_path, name, 131, nodes=3, links="links:\n  default: {delay: 20ms}\n")
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "up", path], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not he.host_engines(name) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert he.host_engines(name), "the engine never started"
        proc.kill()
        proc.wait()
        # an iptables the killed `up` had started goes on as an orphan: wait for it to end (this file is `serial`,
        # so no other test runs iptables meanwhile), then look
        wait_until(lambda: not firewall_commands_running(), 30, "iptables/nft started by the killed up to end")
        shutil.rmtree(swarm_dir(REPO, name), ignore_errors=True)
        dry = cli("wipe", "--dry-run").stdout
        assert "host engine process" in dry and name in dry, dry
        res = cli("wipe", name)
        assert "host engine process" in res.stdout, res.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        cli("down", name, check=False)
    assert he.host_engines(name) == {}
    assert he.chain_prefix(name) not in mangle()
    names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert name not in names
    assert capabilities().docker


def test_clearing_the_last_condition_then_down_leaves_no_mangle_table(need_host_engine, tmp_path):
    """iptables-nft makes `table ip mangle` for the engine's first host rule. `impair --clear` removes the last
    chain while the swarm runs; `down` then finds no chain of ours, and the empty table stayed behind (found
    on the CI host after a full run). Where the table was not there before `up`, it must not be there after."""
    name = "hostengine-clear"
    if "table ip mangle" in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout:
        pytest.skip("the host already has an ip mangle table (someone else's or an earlier run's): cannot tell")
    try:
        cli("down", name)
        cli("up", spec(tmp_path, name, 137, nodes=2))
        cli("impair", name, "--between", "sat01", "sat02", "--delay", "10ms")
        assert he.our_chains(mangle(), name)
        cli("impair", name, "--clear")
        assert he.our_chains(mangle(), name) == []
    finally:
        cli("down", name, check=False)
    assert "table ip mangle" not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
