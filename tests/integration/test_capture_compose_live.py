"""`swarm capture` killed (issue 40, item 7), live on compose with real Docker, nsenter and dumpcap: after
SIGKILL of the capture its dumpcaps end with it (they used to run until `down`) and the next capture into the
same folder removes the temporary folder the killed one left; SIGHUP (the terminal gone) stops it like
Ctrl-C: the file is written, no dumpcap and no temporary folder left. One 2-node swarm `rel-ccap` for all;
subnets from tests/alloc.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloc import nets, octets
from conftest import REPO, require

NET = octets(__file__)  # this file's subnets (tests/alloc.py)
NAME = "rel-ccap"

pytestmark = [pytest.mark.root, pytest.mark.slow]


def swarm(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def dumpcaps() -> list[int]:
    """Pids of the dumpcaps the framework runs for this file's swarm (shown as `dumpcap swarm-emu:rel-ccap/<node>`)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].startswith(f"dumpcap swarm-emu:{NAME}/".encode()):
                found.append(int(pid))
    return found


@pytest.fixture(scope="module")
def running(caps, tmp_path_factory):
    require("docker", caps.docker and bool(caps.compose), "no Docker daemon or Compose CLI answered")
    require("root", caps.root, "needs root (nsenter into the containers)")
    require("dumpcap", bool(shutil.which("dumpcap") and shutil.which("capinfos")), "wireshark-common/tshark missing")
    import yaml

    spec = tmp_path_factory.mktemp("ccap") / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": NAME, "nodes": 2, "backend": "compose", "networks": nets(NET[0])}))
    swarm("down", NAME)
    try:
        res = swarm("up", str(spec), timeout=900)
        assert res.returncode == 0, res.stderr[-2000:]
        yield NAME
    finally:
        swarm("down", NAME)
    assert dumpcaps() == []


def start_capture(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "capture", NAME, "--link", "sat01", "sat02", "-o", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # "capturing on ...": both dumpcaps have opened their interface
    assert "capturing on" in line, line + (proc.stderr.read() if proc.poll() is not None else "")
    assert len(dumpcaps()) == 2
    return proc


def gone_within(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while dumpcaps() and time.monotonic() < deadline:
        time.sleep(0.1)
    return dumpcaps() == []


def test_sigkill_of_a_capture_ends_its_dumpcaps_and_the_next_capture_removes_its_folder(running, tmp_path):
    proc = start_capture(tmp_path / "killed.pcapng")
    proc.kill()
    proc.communicate(timeout=30)
    left = dumpcaps()
    assert gone_within(5.0), f"dumpcaps {left} still run after SIGKILL of their capture"
    stale = [p.name for p in tmp_path.iterdir()]
    assert len(stale) == 1 and stale[0].startswith("swarm-capture-"), stale  # what dumpcap wrote until the kill
    res = swarm("capture", NAME, "--node", "sat02", "--duration", "1", "-o", str(tmp_path / "next.pcapng"), timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["next.pcapng"]
    # a folder of that name that is not a killed capture's is left alone: a live pid, or files of other names
    mine = tmp_path / f"swarm-capture-{os.getpid()}-keep"
    mine.mkdir()
    other = tmp_path / "swarm-capture-1-notes"
    other.mkdir()
    (other / "notes.txt").write_text("not a capture's")
    res = swarm("capture", NAME, "--node", "sat02", "--duration", "1", "-o", str(tmp_path / "third.pcapng"), timeout=120)
    assert res.returncode == 0, res.stderr
    assert mine.is_dir() and (other / "notes.txt").exists()


def test_sighup_of_a_capture_writes_the_file_and_leaves_nothing(running, tmp_path):
    out = tmp_path / "hup.pcapng"
    proc = start_capture(out)
    from swarm.runtime.swarm import Swarm

    dst = Swarm.attach(NAME).node("sat02").isl_ip
    ping = swarm("exec", NAME, "sat01", "ping", "-c", "5", "-i", "0.2", dst, timeout=60)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    proc.send_signal(signal.SIGHUP)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert gone_within(2.0), "dumpcaps still run after SIGHUP of their capture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hup.pcapng"]
    info = subprocess.run(["capinfos", str(out)], capture_output=True, text=True, timeout=60)
    assert info.returncode == 0 and "Number of interfaces in file: 2" in info.stdout, info.stdout + info.stderr
    # the five echo requests at both ends (10 frames); the link may carry more than those (an ARP exchange when
    # sat01's neighbour entry for sat02 went stale), so the requests are counted by tshark, not the frames
    read = subprocess.run(["tshark", "-r", str(out), "-Y", f"icmp.type == 8 && ip.dst == {dst}", "-T", "fields",
                           "-e", "frame.interface_id"], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.split()) == ["0"] * 5 + ["1"] * 5, (read.stdout, stdout)
