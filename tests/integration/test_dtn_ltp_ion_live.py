"""`cla: ltp` against an ION-style LTP peer (netns backend, real dtnd 0.21.0 and swarm-ltpcla): an engine outside
the swarm (`dtn.ltp.peers`, engine 77) that sends from an ephemeral UDP port, as ION's udplso does, puts THREE
bundles into one red block and one bundle into an all-green block (ion_style_ltp.py, our own LTP sender in the
node's namespace). Every bundle reaches the application on the receiving node exactly once, the peer's reports
come back to its declared address, and tshark decodes the capture as LTP carrying BPv7 bundles; a bundle sent to the
outside node (declared with its node ID) reaches it over LTP. One bring-up serves the three tests. Subnets from tests/alloc.py, swarm name ltp-it-ion."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from alloc import nets_yaml, octets
from conftest import REPO, require, require_dtn7, swarm_namespaces, wait_until
from swarm.spec.model import node_address

pytestmark = [pytest.mark.root, pytest.mark.slow]
SWARM = [sys.executable, "-m", "swarm"]
NET = octets(__file__)  # this file's subnets (tests/alloc.py)
NAME, ISL = "ltp-it-ion", f"10.{NET[0]}.0.0/24"
SAT01, SAT02 = node_address(ISL, 1), node_address(ISL, 2)
PEER = Path(__file__).with_name("ion_style_ltp.py")
# one red block of three bundles (the middle one spans segments), then an all-green block of one bundle
PAYLOADS = ["ion-red-1", "ion-red-2-" + "x" * 2500, "ion-red-3"]
GREEN = "ion-green-1"
TO_ION = "from-sat02-to-ion77"


def _ns(node: str) -> str:
    return f"swarm-emu_{NAME}_{node}"


@pytest.fixture(scope="module")
def ion_run(caps, tmp_path_factory):
    require("root", caps.root, "not running as root")
    require("netns", caps.netns, "cannot create network namespaces")
    require_dtn7()
    tmp = tmp_path_factory.mktemp("ion")
    spec = tmp / f"{NAME}.yaml"
    spec.write_text(f"name: {NAME}\nbackend: netns\nnodes: 2\n"
                    f"{nets_yaml(NET[0])}\n"
                    "links: {default: {delay: 50ms, rate: 10Mbit}}\n"
                    "defaults: {dtn: {cla: ltp, routing: epidemic, ltp: {peers: "
                    f"[{{engine: 77, address: '{SAT01}:1114', rate: 10Mbit, owlt: 50ms, node: 'dtn://ion77/'}}]}}}}}}\n")
    env = {**os.environ, "SWARM_WORKDIR": str(REPO)}
    pcap = tmp / "ltp.pcap"
    out: dict = {"pcap": pcap, "received": []}
    try:
        up = subprocess.run(SWARM + ["up", str(spec)], capture_output=True, text=True, env=env, timeout=180)
        assert up.returncode == 0, up.stderr
        cap = subprocess.Popen(["ip", "netns", "exec", _ns("sat02"), "dumpcap", "-q", "-i", "any", "-f", "udp port 1113",
                                "-w", str(pcap)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # dumpcap writes the file's header once its interface is open
        wait_until(lambda: pcap.exists() and pcap.stat().st_size > 0, 30, "dumpcap capturing in sat02")
        # the peer runs in sat01's namespace beside sat01's own swarm-ltpcla, on its own ports
        peer = subprocess.run(["ip", "netns", "exec", _ns("sat01"), sys.executable, str(PEER), "77", f"{SAT02}:1113",
                               f"{SAT01}:1114", "dtn://sat02/in", "red:" + ",".join(PAYLOADS), f"green:{GREEN}"],
                              capture_output=True, text=True, timeout=60)
        assert peer.returncode == 0, peer.stderr
        out["peer"] = json.loads(peer.stdout)
        for _ in range(len(PAYLOADS) + 1):
            got = subprocess.run(SWARM + ["dtn", "recv", NAME, "sat02", "--timeout", "20"],
                                 capture_output=True, text=True, env=env)
            assert got.returncode == 0, got.stdout + got.stderr
            out["received"].append(json.loads(got.stdout)["payload"])
        # no copy of any of them follows
        extra = subprocess.run(SWARM + ["dtn", "recv", NAME, "sat02", "--timeout", "6"],
                               capture_output=True, text=True, env=env)
        out["extra"] = extra.stdout if extra.returncode == 0 else None
        # the other way: a bundle for the outside node leaves sat02's dtnd (its static peer, from `node:`) over LTP
        back = subprocess.Popen(["ip", "netns", "exec", _ns("sat01"), sys.executable, str(PEER), "recv", "77",
                                 f"{SAT02}:1113", f"{SAT01}:1114", TO_ION, "30"], stdout=subprocess.PIPE, text=True)
        assert back.stdout.readline().strip() == "listening"
        sent = subprocess.run(SWARM + ["dtn", "send", NAME, "sat02", "dtn://ion77/in", TO_ION],
                              capture_output=True, text=True, env=env, timeout=60)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        out["to_peer"] = json.loads(back.communicate(timeout=60)[0])
        def statuses() -> dict:
            return {str(p.parent): json.loads(p.read_text()) for p in (REPO / ".swarm" / NAME).rglob("ltp-status.json")}

        # the status file is rewritten every second: wait for the one that counts both blocks
        out["status"] = wait_until(lambda: (lambda st: st if any("sat02" in k and v.get("blocks_received", 0) >= 2
                                                                 for k, v in st.items()) else None)(statuses()),
                                   20, "sat02's LTP status counting both blocks")
        cap.send_signal(signal.SIGINT)
        cap.wait(timeout=10)
        yield out
    finally:
        down = subprocess.run(SWARM + ["down", NAME], capture_output=True, text=True, env=env, timeout=120)
        assert down.returncode == 0, down.stderr
        assert not swarm_namespaces(NAME)


def test_ion_style_peer_delivers_every_bundle_exactly_once(ion_run):
    peer = ion_run["peer"]
    assert peer["source_port"] not in (1113, 1114)  # ephemeral, as ION's udplso
    red, green = peer["blocks"]
    assert red["bundles"] == 3 and red["covered"] and red["attempts"] == 1, red  # our report reached it at once
    assert set(peer["replies_from"]) == {f"{SAT02}:1113"}  # replies went to the declared address
    assert green["bundles"] == 1 and not green["red"]
    assert sorted(ion_run["received"]) == sorted(PAYLOADS + [GREEN])
    assert ion_run["extra"] is None, ion_run["extra"]
    st = next(s for node, s in ion_run["status"].items() if "sat02" in node)
    assert st["blocks_received"] == 2 and st["bundles_received"] == 4, st
    assert st["unknown_engine"] == 0 and st["duplicates"] == 0 and st["unparsed_blocks"] == 0, st


def test_a_bundle_for_the_outside_node_reaches_it_over_ltp(ion_run):
    """dtnd knows the outside node as a static peer (from `node:`), with no peers/add by hand."""
    back = ion_run["to_peer"]
    assert back["arrived"], back
    # epidemic: sat02 sends it to both peers, so the first whole copy may come through sat01 (engines: the indexes)
    assert back["blocks"][-1]["originator"] in (1, 2), back


def test_the_capture_decodes_as_ltp_carrying_bpv7(ion_run):
    fields = ["ltp.session.orig", "ltp.type", "udp.srcport", "bpv7.primary.src_uri"]
    res = subprocess.run(["tshark", "-r", str(ion_run["pcap"]), "-d", "udp.port==1113,ltp", "-Y", "ltp",
                          "-T", "fields", *[x for f in fields for x in ("-e", f)], "-E", "separator=;"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = [line.split(";") for line in res.stdout.splitlines()]
    from77 = [r for r in rows if r[0] == "77"]
    assert from77, res.stdout[:2000]
    assert {int(r[2]) for r in from77 if int(r[1], 0) < 8} == {ion_run["peer"]["source_port"]}  # data segments
    assert any(int(r[1], 0) == 8 for r in from77)  # sat02's report segments to engine 77's session
    # tshark reassembles each block and decodes the bundles in it
    srcs = [u for r in from77 for u in r[3].split(",") if u]
    assert srcs and all(u == "dtn://ion77/" for u in srcs), srcs
