"""A mixed DTN swarm live (netns backend) on ipn endpoints (`dtn.eid: ipn`, node i = ipn:<i>.0): sat01 runs dtn7
(patched, `make setup`), sat02 runs Hardy (swarm-hardy, `make hardy`), over TCPCLv4. A 100 kB bundle (two segments
of dtnd's, more of Hardy's) crosses each way exactly once, and tshark's TCPCL dissector, reading a capture of the
link, finds no MSG_REJECT and every XFER_ACK echoing the flags of the segment it acknowledges (RFC 9174 section
5.2.3: what the published dtn7 got wrong); its BPv7 dissector finds a good CRC-32C on every bundle's primary block
(RFC 9171 section 4.3.1; the published dtn7 sent none, and Hardy now runs with all its ingress checks).
Restarting Hardy's node inside the capture shows it re-dials its static peer.
Hardy relays, too: sat02 carries bundles between sat01 and sat03 (hardy) on static routes (one named by node ID).
One bring-up for the file (the chain sat01 - sat02 - sat03); swarm name hdy-mix, subnets from tests/alloc.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from alloc import nets_yaml, octets
from conftest import REPO, wait_until

NET = octets(__file__)  # this file's subnets (tests/alloc.py)
NAME = "hdy-mix"
SIZE = 100_000

pytestmark = [pytest.mark.root, pytest.mark.slow]
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}


def swarm(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.fixture(scope="module")
def mixed(need_hardy, tmp_path_factory):
    """sat01 (dtn7) and sat02 (hardy) up, with a capture of sat01's ISL interface running from before the agents
    start their sessions; yields (capture file, the capture process)."""
    if subprocess.run(["sh", "-c", "command -v tshark"], capture_output=True).returncode != 0:
        pytest.skip("tshark missing (make setup installs it)")
    tmp = tmp_path_factory.mktemp("hardy")
    spec = tmp / f"{NAME}.yaml"
    spec.write_text(f"name: {NAME}\nbackend: netns\n"
                    "node_list:\n"
                    "  - {name: sat01, dtn: {eid: ipn, static_peers: [sat02], routing: static,"
                    " routes: [{to: 'ipn:3.0', via: sat02}]}}\n"
                    "  - {name: sat02, dtn: {eid: ipn, agent: hardy, static_peers: [sat01, 'ipn:3.0']}}\n"
                    "  - {name: sat03, dtn: {eid: ipn, agent: hardy, static_peers: [sat02], routing: static,"
                    " routes: [{to: '*', via: sat02}]}}\n"
                    f"{nets_yaml(NET[0])}\n")
    swarm("down", NAME)
    try:
        up = swarm("up", str(spec))
        assert up.returncode == 0, up.stderr[-2000:]
        yield tmp
    finally:
        down = swarm("down", NAME, timeout=120)
        assert down.returncode == 0, down.stderr
    assert not (REPO / ".swarm" / NAME).exists()


def capture(tmp) -> tuple[subprocess.Popen, object]:
    out = tmp / "isl.pcapng"
    proc = subprocess.Popen(SWARM + ["capture", NAME, "--node", "sat01", "--iface", "isl", "-o", str(out), "--force"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = proc.stderr.readline()
    assert "capturing on" in started, started + proc.stderr.read()
    return proc, out


def send(src: str, dst: str, text: str) -> str:
    res = swarm("dtn", "send", NAME, src, dst, text, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.replace("\n", "")  # the console may wrap the line


def recv(node: str, timeout: float) -> dict:
    res = swarm("dtn", "recv", NAME, node, "--timeout", f"{timeout:g}", timeout=timeout + 60)
    return json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {"error": res.stderr}


PEERS = {"sat01": ["sat02"], "sat02": ["sat01", "sat03"], "sat03": ["sat02"]}


def status() -> dict:
    res = swarm("dtn", NAME, "--json")
    assert res.returncode == 0, res.stderr
    return {r["node"]: r for r in json.loads(res.stdout)}


def wait_peered(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rows = status()
        if {n: r["peers"] for n, r in rows.items()} == PEERS:
            return
        assert time.monotonic() < deadline, f"no sessions again within {timeout:g} s: {rows}"
        time.sleep(0.5)


def tcpcl_rows(pcap, fields: list[str], where: str) -> list[tuple[str, ...]]:
    """One row per TCPCL message matching `where` (a frame may hold several: tshark lists each field's values
    comma-separated; a per-frame field such as ip.src is repeated)."""
    args = ["tshark", "-r", str(pcap), "-d", "tcp.port==4556,tcpcl", "-Y", where, "-T", "fields", "-E", "separator=|"]
    for f in fields:
        args += ["-e", f]
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows: list[tuple[str, ...]] = []
    for line in res.stdout.splitlines():
        if line.strip():
            cols = [c.split(",") for c in line.split("|")]
            n = max(len(c) for c in cols)
            rows += zip(*[c * n if len(c) == 1 else c for c in cols])
    return rows


def test_dtn7_and_hardy_exchange_100kB_bundles_once_each_way_with_a_clean_tcpcl(mixed):
    rows = status()
    assert {n: r["peers"] for n, r in rows.items()} == PEERS, rows
    assert rows["sat02"]["eid"] == "ipn:2.0" and rows["sat01"]["eid"] == "ipn:1.0" and rows["sat02"]["state"] == "ok"
    hardy_argv = subprocess.run(["pgrep", "-af", "swarm-hardy"], capture_output=True, text=True).stdout
    assert "--node ipn:2.0" in hardy_argv and "--accept-no-crc" not in hardy_argv  # all of Hardy's ingress checks
    proc, pcap = capture(mixed)
    try:
        # new sessions inside the capture (tshark decodes TCPCL from the contact header on): restart Hardy's node;
        # swarm-hardy dials sat01 again and dtn7 takes the new session (re-dialling, tested on the way)
        restart = swarm("fault", NAME, "node", "sat02", "restart")
        assert restart.returncode == 0, restart.stderr
        wait_peered()
        to_hardy, to_dtn7 = "h" * SIZE, "d" * SIZE
        assert "to ipn:2.1: bundle ipn:1.0-" in send("sat01", "sat02", to_hardy)
        assert "to ipn:1.1: bundle ipn:2.2-" in send("sat02", "sat01", to_dtn7)
        got_hardy, got_dtn7 = recv("sat02", 20), recv("sat01", 20)
        assert got_hardy.get("payload") == to_hardy and got_hardy["src"] == "ipn:1.0", str(got_hardy)[:300]
        assert got_dtn7.get("payload") == to_dtn7 and got_dtn7["src"] == "ipn:2.2", str(got_dtn7)[:300]
        assert (got_hardy["dst"], got_dtn7["dst"]) == ("ipn:2.1", "ipn:1.1")
        # exactly once: nothing more arrives on either side
        assert "nothing received" in recv("sat02", 3).get("error", "")
        assert "nothing received" in recv("sat01", 3).get("error", "")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    rows = status()  # counted since sat02's restart
    assert rows["sat02"]["delivered"] == 1 and rows["sat02"]["received"] == 1 and rows["sat02"]["forwarded"] == 1

    # the wire: no MSG_REJECT, and each XFER_ACK echoes the flags of the segment it answers (same transfer ID and
    # acknowledged length = the segments' bytes so far), in both directions
    assert tcpcl_rows(pcap, ["frame.number"], "tcpcl.v4.mhdr.type == 0x06") == []  # MSG_REJECT
    segs = tcpcl_rows(pcap, ["ip.src", "tcpcl.v4.xfer_id", "tcpcl.v4.xfer_flags",
                                "tcpcl.v4.xfer_segment.data_len"],
                      "tcpcl.v4.mhdr.type == 0x01")
    acks = tcpcl_rows(pcap, ["ip.dst", "tcpcl.v4.xfer_id", "tcpcl.v4.xfer_flags",
                                "tcpcl.v4.xfer_ack.ack_len"],
                      "tcpcl.v4.mhdr.type == 0x02")
    senders = {s[0] for s in segs}
    assert len(senders) == 2, segs  # both agents sent a bundle
    for sender in senders:
        mine = [s for s in segs if s[0] == sender]
        assert len(mine) >= 2, mine  # 100 kB: more than one segment
        sent = 0
        expected = []
        for _, xid, flags, length in mine:
            sent = (0 if int(flags, 0) & 0x02 else sent) + int(length)  # START resets the count
            expected.append((xid, int(flags, 0), sent))
        got = [(xid, int(flags, 0), int(n)) for dst, xid, flags, n in acks if dst == sender]
        assert got == expected, (sender, got, expected)

    # each side advertised a Transfer MRU that the other's 100 kB transfer fits (RFC 9174 section 4.7); dtnd said
    # 64,000 while taking more until patch item 7, and tshark flagged Hardy's transfers "larger than peer MRU"
    mrus = tcpcl_rows(pcap, ["ip.src", "tcpcl.v4.sess_init.xfer_mru"], "tcpcl.v4.mhdr.type == 0x07")
    assert {src for src, _ in mrus} == senders and all(int(mru) >= 2 * SIZE for _, mru in mrus), mrus
    assert tcpcl_rows(pcap, ["frame.number"], '_ws.expert.message contains "larger than peer MRU"') == []

    # the bundles: each primary block (the first block's CRC fields) carries a CRC-32C (type 2) that checks out,
    # the one dtn7 made (patch item 6) and the one Hardy made
    bundles = subprocess.run(["tshark", "-r", str(pcap), "-d", "tcp.port==4556,tcpcl", "-Y", "bpv7.primary.version",
                              "-T", "fields", "-E", "separator=|", "-e", "bpv7.primary.src_uri", "-e", "bpv7.crc_type",
                              "-e", "bpv7.crc_status"], capture_output=True, text=True, timeout=120)
    assert bundles.returncode == 0, bundles.stderr
    primary = {line.split("|")[0]: tuple(col.split(",")[0] for col in line.split("|")[1:])
               for line in bundles.stdout.splitlines() if line.strip()}
    assert primary == {"ipn:1.0": ("2", "1"), "ipn:2.2": ("2", "1")}, bundles.stdout


def test_hardy_relays_between_dtn7_and_hardy_on_static_routes(mixed):
    """sat01 (dtn7, route to ipn:3.0 via sat02) -> sat02 (hardy, a relay: routes to its peers from their sessions)
    -> sat03 (hardy, whose `routing: static` route `*` via sat02 is its only way back), and back, all on ipn."""
    wait_peered()
    assert "to ipn:3.1: bundle ipn:1.0-" in send("sat01", "sat03", "over two hops")
    assert "to ipn:1.1: bundle ipn:3.2-" in send("sat03", "sat01", "and back")
    there, back = recv("sat03", 20), recv("sat01", 20)
    assert there.get("payload") == "over two hops" and there["previous"] == "ipn:2.0", there
    assert back.get("payload") == "and back" and back["previous"] == "ipn:2.0", back
    assert "nothing received" in recv("sat03", 2).get("error", "")


def test_hardys_store_lists_a_bundle_while_it_cannot_leave_and_not_after(mixed):
    """`swarm dtn` counts what swarm-hardy's BPA holds (GET /status/store): a bundle to sat01 sent while the link
    is cut waits in sat02's store, and is gone from it once the heal lets it cross."""
    wait_peered()
    assert swarm("fault", NAME, "cut", "sat01", "sat02").returncode == 0
    try:
        send("sat02", "sat01", "held while cut")
        held = wait_until(lambda: (lambda r: r if r["sat02"]["stored"] >= 1 else None)(status()), 20,
                          "sat02 listing the bundle it holds")
        assert held["sat02"]["stored"] == 1, held["sat02"]
    finally:
        assert swarm("fault", NAME, "heal").returncode == 0
    got = recv("sat01", 60)
    assert got.get("payload") == "held while cut", got
    wait_until(lambda: status()["sat02"]["stored"] == 0, 20, "sat02's store empty once the bundle crossed")
