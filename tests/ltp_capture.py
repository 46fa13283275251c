"""What the live tests of LTP between independent engines share: a capture of one node's ISL interface (`swarm
capture`) and tshark's LTP dissector read over it, so that a test asserts on the wire, not on what either engine
says of itself."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}


def capture(name: str, node: str, out: Path) -> subprocess.Popen:
    """`swarm capture` of `node`'s ISL interface into `out`, running once it says so (stop it with SIGINT)."""
    proc = subprocess.Popen(SWARM + ["capture", name, "--node", node, "--iface", "isl", "-o", str(out), "--force"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = proc.stderr.readline()
    assert "capturing on" in started, started + proc.stderr.read()
    return proc


def ltp_rows(pcap: Path) -> list[list[str]]:
    """tshark's LTP dissector on the capture: per segment its session originator, type, and the sources of the
    BPv7 bundles in a block it reassembled."""
    fields = ["ltp.session.orig", "ltp.type", "bpv7.primary.src_uri"]
    res = subprocess.run(["tshark", "-r", str(pcap), "-d", "udp.port==1113,ltp", "-Y", "ltp", "-T", "fields",
                          *[x for f in fields for x in ("-e", f)], "-E", "separator=;"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [line.split(";") for line in res.stdout.splitlines()]
