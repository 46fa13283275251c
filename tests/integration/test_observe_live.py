"""Looking inside a running swarm (issue 28), live on the netns backend with the userspace link engine (the
delay/loss engine of this host): `swarm capture` of a lossy link read back with tshark, bad input, Ctrl-C.

Every check runs the real CLI (`python -m swarm`) against real namespaces, swarm-linkd, dumpcap and tshark.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm.runtime.backends.netns import node_ns
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

from conftest import REPO, require

pytestmark = [pytest.mark.root, pytest.mark.slow]


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def dumpcaps_writing(path: Path) -> list[str]:
    """Command lines of processes writing into `path`'s folder (our dumpcaps), from /proc."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "dumpcap" in cmd and str(path.parent) in cmd:
                found.append(cmd)
    return found


@pytest.fixture
def lossy(caps, need_netns):
    require("swarm-linkd", bool(caps.linkd), "swarm-linkd not built (make setup)")
    require("nfqueue", caps.nfqueue, "iptables NFQUEUE target refused")
    require("dumpcap", bool(shutil.which("dumpcap") and shutil.which("tshark")), "wireshark-common/tshark missing")
    data = {"name": "obs-cap", "nodes": 2, "backend": "netns",
            "networks": {"isl": {"subnet": "10.140.0.0/24"}, "ground": {"subnet": "10.141.0.0/24"}},
            "links": {"engine": "userspace", "default": {"loss": "10%"}}}
    swarm = Swarm(spec_from_dict(data), workdir=REPO)
    swarm.down()
    swarm.up()
    yield swarm
    swarm.down()


def per_interface(path: Path, display_filter: str) -> dict[int, int]:
    res = subprocess.run(["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", "frame.interface_id"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    counts: dict[int, int] = {}
    for line in res.stdout.split():
        counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


def test_capture_of_a_lossy_link_both_ends_until_ctrl_c(lossy, tmp_path):
    out = tmp_path / "l12.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "capture", "obs-cap", "--link", "sat01", "sat02", "-o",
                             str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not dumpcaps_writing(out) or len(dumpcaps_writing(out)) < 2:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "dumpcaps did not start"
        time.sleep(0.1)
    time.sleep(1.0)  # both opened their interface (the CLI says so on stderr once they have)
    dst = lossy.node("sat02").isl_ip
    ping = subprocess.run(["ip", "netns", "exec", node_ns("obs-cap", "sat01"), "ping", "-q", "-n", "-c", "1000",
                           "-i", "0.004", "-W", "1", dst], capture_output=True, text=True, timeout=120)
    assert "1000 packets transmitted" in ping.stdout, ping.stdout + ping.stderr
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: the capture stops and leaves a readable file
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "capturing on sat01 eth1, sat02 eth1" in stderr
    assert dumpcaps_writing(out) == []
    assert list(tmp_path.iterdir()) == [out]  # the two ends' temporary files are gone
    requests = per_interface(out, "icmp.type == 8")
    assert requests.get(0) == 1000, requests  # every echo request the sender sent, at its egress
    ratio = requests.get(1, 0) / 1000
    assert 0.85 <= ratio <= 0.95, f"ingress/egress = {ratio} with 10 % loss on the link"  # +-5 sigma at n=1000
    # the reverse direction is not in a directed capture
    assert per_interface(out, "icmp.type == 0") == {}
    info = subprocess.run(["capinfos", str(out)], capture_output=True, text=True, timeout=60).stdout
    assert "Number of interfaces in file: 2" in info and "interface 0: sat01 isl egress" in info
    assert f"wrote {out}" in stdout.replace("\n", "")


def test_capture_bad_input_one_line_exit_2_nothing_left(lossy, tmp_path):
    cases = [
        (["--node", "sat09"], "sat09"),
        (["--link", "sat01", "sat07"], "sat07"),
        (["--link", "sat01", "sat01"], "sat01"),
        (["--node", "sat01", "--iface", "eth9"], "eth9"),
    ]
    for args, named in cases:
        res = cli("capture", "obs-cap", *args, "-o", str(tmp_path / "x.pcapng"), "--duration", "1")
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and named in res.stderr, res.stderr
    for bad in (tmp_path / "missing" / "x.pcapng", Path("/proc/obs-x.pcapng"), tmp_path):
        res = cli("capture", "obs-cap", "--node", "sat01", "-o", str(bad), "--duration", "1")
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "-o" in res.stderr, res.stderr
    res = cli("capture", "obs-nosuch", "--node", "sat01", "-o", str(tmp_path / "y.pcapng"))
    assert res.returncode == 2 and "obs-nosuch" in res.stderr
    assert list(tmp_path.iterdir()) == [] and dumpcaps_writing(tmp_path / "x") == []


def test_capture_of_one_node_for_a_duration(lossy, tmp_path):
    out = tmp_path / "sat01-ground.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "capture", "obs-cap", "--node", "sat01", "--iface",
                             "ground", "--duration", "3", "-o", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    subprocess.run(["ping", "-q", "-c", "5", "-i", "0.1", lossy.node("sat01").ground_ip], capture_output=True, timeout=30)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    counts = per_interface(out, "icmp")
    assert counts.get(0, 0) >= 10, counts  # 5 requests in, 5 replies out (ground: no link conditions)
