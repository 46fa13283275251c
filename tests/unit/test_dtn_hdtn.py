"""HDTN's adapter, pure parts: the configuration and contact plan a node gets (golden), what it refuses, the user's
file, what is read back from the router's log and the application side, the registry entry; and the application
side (flightsw/hdtn_app.py) where it needs no HDTN: the bundles it makes (read back by the traffic program's own
decoder), its CRC, and STCP into and out of its inbox over loopback. Talking to a running HDTN is
tests/integration/test_dtn_hdtn_live.py's."""
from __future__ import annotations

import dataclasses
import json
import math
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from conftest import golden, wait_until
from flightsw import hdtn_api, hdtn_app
from flightsw.dtn_traffic import CLIENTS, decode_bundle
from swarm.cli.dtn import config_text
from swarm.dtn.agents import REGISTRY, carriers, check_agent
from swarm.dtn.agents.base import AgentPlan, ContactLoad, LinkView, Peer, UserConfigError
from swarm.dtn.agents.hdtn.agent import parse_counters, readiness
from swarm.dtn.agents.hdtn.plan import APP_PORT, LOCAL_PORT, ROUTER_BASE, plan_hdtn, run_contact_plan
from swarm.dtn.contacts import parse_contact_plan
from swarm.dtn.plan import plan_agents
from swarm.spec.dtn import DtnSpec

HDTN = REGISTRY["hdtn"]
LINKS = {("sat01", "ground"): LinkView(2.0, 100_000_000), ("sat01", "sat02"): LinkView(0.5, 10_000_000)}
PEERS = [Peer("sat02", "10.9.0.3", 2, "ipn:2.0", "hdtn"), Peer("ground", "10.9.0.4", 3, "ipn:3.0", "hdtn")]
TCP = DtnSpec(agent="hdtn", cla="tcp", eid="ipn")


def link_of(a: str, b: str) -> LinkView:
    return LINKS.get((a, b), LinkView())


def sat01(piece: DtnSpec = TCP, user: str = "", peers=PEERS) -> AgentPlan:
    return plan_hdtn("sat01", 1, piece, peers, "/var/lib/swarm-dtn", link_of, user, "/home/me/mine.json")


def test_golden_tcpclv4_node():
    text = config_text(sat01())
    assert text == golden("hdtn_sat01_tcp.txt", text)


def test_the_router_has_an_isl_induct_an_outduct_per_peer_router_and_the_applications_on_loopback():
    plan = sat01()
    config = json.loads(plan.files["hdtn.json"])
    assert config["myNodeId"] == 1 + ROUTER_BASE and plan.node_id == "ipn:1.0" and plan.agent == "hdtn"
    assert [(i["convergenceLayer"], i["boundPort"]) for i in config["inductsConfig"]["inductVector"]] == \
        [("tcpcl_v4", 4556), ("stcp", LOCAL_PORT)]
    assert [(o["convergenceLayer"], o["nextHopNodeId"], o["remoteHostname"], o["remotePort"])
            for o in config["outductsConfig"]["outductVector"]] == \
        [("tcpcl_v4", 2 + ROUTER_BASE, "10.9.0.3", 4556), ("tcpcl_v4", 3 + ROUTER_BASE, "10.9.0.4", 4556),
         ("stcp", 1, "127.0.0.1", APP_PORT)]
    assert plan.expected_peers == ("2", "3") and plan.argv == ["sh", "/var/lib/swarm-dtn/start.sh"]
    start = plan.files["start.sh"]
    assert "hdtn-one-process --hdtn-config-file=/var/lib/swarm-dtn/hdtn.json " \
           "--contact-plan-file=/var/lib/swarm-dtn/contacts.json &" in start
    assert "hdtn_app.py serve --port 4558 --node 1 --service 1 &" in start and "echo 1 > node-number" in start


def test_the_contact_plan_joins_every_two_routers_at_the_links_rate_and_each_router_to_its_applications():
    contacts = json.loads(sat01().files["contacts.json"])["contacts"]
    r = ROUTER_BASE
    by_pair = {(c["source"], c["dest"]): (c["rateBitsPerSec"], c["owlt"]) for c in contacts}
    assert {k for k in by_pair if k[1] < r} == {(1 + r, 1), (2 + r, 2), (3 + r, 3)}
    assert by_pair[(1 + r, 3 + r)] == (100_000_000, 2) and by_pair[(1 + r, 2 + r)] == (10_000_000, 1)
    assert by_pair[(2 + r, 3 + r)] == (0, 0)  # no impairment known: unlimited, no delay
    assert len(contacts) == 3 + 6 and [c["contact"] for c in contacts] == list(range(9))
    assert all(c["startTime"] == 0 and c["endTime"] == 30 * 86400 for c in contacts)


LTP = DtnSpec(agent="hdtn", cla="ltp", eid="ipn", ltp={"segment": 8000, "margin": "0.2s", "rtx_limit": 7,
                                                       "rate": "50Mbit"})


def test_golden_ltp_node():
    text = config_text(sat01(LTP))
    assert text == golden("hdtn_sat01_ltp.txt", text)


def test_ltp_is_an_induct_and_an_outduct_per_peer_engine_all_on_one_port():
    config = json.loads(plan_hdtn("sat01", 1, LTP, PEERS, "/w", link_of, engine=11).files["hdtn.json"])
    ins = [i for i in config["inductsConfig"]["inductVector"] if i["convergenceLayer"] == "ltp_over_udp"]
    outs = [o for o in config["outductsConfig"]["outductVector"] if o["convergenceLayer"] == "ltp_over_udp"]
    assert [(i["boundPort"], i["thisLtpEngineId"], i["remoteLtpEngineId"], i["ltpRemoteUdpHostname"]) for i in ins] == \
        [(1113, 11, 2, "10.9.0.3"), (1113, 11, 3, "10.9.0.4")]
    assert [(o["ltpSenderBoundPort"], o["thisLtpEngineId"], o["remoteLtpEngineId"], o["nextHopNodeId"],
             o["remoteHostname"], o["remotePort"]) for o in outs] == \
        [(1113, 11, 2, 2 + ROUTER_BASE, "10.9.0.3", 1113), (1113, 11, 3, 3 + ROUTER_BASE, "10.9.0.4", 1113)]
    assert {(o["ltpDataSegmentMtu"], o["oneWayMarginTimeMs"], o["ltpMaxRetriesPerSerialNumber"]) for o in outs} == \
        {(8000, 200, 7)}
    # one-way light time: the slower direction of the link (sat01->ground 2 s, ground->sat01 not impaired)
    assert [o["oneWayLightTimeMs"] for o in outs] == [500, 2000] == [i["oneWayLightTimeMs"] for i in ins]
    assert all("numRxCircularBufferBytesPerElement" not in i for i in ins)  # HDTN refuses it on an LTP induct
    # no sender pings: with them HDTN holds a link down until its first ping comes back (LTP_PING_S)
    assert [o["ltpSenderPingSecondsOrZeroToDisable"] for o in outs] == [0, 0]


def test_stcp_is_hdtns_own_tcp_cla_on_the_isl_and_only_hdtn_carries_it():
    plan = sat01(DtnSpec(agent="hdtn", cla="stcp", eid="ipn"))
    config = json.loads(plan.files["hdtn.json"])
    assert [(i["convergenceLayer"], i["boundPort"]) for i in config["inductsConfig"]["inductVector"]] == \
        [("stcp", 4556), ("stcp", LOCAL_PORT)]
    assert [o["remotePort"] for o in config["outductsConfig"]["outductVector"]] == [4556, 4556, APP_PORT]
    assert plan.expected_peers == () and carriers("stcp") == ["hdtn"]
    with pytest.raises(ValueError, match=r"^dtn.cla 'stcp': agent 'dtn7' does not carry it"):
        check_agent(DtnSpec(agent="dtn7", cla="stcp"))


def test_the_receive_slots_are_datagrams_of_the_segment_size_not_udps_largest():
    """HDTN allocates 1000 slots per LTP induct at start, each of maxLtpReceiveUdpPacketSizeBytes."""
    config = json.loads(sat01(LTP).files["hdtn.json"])
    assert config["maxLtpReceiveUdpPacketSizeBytes"] == 8000 + 512
    assert {i["numRxCircularBufferElements"] for i in config["inductsConfig"]["inductVector"]} == {1000}
    assert json.loads(sat01().files["hdtn.json"])["maxLtpReceiveUdpPacketSizeBytes"] == 65536  # no LTP


def test_ltp_sessions_in_flight_cover_the_links_rate_times_round_trip():
    config = json.loads(sat01(LTP).files["hdtn.json"])
    outs = {o["name"]: o for o in config["outductsConfig"]["outductVector"]}
    # to ground: 100 Mbit/s x (2 x 2 s + 2 s) / 100 kB bundles = 750 bundles in flight, + 1
    assert outs["to ground"]["maxNumberOfBundlesInPipeline"] == 751
    assert outs["to ground"]["maxSumOfBundleBytesInPipeline"] == 75_100_000
    # to sat02: 10 Mbit/s x 3 s / 100 kB = 38: the floor of 50 holds
    assert outs["to sat02"]["maxNumberOfBundlesInPipeline"] == 50
    ins = {i["name"]: i for i in config["inductsConfig"]["inductVector"]}
    assert ins["ltp from ground"]["ltpMaxExpectedSimultaneousSessions"] == 751


def test_ltp_is_paced_by_the_contact_plan_at_the_links_rate_or_dtn_ltp_rate():
    contacts = json.loads(sat01(LTP).files["contacts.json"])["contacts"]
    r = ROUTER_BASE
    by_pair = {(c["source"], c["dest"]): c["rateBitsPerSec"] for c in contacts}
    assert by_pair[(1 + r, 3 + r)] == 100_000_000 and by_pair[(1 + r, 2 + r)] == 10_000_000
    assert by_pair[(2 + r, 3 + r)] == 50_000_000  # no link rate: dtn.ltp.rate
    assert by_pair[(1 + r, 1)] == 0  # to the node's own applications: unlimited


def test_a_peer_running_another_agent_is_its_own_router():
    peers = [Peer("sat02", "10.9.0.3", 2, "ipn:2.0", "dtn7"), PEERS[1]]
    plan = sat01(peers=peers)
    hops = [o["nextHopNodeId"] for o in json.loads(plan.files["hdtn.json"])["outductsConfig"]["outductVector"]]
    assert hops == [2, 3 + ROUTER_BASE, 1]
    pairs = {(c["source"], c["dest"]) for c in json.loads(plan.files["contacts.json"])["contacts"]}
    assert (1 + ROUTER_BASE, 2) in pairs and (2 + ROUTER_BASE, 2) not in pairs


def run_plan(text: str, others: str = "down", agents=None, unlimited=()):
    """sat01's uploaded plan for the contact plan `text` (the contacts on lines `unlimited` at no finite rate, as
    HDTN plans' rate 0 reads), released at 1000.4 s (Unix)."""
    agents = agents or {"sat01": "hdtn", "sat02": "hdtn", "ground": "hdtn"}
    generated = sat01(peers=[Peer(n, "10.9.0.9", i, f"ipn:{i}.0", agents[n]) for i, n in ((2, "sat02"), (3, "ground"))])
    plan = parse_contact_plan(text)
    plan = dataclasses.replace(plan, contacts=tuple(dataclasses.replace(c, rate=math.inf) if c.line in unlimited else c
                                                    for c in plan.contacts))
    load = ContactLoad(plan, 1000.4, {"sat01": 1, "sat02": 2, "ground": 3}, others,
                       lambda a, b: 2.2 if "ground" in (a, b) else 0.0, agents)
    doc, refused = run_contact_plan(generated.files["contacts.json"], load)
    return [tuple(c[k] for k in ("source", "dest", "startTime", "endTime", "rateBitsPerSec", "owlt"))
            for c in doc["contacts"]], refused


def test_the_runs_contact_plan_is_given_between_hops_in_unix_seconds_keeping_the_links_rate():
    rows, refused = run_plan("a contact +0 +60 sat01 sat02 125000000\na contact +5 +15 sat01 ground 1\n"
                             "a contact +15 +60 sat02 ground 1000\na contact +0 +9 sat01 moon 10\n", unlimited=(2,))
    r1, r2, r3 = ROUTER_BASE + 1, ROUTER_BASE + 2, ROUTER_BASE + 3
    forever = 1000 + 30 * 86400
    assert rows == [(r1, 1, 0, forever, 0, 0), (r2, 2, 0, forever, 0, 0), (r3, 3, 0, forever, 0, 0),  # applications
                    (r1, r2, 1000, 1060, 1_000_000_000, 0),   # the plan's rate, bytes/s -> bit/s
                    (r1, r3, 1005, 1015, 100_000_000, 3),     # no finite rate: the rate the start gave that hop
                    (r2, r3, 1015, 1060, 8000, 3)]            # the link's delay, whole seconds up
    assert refused == ["line 4: contact sat01 -> moon: not two DTN nodes of the swarm"]


def test_pairs_the_plan_does_not_name_keep_their_started_contacts_only_when_others_keep():
    plan = "a contact +0 +60 sat01 sat02 125000000\n"
    down, _ = run_plan(plan, "down")
    keep, _ = run_plan(plan, "keep")
    r1, r3 = ROUTER_BASE + 1, ROUTER_BASE + 3
    assert not [r for r in down if {r[0], r[1]} == {r1, r3}]
    assert (r1, r3, 0, 1000 + 30 * 86400, 100_000_000, 2) in keep and (r3, r1, 0, 1000 + 30 * 86400, 0, 0) in keep


def test_a_range_of_the_plan_gives_the_light_time_and_another_agents_node_is_its_own_hop():
    rows, _ = run_plan("a contact +0 +60 sat01 ground 1000\na range +0 +60 sat01 ground 4.2\n",
                       agents={"sat01": "hdtn", "sat02": "hdtn", "ground": "ion"})
    assert (ROUTER_BASE + 1, 3, 1000, 1060, 8000, 5) in rows
    assert not [r for r in rows if r[0] == ROUTER_BASE + 3 or r[1] == ROUTER_BASE + 3]


def test_the_api_helper_makes_times_relative_to_the_upload_and_drops_what_is_over():
    doc = {"contacts": [{"contact": 0, "startTime": 0, "endTime": 900, "source": 1, "dest": 2},
                        {"contact": 1, "startTime": 0, "endTime": 1100, "source": 1, "dest": 2},
                        {"contact": 2, "startTime": 1005, "endTime": 1015, "source": 2, "dest": 1}]}
    out = hdtn_api.relative_to(doc, 1000.4)["contacts"]
    assert [(c["contact"], c["startTime"], c["endTime"]) for c in out] == [(0, 0, 100), (1, 5, 15)]


def test_through_the_swarm_planner_peers_carry_their_agents():
    piece = DtnSpec(agent="hdtn", cla="tcp", eid="ipn")
    nodes = [("sat01", "10.9.0.2", piece), ("sat02", "10.9.0.3", piece), ("sat03", "10.9.0.4", piece)]
    plans = plan_agents(nodes, "10.9.0.0/24", lambda n: "/w")
    hops = [o["nextHopNodeId"] for o in json.loads(plans[2].files["hdtn.json"])["outductsConfig"]["outductVector"]]
    assert hops == [1 + ROUTER_BASE, 2 + ROUTER_BASE, 3] and [p.agent for p in plans] == ["hdtn"] * 3


@pytest.mark.parametrize("piece, message", [
    (DtnSpec(agent="hdtn", cla="tcp"), "dtn.eid 'dtn': agent 'hdtn' speaks ipn only"),
    (DtnSpec(agent="hdtn", cla="mtcp", eid="ipn"), "dtn.cla 'mtcp': agent 'hdtn' carries tcp, udp, ltp, stcp here"),
    (DtnSpec(agent="hdtn", cla="ltp", eid="ipn", ltp={"rate": "1Gbit", "red": 0.5}),
     "dtn.ltp.red 0.5: agent 'hdtn' sends every block red"),
    (DtnSpec(agent="hdtn", cla="ltp", eid="ipn", ltp={"rate": "1Gbit", "peers": [{"engine": 77,
                                                                                "address": "192.0.2.7:1113"}]}),
     "dtn.ltp.peers: agent 'hdtn' reaches swarm nodes only here"),
    (DtnSpec(agent="hdtn", cla="tcp", eid="ipn", peers="auto"), "dtn.peers 'auto': agent 'hdtn' needs static peers"),
    (DtnSpec(agent="hdtn", cla="tcp", eid="ipn", routing="static", routes=[{"to": "ipn:3.0", "via": "ipn:2.0"}]),
     "dtn.routes: agent 'hdtn' routes by its contact plan"),
])
def test_what_hdtn_cannot_run_is_one_line_naming_the_field(piece, message):
    with pytest.raises(ValueError) as err:
        sat01(piece)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_ltp_link_with_no_rate_to_pace_at_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"^dtn.ltp.rate: link sat01->sat02 has no rate to pace LTP at; give the "):
        plan_hdtn("sat01", 1, DtnSpec(agent="hdtn", cla="ltp", eid="ipn"), PEERS, "/w", lambda a, b: LinkView())


def test_a_node_number_that_is_another_nodes_router_is_refused():
    peers = [Peer("sat02", "10.9.0.3", 1 + ROUTER_BASE, f"ipn:{1 + ROUTER_BASE}.0", "hdtn")]
    with pytest.raises(ValueError, match=rf"^dtn.number 1: .* and {1 + ROUTER_BASE} is another node's number here$"):
        sat01(peers=peers)


@pytest.mark.parametrize("cla", ["mtcp", "http"])
def test_clas_it_lacks_are_refused_by_the_registry(cla):
    with pytest.raises(ValueError, match=rf"^dtn.cla '{cla}': agent 'hdtn' does not carry it \(it carries tcp, udp, ltp, stcp;"):
        check_agent(DtnSpec(agent="hdtn", cla=cla, eid="ipn"))


def test_the_registry_knows_hdtn_and_what_it_carries():
    assert HDTN.clas == ("tcp", "udp", "ltp", "stcp") and all("hdtn" in carriers(c) for c in HDTN.clas)
    assert not HDTN.ltp_by_ltpcla  # its own LTP engine: no swarm-ltpcla beside it
    assert HDTN.install.user_tree and HDTN.install.cache_env == "SWARM_HDTN_INSTALL"
    assert HDTN.install.programs == ("hdtn-one-process",) and Path(HDTN.install.dockerfile).exists()
    assert HDTN.needs_containers and HDTN.client(TCP)["client"] == "hdtn-stcp" and "hdtn-stcp" in CLIENTS


def test_the_guard_keeps_the_loopback_ports_to_loopback():
    rules = HDTN.guard(TCP, "10.9.0.0/24")
    assert 'iif "lo" accept' in rules and "tcp dport { 4557, 4558, 8086, 10200, 10305 } reject with tcp reset" in rules
    assert rules.index('iif "lo" accept') < rules.index("4557, 4558")


def test_the_users_file_is_merged_over_hdtn_json():
    user = '{"storageConfig": {"totalStorageCapacityBytes": 5000}, "enforceBundlePriority": true}'
    plan = sat01(user=user)
    config = json.loads(plan.files["hdtn.json"])
    assert config["storageConfig"]["totalStorageCapacityBytes"] == 5000 and config["enforceBundlePriority"] is True
    assert config["storageConfig"]["storageImplementation"] == "asio_single_threaded"
    assert plan.files["user.json"] == user
    with pytest.raises(UserConfigError) as err:
        sat01(user='{\n  "a": 1,\n  oops\n}')
    assert str(err.value).startswith("dtn.config /home/me/mine.json: line 3: not JSON")
    with pytest.raises(UserConfigError, match="line 1: expected a JSON object"):
        sat01(user="[1, 2]")


def test_what_the_router_and_the_application_side_say_is_read_back():
    plan = sat01()
    line = "[ingress][info]: TcpclV4 Induct 10.9.0.3:40000 received valid SessionInit from remote with EID ipn:{}.0\n"
    log = line.format(2 + ROUTER_BASE)
    assert readiness(plan, log) == "no TCPCLv4 session with 3"
    assert readiness(plan, log + line.format(3 + ROUTER_BASE)) is None
    assert sat01(DtnSpec(agent="hdtn", cla="udp", eid="ipn")).expected_peers == ()
    c = parse_counters(f"1\n---\n4\n---\n2\n---\n{log}", TCP)
    assert (c.eid, c.peers, c.delivered, c.stored, c.forwarded, c.clas) == ("ipn:1.0", ["2"], 4, 0, 0, ["tcp"])
    told = '{"received": 7, "forwarded": 5, "failed": 1, "stored": 3}'
    c = parse_counters(f"1\n---\n4\n---\n2\n---\n{log}---\n{told}\n", TCP)
    assert (c.stored, c.delivered, c.forwarded, c.received, c.failed) == (3, 4, 5, 7, 1)
    err = "[egress][error]: something failed"
    gui = '[telem][fatal]: Cannot find "/usr/local/share/HDTN/gui/index.html" : make sure document-root is set properly'
    assert HDTN.failure_lines(f"ok\n{gui}\n{err}\nHDTN start: x\n") == [(None, err), (None, "HDTN start: x")]


def test_the_routers_counters_are_its_isl_ducts_and_storage_from_its_telemetry():
    """HDTN's get_inducts / get_outducts / get_storage answers (keys as HDTN's TelemetryDefinitions writes them),
    its ducts in hdtn.json's order: the loopback induct and outduct (the node's applications) are not the ISL's."""
    config = json.loads(sat01().files["hdtn.json"])  # inducts: ISL, applications; outducts: sat02, ground, apps
    inducts = {"allInducts": [
        {"convergenceLayer": "tcpcl_v4", "inductConnections": [{"totalBundlesReceived": 4}, {"totalBundlesReceived": 2}]},
        {"convergenceLayer": "stcp", "inductConnections": [{"totalBundlesReceived": 50}]}]}
    outducts = {"allOutducts": [{"convergenceLayer": "tcpcl_v4", "totalBundlesSent": 3, "totalBundlesFailedToSend": 1},
                                {"convergenceLayer": "tcpcl_v4", "totalBundlesSent": 2, "totalBundlesFailedToSend": 0},
                                {"convergenceLayer": "stcp", "totalBundlesSent": 40, "totalBundlesFailedToSend": 0}]}
    storage = {"numBundlesOnDisk": 9, "usedSpaceBytes": 90000}
    assert hdtn_api.tally(config, inducts, outducts, storage) == {"received": 6, "forwarded": 5, "failed": 1,
                                                                  "stored": 9}
    assert hdtn_api.tally(config, {"allInducts": [{"inductConnections": "[]"}]}, {}, {}) == {  # none yet
        "received": 0, "forwarded": 0, "failed": 0, "stored": 0}


def test_crc16_x25_is_the_standard_one():
    assert hdtn_app.crc16_x25(b"123456789") == 0x906E  # the CRC catalogue's check value for CRC-16/X-25


def test_a_bundle_made_here_reads_back_with_the_traffic_programs_decoder():
    raw = hdtn_app.make_bundle("ipn:1.2", "ipn:3.1", b"hello", 812_345_678_901, 7, 3_600_000)
    got = decode_bundle(raw)
    assert (got["src"], got["dst"], got["created_ms"], got["cts_seq"], got["lifetime_ms"], got["payload"]) == \
        ("ipn:1.2", "ipn:3.1", 812_345_678_901, 7, 3_600_000, b"hello")
    assert got["previous"] == "ipn:1.0"  # a previous node block without a CRC (hdtn_app.PREVIOUS_NODE says why)
    assert b"\x85\x06\x02\x00\x00" in raw
    # the primary block's CRC-16 checks: computed over the block with the CRC field zeroed
    primary = raw[1:raw.index(b"\x85\x06\x02")]
    assert hdtn_app.crc16_x25(primary[:-2] + b"\0\0").to_bytes(2, "big") == primary[-2:]
    with pytest.raises(ValueError, match="HDTN nodes speak ipn only"):
        hdtn_app.make_bundle("ipn:1.2", "dtn://x/in", b"", 0, 0, 1)


def test_sequence_numbers_are_never_reused(tmp_path):
    assert [hdtn_app.next_seq(str(tmp_path)) for _ in range(3)] == [0, 1, 2]


def test_a_bundle_still_being_written_is_never_taken(tmp_path, monkeypatch):
    """The race a `dtn` experiment hit on HDTN: a reader polling inbox/ took the half-written file (its name ended
    in .bundle too) and the application side died renaming it. Here a reader runs while the file is open."""
    seen = []

    class Writing:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:2])
            self.f.flush()
            seen.append(hdtn_app.take_bundle(str(tmp_path)))  # a client reads inbox/ at the worst moment
            self.f.write(data[2:])

    def opening(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return Writing(f) if "w" in mode else f
    (tmp_path / hdtn_app.INBOX).mkdir()
    monkeypatch.setattr(hdtn_app, "open", opening, raising=False)
    hdtn_app.file_bundle(str(tmp_path), b"whole", 1)
    assert seen == [None] and hdtn_app.take_bundle(str(tmp_path)) == b"whole"


def test_bundles_cross_stcp_into_the_inbox_and_out_to_the_router(tmp_path):
    """The application side over real loopback sockets: what a router sends it is filed and taken by service once;
    what it sends is one STCP frame (length, bundle) on the router's induct."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    threading.Thread(target=hdtn_app.serve, args=(str(tmp_path), port), daemon=True).start()
    wait_until(lambda: (tmp_path / hdtn_app.READY).exists(), 30, "the application side listening")
    bundles = [hdtn_app.make_bundle("ipn:9.2", f"ipn:1.{s}", f"b{i}".encode(), 1000 + i, 0, 60_000)
               for i, s in enumerate((1, 5, 1))]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as router:
        router.sendall(struct.pack("!I", 0))  # a keepalive
        for b in bundles:
            router.sendall(struct.pack("!I", len(b)) + b)
    wait_until(lambda: (tmp_path / hdtn_app.DELIVERED).exists() and
               (tmp_path / hdtn_app.DELIVERED).read_text() == "3", 30, "three bundles filed")
    client = CLIENTS["hdtn-stcp"]
    (tmp_path / "node-number").write_text("1\n")
    c = client({"workdir": str(tmp_path)})
    taken = [decode_bundle(c.take("1"))["payload"], decode_bundle(c.take("1"))["payload"]]
    assert taken == [b"b0", b"b2"] and c.take("1") is None and decode_bundle(c.take("5"))["payload"] == b"b1"
    with socket.socket() as srv:  # the router's induct
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        sender = hdtn_app.Sender(str(tmp_path), 1, srv.getsockname()[1])
        bid = sender.send("ipn:3.1", b"out", 60)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(10)
            size = struct.unpack("!I", conn.recv(4))[0]
            data = b""
            while len(data) < size:
                data += conn.recv(size - len(data))
        sender.close()
    got = decode_bundle(data)
    assert (got["src"], got["dst"], got["payload"]) == ("ipn:1.2", "ipn:3.1", b"out")
    assert bid == f"ipn:1.2-{got['created_ms']}-{got['cts_seq']}" and (tmp_path / hdtn_app.SENT).read_text() == "1"
    assert abs(got["created_ms"] / 1000 + hdtn_app.DTN_EPOCH - time.time()) < 60
