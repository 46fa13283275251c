"""HDTN (the user's own build, SWARM_HDTN_INSTALL=<its install prefix>) in swarm nodes, live with real Docker
(compose).

- Four HDTN nodes over TCPCLv4: each node's router (hdtn-one-process) holds a TCPCLv4 session with every other
  router before `up` returns; bundles cross between the pairs the tests send on (`swarm dtn send/recv`: bundles into
  and out of the router over STCP on loopback, as HDTN's own bpgen/bpsink do), `swarm dtn` counts them and lists the
  peers with a session, `swarm dtn config` prints the configuration and contact plan a node got, and a second `up`
  reuses the image (its tag is the tree's hash).
- The `dtn` experiment type on HDTN nodes (all-to-ground): every bundle sent is delivered; with a contact plan,
  HDTN is given it at the release and routes (CGR) and waits by it.
- HDTN's own LTP engine (`cla: ltp`) in a mixed swarm: two HDTN nodes and a dtn7 ground station (swarm-ltpcla,
  our LTP engine), 0.5 s one-way: bundles cross HDTN -> HDTN, HDTN -> dtn7 and dtn7 -> HDTN, and tshark reads the
  capture of the ground's ISL interface as LTP sessions of both engines (HDTN's data answered by swarm-ltpcla's
  reports and the other way round) carrying the bundles of both agents; and three stacks on one LTP (HDTN, ION where
  SWARM_ION_INSTALL is set, dtn7), HDTN's and ION's engines read answering each other on the wire.
- Bad input: a configuration of the user's that HDTN refuses stops `up` with HDTN's own message (exit 1); a program
  in the tree needing a library the node image lacks is refused by the image's ldd check (exit 2); neither leaves
  a container.
One bring-up per swarm (module-scoped fixtures). Skipped with the reason where SWARM_HDTN_INSTALL is not set (also
under CI, which has no HDTN build). Subnets from tests/alloc.py; swarm names hd-it-*.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from alloc import nets_yaml, octets
from conftest import swarm_containers, user_build, REPO
from dtn_runs import CHAIN_GAP, assert_gap_held, run_experiment, table
from ltp_capture import capture, ltp_rows

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NET = octets(__file__)  # this file's subnets (tests/alloc.py)
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}
HDTN = "{agent: hdtn, cla: tcp, eid: ipn}"
ROUTER_BASE = 1_000_000


def swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.fixture(scope="module")
def hdtn_install():
    return user_build("SWARM_HDTN_INSTALL", "bin/hdtn-one-process",
                      "no HDTN build: set SWARM_HDTN_INSTALL to the install prefix of HDTN built from its sources, "
                      "with bin/hdtn-one-process (docs/DTN.md)")


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hdtn")


def bring_up(spec_dir: Path, name: str, body: str, octet: int):
    """A swarm `name` up for the module (yields its name and spec), down afterwards, no container left."""
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\n{body}{nets_yaml(octet)}\n")
    swarm("down", name)
    try:
        res = swarm("up", str(spec))
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-2500:]
        yield name, spec
    finally:
        res = swarm("down", name, timeout=180)
        assert res.returncode == 0, res.stderr
        assert not swarm_containers(name)


@pytest.fixture(scope="module")
def four(hdtn_install, spec_dir):
    yield from bring_up(spec_dir, "hd-it-four", f"nodes: 4\ndefaults:\n  dtn: {HDTN}\n", NET[0])


def send_recv(name: str, src: str, dst: str, text: str) -> dict:
    sent = swarm("dtn", "send", name, src, dst, text, timeout=120)
    assert sent.returncode == 0, sent.stdout + sent.stderr[-1000:]
    got = swarm("dtn", "recv", name, dst, "--timeout", "30", timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr[-1000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


PAIRS = (("sat01", "sat04"), ("sat04", "sat01"), ("sat02", "sat03"))


@pytest.mark.parametrize("src, dst", PAIRS)
def test_four_hdtn_nodes_deliver_over_tcpclv4(four, src, dst):
    name, _ = four
    got = send_recv(name, src, dst, f"hdtn {src} to {dst}")
    s, d = int(src[3:]), int(dst[3:])
    assert got["payload"] == f"hdtn {src} to {dst}" and got["dst"] == f"ipn:{d}.1", got
    assert got["src"] == f"ipn:{s}.2", got


def status_rows(name: str) -> dict:
    status = swarm("dtn", "status", name, "--json")
    assert status.returncode == 0, status.stderr
    return {r["node"]: r for r in json.loads(status.stdout)}


def test_four_hdtn_status_and_config(four):
    name, spec = four
    before = status_rows(name)
    assert all(r["state"] == "ok" and r["eid"] == f"ipn:{int(n[3:])}.0" for n, r in before.items()), before
    assert before["sat01"]["peers"] == ["sat02", "sat03", "sat04"] and before["sat01"]["clas"] == ["tcp"]
    assert send_recv(name, "sat03", "sat02", "counted")["payload"] == "counted"
    after = status_rows(name)
    assert after["sat02"]["delivered"] == before["sat02"]["delivered"] + 1, (before["sat02"], after["sat02"])
    assert all(after[n]["delivered"] == before[n]["delivered"] for n in ("sat01", "sat03", "sat04"))
    # the routers' own counts, from HDTN's telemetry API: sat03's router sent it on the ISL, sat02's took it there
    assert after["sat03"]["forwarded"] >= before["sat03"]["forwarded"] + 1, (before["sat03"], after["sat03"])
    assert after["sat02"]["received"] >= before["sat02"]["received"] + 1, (before["sat02"], after["sat02"])
    config = swarm("dtn", "config", name, "sat02")
    assert config.returncode == 0, config.stderr
    assert "# /var/lib/swarm-dtn/hdtn.json" in config.stdout and "# /var/lib/swarm-dtn/contacts.json" in config.stdout
    assert f'"myNodeId": {2 + ROUTER_BASE},' in config.stdout
    again = swarm("up", str(spec))  # already up: the same image, nothing rebuilt
    assert "building DTN image" not in again.stdout + again.stderr


@pytest.fixture(scope="module")
def ltp_mixed(hdtn_install, spec_dir):
    hdtn, dtn7 = "{agent: hdtn, cla: ltp, eid: ipn}", "{agent: dtn7, cla: ltp, eid: ipn}"
    yield from bring_up(spec_dir, "hd-it-ltp", f"node_list:\n  - {{name: sat01, dtn: {hdtn}}}\n"
                        f"  - {{name: sat02, dtn: {hdtn}}}\n  - {{name: ground, dtn: {dtn7}}}\n"
                        "links: {default: {rate: 100Mbit, delay: 0.5s}}\n", NET[3])


def test_hdtn_ltp_between_hdtn_nodes_and_with_dtn7_read_on_the_wire(ltp_mixed, spec_dir):
    """Node numbers = LTP engine IDs = indexes: sat01 1, sat02 2 (HDTN's engines), ground 3 (swarm-ltpcla)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark missing (make setup installs it)")
    name, _ = ltp_mixed
    got = send_recv(name, "sat01", "sat02", "hdtn ltp to hdtn")
    assert got["payload"] == "hdtn ltp to hdtn" and got["src"] == "ipn:1.2", got
    pcap = spec_dir / "hdtn-ltp.pcapng"
    cap = capture(name, "ground", pcap)
    try:
        got = send_recv(name, "sat02", "ground", "from HDTN")
        assert got["payload"] == "from HDTN" and got["src"] == "ipn:2.2", got  # dtn7 decodes HDTN's bundle
        got = send_recv(name, "ground", "sat01", "from dtn7")
        assert got["payload"] == "from dtn7" and got["dst"] == "ipn:1.1" and got["src"] == "ipn:3.0", got
    finally:
        cap.send_signal(signal.SIGINT)
        cap.communicate(timeout=30)
    rows = ltp_rows(pcap)
    by_engine = {e: {int(r[1], 0) for r in rows if r[0] == e} for e in ("2", "3")}
    for engine, types in by_engine.items():  # each engine's data (types 0-7) answered by the other's reports (8)
        assert types & set(range(8)) and 8 in types, (engine, by_engine, rows[:20])
    srcs = {u for r in rows for u in r[2].split(",") if u}
    assert {"ipn:2.2", "ipn:3.0"} <= srcs, srcs  # dtn7 sends from its node ID
    status = status_rows(name)
    assert status["sat01"]["clas"] == ["ltp"] and status["sat02"]["delivered"] >= 1, status


def test_the_dtn_experiment_runs_on_hdtn(hdtn_install, spec_dir):
    name = "hd-it-exp"
    exp = spec_dir / "exp.yaml"
    exp.write_text(f"type: dtn\nname: {name}\nbackend: compose\npattern: all-to-ground\nsizes: [3]\n"
                   "bundle_sizes: [1kB]\nrates: [5]\nclas: [tcp]\nroutings: [epidemic]\nduration: 4s\ndrain: 15s\n"
                   f"dtn: {{agent: hdtn, eid: ipn}}\nswarm: {{{nets_yaml(NET[1])}}}\n")
    try:
        rows = table(run_experiment(exp, spec_dir / "results") / "tests.csv")
        assert rows and all(int(r["bundles_sent"]) >= 10 for r in rows), rows
        assert all(int(r["bundles_delivered"]) == int(r["bundles_sent"]) for r in rows), rows
    finally:
        swarm("down", name)
        assert not swarm_containers(name)


def test_hdtn_routes_and_waits_by_the_runs_contact_plan(hdtn_install, spec_dir):
    """experiments/dtn-contacts-hdtn.yaml's run, shorter: both satellites send to the ground, every node a peer of
    every other; the plan (experiments/contacts/chain-gap.txt, others down) has no sat01-ground contact and no
    sat02-ground contact from 5 s to 15 s. HDTN is given it at the release over its telemetry API: every bundle
    arrives once (sat01's only through sat02, by HDTN's CGR), and those made in the gap only after it (before this,
    HDTN's contacts said every link was up for 30 days and its router sent sat01's bundles into the cut link)."""
    name = "hd-it-contacts"
    exp = spec_dir / "contacts.yaml"
    exp.write_text(f"type: dtn\nname: {name}\nbackend: compose\npattern: all-to-ground\nsizes: [2]\n"
                   "bundle_sizes: [10kB]\nrates: [5]\nclas: [ltp]\nroutings: [epidemic]\nduration: 18s\ndrain: 30s\n"
                   f"contacts: {{plan: {CHAIN_GAP}, others: down}}\n"
                   "dtn: {agent: hdtn, eid: ipn, ltp: {rate: 100Mbit}}\n"
                   f"swarm: {{{nets_yaml(NET[4])}}}\n")
    try:
        bundles = assert_gap_held(run_experiment(exp, spec_dir / "contacts-results"), least_sent=160,
                                  least_in_gap=60)
        assert len({b["src"] for b in bundles}) == 2, {b["src"] for b in bundles}  # sat01's arrive too, via sat02
    finally:
        swarm("down", name)
        assert not swarm_containers(name)


def test_hdtn_ion_and_dtn7_over_ltp_read_on_the_wire(hdtn_install, spec_dir):
    """Three stacks, one LTP: an HDTN satellite (HDTN's LTP engine 1), an ION satellite (ION's, engine 2) and a dtn7
    ground station (swarm-ltpcla, engine 3), 0.5 s one-way at 100 Mbit/s. Bundles cross HDTN -> ION, ION -> HDTN,
    ION -> dtn7 and dtn7 -> HDTN, and tshark reads the capture of the ION node's ISL interface as LTP sessions of
    HDTN's engine answered by ION's reports and the other way round."""
    ion = user_build("SWARM_ION_INSTALL", "bin/bpadmin", "no ION build: set SWARM_ION_INSTALL to the install prefix "
                     "of ION 4.1 built from its sources (docs/DTN.md)")
    if shutil.which("tshark") is None:
        pytest.skip("tshark missing (make setup installs it)")
    name = "hd-it-stacks"
    pieces = {"sat01": "{agent: hdtn, cla: ltp, eid: ipn}", "sat02": f"{{agent: ion, cla: ltp, eid: ipn, install: {ion}}}",
              "ground": "{agent: dtn7, cla: ltp, eid: ipn}"}
    numbers = {"sat01": 1, "sat02": 2, "ground": 3}  # node numbers = LTP engine IDs = indexes
    nodes = "".join(f"  - {{name: {n}, dtn: {p}}}\n" for n, p in pieces.items())
    pcap = spec_dir / "stacks.pcapng"
    links = "links: {default: {rate: 100Mbit, delay: 0.5s}}\n"
    with contextmanager(bring_up)(spec_dir, name, f"node_list:\n{nodes}{links}", NET[5]):
        cap = capture(name, "sat02", pcap)
        try:
            for src, dst in (("sat01", "sat02"), ("sat02", "sat01"), ("sat02", "ground"), ("ground", "sat01")):
                text = f"{src} to {dst}"
                got = send_recv(name, src, dst, text)
                assert got["payload"] == text, (src, dst, got)
                if dst != "sat02":  # ION hands its applications the payload only, not the bundle's source
                    assert got["src"].startswith(f"ipn:{numbers[src]}."), (src, dst, got)
        finally:
            cap.send_signal(signal.SIGINT)
            cap.communicate(timeout=30)
        rows = ltp_rows(pcap)
        by_engine = {e: {int(r[1], 0) for r in rows if r[0] == e} for e in ("1", "2")}
        for engine, types in by_engine.items():  # HDTN's data (types 0-7) answered by ION's reports (8), and back
            assert types & set(range(8)) and 8 in types, (engine, by_engine, rows[:20])


def test_a_configuration_hdtn_refuses_stops_up_and_leaves_nothing(hdtn_install, spec_dir):
    name = "hd-it-bad"
    user = spec_dir / "mine.json"
    user.write_text('{"storageConfig": {"storageImplementation": "no_such_storage"}}\n')
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 2\ndefaults:\n"
                    f"  dtn: {{agent: hdtn, cla: tcp, eid: ipn, config: {user}}}\n{nets_yaml(NET[2])}\n")
    swarm("down", name)
    res = swarm("up", str(spec))
    lines = [ln for ln in res.stderr.splitlines() if "HDTN start:" in ln]
    assert res.returncode == 1 and lines, res.stderr[-2000:]
    assert "no_such_storage" in lines[0], lines
    assert not swarm_containers(name)


def test_a_program_needing_a_library_the_node_image_lacks_is_refused(hdtn_install, spec_dir):
    """The image's ldd check: a tree whose bin/ holds a program linked against a library that is nowhere in the node
    image is refused with one line naming program and library (exit 2), before any container."""
    if subprocess.run(["sh", "-c", "command -v cc"], capture_output=True).returncode != 0:
        pytest.skip("no C compiler to make the program")
    name = "hd-it-ldd"
    broken = spec_dir / "hdtn-needs-a-library"
    (broken / "bin").mkdir(parents=True)
    shutil.copy2(Path(hdtn_install) / "bin" / "hdtn-one-process", broken / "bin")
    lib = spec_dir / "libswarmnowhere.so"
    (spec_dir / "f.c").write_text("int swarm_nowhere(void) { return 0; }\n")
    (spec_dir / "m.c").write_text("int swarm_nowhere(void);\nint main(void) { return swarm_nowhere(); }\n")
    for argv in (["cc", "-shared", "-fPIC", "-o", str(lib), str(spec_dir / "f.c")],
                 ["cc", "-o", str(broken / "bin" / "hdtn-tool"), str(spec_dir / "m.c"), f"-L{spec_dir}",
                  "-lswarmnowhere"]):
        subprocess.run(argv, check=True, capture_output=True)
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 2\ndefaults:\n"
                    f"  dtn: {{agent: hdtn, cla: tcp, eid: ipn, install: {broken}}}\n{nets_yaml(NET[2])}\n")
    swarm("down", name)
    res = swarm("up", str(spec))
    assert res.returncode == 2, res.stderr[-2000:]
    said = [ln for ln in res.stderr.splitlines() if "dtn.install" in ln]
    assert said and "bin/hdtn-tool needs libswarmnowhere.so, which the node image lacks" in said[0], res.stderr[-2000:]
    assert not swarm_containers(name)
