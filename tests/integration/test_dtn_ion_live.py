"""ION (the user's own build, SWARM_ION_INSTALL=<its install prefix>) in swarm nodes, live with real Docker (compose).

- Four ION nodes over ION's LTP: bundles cross between every pair the test sends on (`swarm dtn send/recv`, ION's
  bpsendfile and bprecvfile underneath), `swarm dtn` counts them (bpstats), `swarm dtn config` prints the spans
  each node got, and a second `up` reuses the image (its tag is the tree's content hash).
- Mixed swarms: an ION ground station and two dtn7 satellites (swarm-ltpcla) over LTP, by engine ID: a bundle
  each way, and tshark reads the capture as LTP sessions of both engines carrying both agents' bundles; an ION
  and a dtn7 node over UDP: a bundle each way.
- A `dtn` experiment with a contact plan: ION is given the plan at the release and routes and waits by it.
- Bad input: a user's rc line ION rejects stops `up` with ION's own message, the file and the line (exit 1),
  and an install tree without a library the programs need is refused before anything starts (exit 2); neither
  leaves a container behind.
Skipped with the reason where SWARM_ION_INSTALL is not set (also under CI, which has no ION build). Subnets from
tests/alloc.py; swarm names ion-it-*.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from alloc import nets_yaml, octets
from conftest import swarm_containers, user_build, wait_until, REPO
from dtn_runs import CHAIN_GAP, assert_gap_held, run_experiment
from ltp_capture import capture, ltp_rows

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NET = octets(__file__)  # this file's subnets (tests/alloc.py)
INSTALL = os.environ.get("SWARM_ION_INSTALL", "")
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}
LTP = "{agent: ion, cla: ltp, ltp: {rate: 100Mbit}}"


def swarm(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=env or ENV, timeout=timeout)


@pytest.fixture(scope="module")
def ion_install():
    return user_build("SWARM_ION_INSTALL", "bin/bpadmin",
                      "no ION build: set SWARM_ION_INSTALL to the install prefix of ION 4.1 built from its sources "
                      "(docs/DTN.md)")


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ion")


def up(spec: Path, name: str) -> None:
    swarm("down", name)
    res = swarm("up", str(spec))
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-2500:]


def down(name: str) -> None:
    res = swarm("down", name, timeout=180)
    assert res.returncode == 0, res.stderr
    assert not swarm_containers(name)


def send_recv(name: str, src: str, dst: str, text: str) -> dict:
    sent = swarm("dtn", "send", name, src, dst, text, timeout=120)
    assert sent.returncode == 0, sent.stderr[-1000:]
    got = swarm("dtn", "recv", name, dst, "--timeout", "30", timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr[-1000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


def counter(name: str, node: str, which: str) -> int:
    res = swarm("dtn", "status", name, "--json")
    return {r["node"]: r for r in json.loads(res.stdout)}[node][which] if res.returncode == 0 else -1


def test_four_ion_nodes_over_ltp(ion_install, spec_dir):
    name = "ion-it-four"
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 4\ndefaults:\n  dtn: {LTP}\n{nets_yaml(NET[0])}\n")
    try:
        up(spec, name)
        for src, dst in (("sat01", "sat04"), ("sat04", "sat01"), ("sat02", "sat03")):
            got = send_recv(name, src, dst, f"ion {src} to {dst}")
            assert got["payload"] == f"ion {src} to {dst}" and got["dst"] == f"dtn://{dst}/in"
        status = swarm("dtn", "status", name, "--json")
        assert status.returncode == 0, status.stderr
        rows = {r["node"]: r for r in json.loads(status.stdout)}
        assert rows["sat01"]["delivered"] == 1 and rows["sat04"]["delivered"] == 1 and rows["sat03"]["delivered"] == 1
        assert rows["sat01"]["forwarded"] >= 1 and rows["sat01"]["peers"] == ["sat02", "sat03", "sat04"]
        assert all(r["state"] == "ok" and r["eid"] == f"dtn://{n}/" for n, r in rows.items())
        # three bundles queued before anyone receives, then three one-shot `recv`s: the first's bprecvfile takes all
        # three from ION; the two it did not hand over wait for the next clients, each returned once
        before = counter(name, "sat03", "received")
        for i in range(3):
            sent = swarm("dtn", "send", name, "sat02", "sat03", f"queued {i}", timeout=120)
            assert sent.returncode == 0, sent.stderr[-1000:]
        wait_until(lambda: counter(name, "sat03", "received") >= before + 3, 60, "three more bundles received at sat03")
        got = []
        for _ in range(3):
            res = swarm("dtn", "recv", name, "sat03", "--timeout", "30", timeout=120)
            assert res.returncode == 0, res.stdout + res.stderr[-1000:]
            got.append(json.loads(res.stdout.strip().splitlines()[-1])["payload"])
        assert sorted(got) == ["queued 0", "queued 1", "queued 2"], got  # LTP sessions may finish in any order
        config = swarm("dtn", "config", name, "sat02")
        assert config.returncode == 0
        assert "# /var/lib/swarm-dtn/node.ltprc" in config.stdout
        assert sum(line.startswith("a span ") for line in config.stdout.splitlines()) == 3
        again = swarm("up", str(spec))  # already up: the same image, nothing rebuilt
        assert "building DTN image" not in again.stdout + again.stderr
    finally:
        down(name)


def test_ion_ground_station_and_dtn7_satellites_over_ltp(ion_install, spec_dir):
    """ION's LTP engine (ground, engine 1) and swarm-ltpcla beside dtn7 (sat01, engine 2): a bundle each way,
    and tshark reads the capture of ground's ISL interface as LTP sessions of both engines carrying the BPv7
    bundles of both agents."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark missing (make setup installs it)")
    name = "ion-it-mixed"
    spec = spec_dir / f"{name}.yaml"
    dtn7 = "{agent: dtn7, cla: ltp, ltp: {rate: 100Mbit}}"
    spec.write_text(f"name: {name}\nbackend: compose\nnode_list:\n  - {{name: ground, dtn: {LTP}}}\n"
                    f"  - {{name: sat01, dtn: {dtn7}}}\n  - {{name: sat02, dtn: {dtn7}}}\n{nets_yaml(NET[1])}\n")
    pcap = spec_dir / "mixed.pcapng"
    try:
        up(spec, name)
        cap = capture(name, "ground", pcap)
        try:
            got = send_recv(name, "ground", "sat01", "from ION")
            assert got["payload"] == "from ION" and got["src"] == "dtn://ground/src"  # dtn7 decodes ION's bundle
            got = send_recv(name, "sat01", "ground", "from dtn7")
            assert got["payload"] == "from dtn7"
        finally:
            cap.send_signal(signal.SIGINT)
            cap.communicate(timeout=30)
        rows = ltp_rows(pcap)
        by_engine = {e: [r for r in rows if r[0] == e] for e in ("1", "2")}
        assert all(by_engine.values()), rows[:20]
        # each engine's data segments (types 0-7) answered by the other's report segments (8) in its session
        for engine in ("1", "2"):
            types = {int(r[1], 0) for r in by_engine[engine]}
            assert types & set(range(8)) and 8 in types, (engine, types)
        srcs = {u for r in rows for u in r[2].split(",") if u}
        assert {"dtn://ground/src", "dtn://sat01/"} <= srcs, srcs
    finally:
        down(name)


def test_ion_and_dtn7_over_udp(ion_install, spec_dir):
    """`cla: udp`: ION's udpcli/udpclo and dtn7's UDP CLA, a bundle each way between an ION and a dtn7 node."""
    name = "ion-it-udp"
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnode_list:\n  - {{name: ground, dtn: {{agent: ion, cla: udp}}}}\n"
                    f"  - {{name: sat01, dtn: {{agent: dtn7, cla: udp}}}}\n{nets_yaml(NET[1])}\n")
    try:
        up(spec, name)
        assert send_recv(name, "ground", "sat01", "ion over udp")["payload"] == "ion over udp"
        assert send_recv(name, "sat01", "ground", "dtn7 over udp")["payload"] == "dtn7 over udp"
    finally:
        down(name)


def test_bad_rc_line_and_missing_library_leave_nothing(ion_install, spec_dir):
    name = "ion-it-bad"
    user = spec_dir / "mine.rc"
    user.write_text("# the user's own lines\n## begin ionadmin\na contact +0 +10 1 9 0\n## end ionadmin\n")
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 2\ndefaults:\n"
                    f"  dtn: {{agent: ion, cla: ltp, ltp: {{rate: 10Mbit}}, config: {user}}}\n{nets_yaml(NET[2])}\n")
    swarm("down", name)
    res = swarm("up", str(spec))
    lines = [ln for ln in res.stderr.splitlines() if "ION start:" in ln]
    assert res.returncode == 1 and lines, res.stderr[-2000:]
    assert f"{user}: line 3 (ionadmin): [?] Can't insert contact with xmit rate 0." in lines[0], lines
    assert not swarm_containers(name)

    broken = spec_dir / "ion-without-ltp"
    shutil.copytree(ion_install, broken, symlinks=True, ignore=shutil.ignore_patterns("*.a", "*.la", "include", "share"))
    for lib in (broken / "lib").glob("libltp.so*"):
        lib.unlink()
    (broken / "lib" / "libltp.so").symlink_to("/nowhere/libltp.so.0")  # passes the host check, not ldd
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 2\ndefaults:\n"
                    f"  dtn: {{agent: ion, cla: ltp, ltp: {{rate: 10Mbit}}, install: {broken}}}\n{nets_yaml(NET[2])}\n")
    res = swarm("up", str(spec))
    assert res.returncode == 2, res.stderr[-2000:]
    said = [ln for ln in res.stderr.splitlines() if "dtn.install" in ln]
    assert said and "needs libltp.so.0, which the node image lacks" in said[0], res.stderr[-2000:]
    assert not swarm_containers(name)


def test_ion_routes_and_waits_by_the_runs_contact_plan(ion_install, spec_dir):
    """A `dtn` experiment with a contact plan on ION: experiments/dtn-contacts-ion.yaml's chain (sat01 -> sat02 ->
    ground, no sat01-ground contact, sat02-ground absent 5-15 s) with every node a peer of every other, so only the
    plan ION is given at the release tells its routing to go through sat02 and to hold what is made in the gap.
    Every bundle arrives once, and those made in the gap only after it (before this, ION believed every link up
    for 30 days and sent into the cut direct link)."""
    name = "ion-it-contacts"
    exp = spec_dir / "contacts.yaml"
    exp.write_text(f"type: dtn\nname: {name}\nbackend: compose\npattern: chain\nsizes: [2]\nbundle_sizes: [10kB]\n"
                   "rates: [5]\nclas: [ltp]\nroutings: [static]\nduration: 18s\ndrain: 30s\n"
                   f"contacts: {{plan: {CHAIN_GAP}, others: down}}\n"
                   "dtn: {agent: ion, peers: auto, ltp: {rate: 100Mbit}}\n"
                   f"swarm: {{{nets_yaml(NET[2])}}}\n")
    try:
        assert_gap_held(run_experiment(exp, spec_dir / "contacts-results"), least_sent=80, least_in_gap=30)
    finally:
        swarm("down", name)
        assert not swarm_containers(name)
