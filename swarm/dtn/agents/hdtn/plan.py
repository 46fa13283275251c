"""HDTN's configuration for one node, from the swarm spec (pure, golden-tested): the files hdtn-one-process reads.

HDTN (NASA's High-rate DTN) is a bundle router: applications are BP nodes of their own that reach it over a
convergence layer (HDTN's bpgen/bpsink do so). A swarm node running HDTN is therefore two BP nodes in one
namespace:

    the node's applications   ipn:<N>.1, N the node's number as for every agent (dtn.number, ltp.engine or its
                              index): flightsw/hdtn_app.py takes what the router delivers to ipn:<N>.* on
                              127.0.0.1:APP_PORT (STCP) and sends the node's bundles into the router's STCP
                              induct on 127.0.0.1:LOCAL_PORT
    its HDTN router           ipn:<N + ROUTER_BASE>.0: hdtn-one-process, one induct on the ISL for the swarm's CLA
                              (`tcp`: TCPCLv4, `udp`, `stcp`; `ltp`: one LTP-over-UDP induct per peer, all on port 1113),
                              one outduct per peer toward the peer's router, and the local STCP induct and outduct
                              above

    hdtn.json       HDTN's configuration (HdtnConfig: inducts, outducts, storage from `dtn.storage.limit`)
    contacts.json   its contact plan (HDTN's JSON form, times from the router's start): a contact each way between
                    the routers of every two nodes it knows (itself and its peers) at the link's rate, and from
                    each router to its node's applications, for HORIZON_S; HDTN's CGR routes over it (bundles to a
                    node whose direct link is cut go through another router while a contact says one leads there)
    start.sh        starts the application side, then hdtn-one-process; TERM ends both
    user.json       the user's file (`dtn.config`), a JSON object merged over hdtn.json (their inducts, outducts,
                    storage settings; a key HDTN does not know is HDTN's to refuse)

With `cla: ltp` the router's LTP engine is the node's engine ID (`dtn.ltp.engine`, else its index, as for every
agent) and each peer's is the peer's: HDTN's LTP engine manager serves all of them on one UDP port and tells them
apart by engine ID, so an ION or swarm-ltpcla engine is a peer like another. Each peer's one-way light time is the
slower direction of its link, the pacing rate the link's (or `dtn.ltp.rate`) through the contact plan, and the
sessions in flight (HDTN's pipeline; one bundle per LTP session, HDTN does not aggregate) cover the link's rate x
round trip. Its sender pings are off (LTP_PING_S says why).

HDTN speaks only `ipn:` (dtn.eid: ipn). A peer running another agent is a BP node that routes for itself: the
router's outduct and contacts name the peer's own number (Peer.agent tells which).
"""
from __future__ import annotations

import copy
import json
import math
from typing import Any, Callable, Optional

from swarm.dtn.agents.base import AgentPlan, ContactLoad, LinkView, Peer, UserConfigError
from swarm.dtn.contacts import Contact, pair, write_hdtn
from swarm.spec.dtn import DtnSpec, node_key

PROGRAM = "hdtn-one-process"
START = "start.sh"
CONFIG = "hdtn.json"
CONTACTS = "contacts.json"
USER = "user.json"
#: The in-node application side (in the node image, with flightsw/).
HELPER = "/opt/swarm/flightsw/hdtn_app.py"
#: A node's router is ipn:<N + ROUTER_BASE>.0 (HDTN's contact plans read node numbers as 32-bit ints).
ROUTER_BASE = 1_000_000
#: Loopback ports: the router's STCP induct the node's applications send into, and the application side's STCP
#: listener the router delivers to (both refused from anywhere but loopback by the node's guard).
LOCAL_PORT = 4557
APP_PORT = 4558
#: HDTN's ZMQ ports (router publisher, telemetry API): bound by hdtn-one-process, refused off loopback too.
ZMQ_PORTS = (10200, 10305)
#: HDTN's web interface (in its default build, beside the telemetry API): also loopback only. Its pages are not in
#: the node image (the image takes the build's bin/ and lib/), so HDTN logs one fatal line about them at start
#: ("Cannot find .../gui/index.html : make sure document-root is set properly") and runs on, the API answering:
#: that line is never taken for why a router stopped.
GUI_PORT = 8086
#: Made by images/hdtn/Dockerfile where the user's hdtn-one-process has HDTN's telemetry API (its default build):
#: the API is asked only there.
API_MARK = "/opt/hdtn/telemetry-api"
GUI_NOISE = "make sure document-root is set"
#: HDTN's names for the swarm's CLAs it carries (dtn.cla -> convergenceLayer).
CLA_NAMES = {"tcp": "tcpcl_v4", "udp": "udp", "ltp": "ltp_over_udp", "stcp": "stcp"}
#: How long the generated contacts last (s): HDTN's router forwards only within a contact.
HORIZON_S = 30 * 86400
#: Storage without dtn.storage.limit (bytes), and the largest bundle the router takes.
DEFAULT_STORAGE = 1 << 30
MAX_BUNDLE = 10_000_000
#: TCPCLv4 segment MRU each side asks for (bytes), and bundles/bytes a router keeps in flight per outduct.
SEGMENT_MRU = 200_000
PIPELINE_BUNDLES = 50
PIPELINE_BYTES = 50_000_000
KEEPALIVE_S = 15
#: LTP: the LTP client service (bundle protocol), random session numbers of 32 bits (the smaller of HDTN's two
#: choices: SDNVs any engine decodes; swarm-ltpcla took them both ways in the live test), segments handed to sendmmsg
#: at once, the most sessions one peer keeps in flight, and the block buffer each receiving session starts with (it
#: grows for larger bundles).
LTP_CLIENT_SERVICE = 1
LTP_RANDOM_BITS = 32
LTP_BATCH = 15
MAX_LTP_SESSIONS = 20_000
LTP_PREALLOCATED = 200_000
#: The bundle size the sessions in flight are sized for: the seeds' ~100 kB (`dtn.tcpcl` is TCPCL's alone). Smaller
#: bundles get fewer bytes in flight than the link's rate x round trip, larger ones more.
LTP_SIZING_BUNDLE = 100_000
#: HDTN allocates each LTP engine's receive ring (1000 datagrams, its examples' size) at start, each slot as large
#: as maxLtpReceiveUdpPacketSizeBytes: the node's segment plus LTP_DATAGRAM_SLACK (LTP's headers and SDNVs), not
#: UDP's largest, so that a node with N peers holds N x 1000 x ~1.9 kB (1,360 B segments) instead of N x 64 MB.
#: A bigger ring (0.2 s of 1 Gbit/s) did not stop HDTN's "buffers full" drops on this 2-core host: its receiving
#: engine falls behind a sender paced at 1 Gbit/s however long the ring (BENCHMARKS.md, "HDTN").
LTP_DATAGRAM_SLACK = 512
#: HDTN's LTP sender pings (a cancel segment of a session that never was, to see the peer engine answer) are off.
#: With them on, HDTN's egress holds an outduct physically down until its first ping is answered, a round trip
#: after start, and stores what arrives meanwhile: measured with experiments/dtn-ltp-delay-hdtn.yaml (2026-12-01),
#: latency p95 at 0 s was 3.5 s with pings and 0.13 s without, and at 4 s one-way the first bundle arrived 10 s
#: after the first send instead of 4 s. Links go down by the contact plan the swarm's links follow, not by pings.
LTP_PING_S = 0


class HdtnConfigError(UserConfigError):
    """The user's file that is no JSON object (file, line, why): one line."""


def router_number(number: int) -> int:
    return number + ROUTER_BASE


def hop(peer: Peer) -> int:
    """The node number a router sends to for `peer`: its HDTN router's, or the peer itself for another agent (a
    BP node that is its own router)."""
    return router_number(int(peer.key)) if peer.agent == "hdtn" else int(peer.key)


def cla_of(piece: DtnSpec) -> str:
    """HDTN's name of the piece's CLA; ValueError naming the field for one this adapter does not run."""
    try:
        return CLA_NAMES[piece.cla]
    except KeyError:
        raise ValueError(f"dtn.cla {piece.cla!r}: agent 'hdtn' carries {', '.join(CLA_NAMES)} here (HDTN's "
                         "TCPCLv4, UDP, LTP and STCP convergence layers)") from None


def user_config(text: str, source: str) -> dict[str, Any]:
    """The user's file -> the JSON object merged over hdtn.json (pure); HdtnConfigError naming the line otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HdtnConfigError(source, exc.lineno, f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise HdtnConfigError(source, 1, "expected a JSON object (keys of HDTN's configuration, e.g. storageConfig)")
    return value


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`: objects key by key, anything else (lists included) replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def induct(cla: str, port: int, name: str) -> dict[str, Any]:
    """One induct of HDTN's configuration (every key its InductsConfig requires for that convergence layer)."""
    out: dict[str, Any] = {"name": name, "convergenceLayer": cla, "boundPort": port,
                           "numRxCircularBufferElements": 1000}
    if cla in ("tcpcl_v4", "udp"):
        out["numRxCircularBufferBytesPerElement"] = 65535 if cla == "udp" else 20000
    if cla in ("tcpcl_v4", "stcp"):
        out["keepAliveIntervalSeconds"] = KEEPALIVE_S
    if cla == "tcpcl_v4":
        out.update({"tcpclV4MyMaxRxSegmentSizeBytes": SEGMENT_MRU, "tlsIsRequired": False, "certificatePemFile": "",
                    "privateKeyPemFile": "", "diffieHellmanParametersPemFile": ""})
    return out


def outduct(cla: str, next_hop: int, host: str, port: int, name: str) -> dict[str, Any]:
    """One outduct of HDTN's configuration toward `next_hop` (a node number) at host:port."""
    out: dict[str, Any] = {"name": name, "convergenceLayer": cla, "nextHopNodeId": next_hop, "remoteHostname": host,
                           "remotePort": port, "maxNumberOfBundlesInPipeline": PIPELINE_BUNDLES,
                           "maxSumOfBundleBytesInPipeline": PIPELINE_BYTES}
    if cla in ("tcpcl_v4", "stcp"):
        out["keepAliveIntervalSeconds"] = KEEPALIVE_S
    if cla == "tcpcl_v4":
        out.update({"tcpclAllowOpportunisticReceiveBundles": True, "tcpclV4MyMaxRxSegmentSizeBytes": SEGMENT_MRU,
                    "tryUseTls": False, "tlsIsRequired": False, "useTlsVersion1_3": False,
                    "doX509CertificateVerification": False, "verifySubjectAltNameInX509Certificate": False,
                    "certificationAuthorityPemFileForVerification": ""})
    return out


def ltp_link(node: str, peer: Peer, piece: DtnSpec, link_of: Callable[[str, str], LinkView]) -> tuple[int, int]:
    """(one-way light time ms, sessions in flight) of the LTP link toward `peer`: the slower of its two directions,
    and the pacing rate (the link's, else `dtn.ltp.rate`) x (round trip + 2 s of queueing) over LTP_SIZING_BUNDLE,
    within [PIPELINE_BUNDLES, MAX_LTP_SESSIONS]. ValueError naming the field for a link with no rate to pace at."""
    out, back = link_of(node, peer.name), link_of(peer.name, node)
    rate = out.rate or piece.ltp.rate
    if not rate:
        raise ValueError(f"dtn.ltp.rate: link {node}->{peer.name} has no rate to pace LTP at; give the link a rate "
                         "(links:) or set dtn.ltp.rate")
    owlt = max(out.delay, back.delay)
    in_flight = rate / 8 * (2 * owlt + 2.0) / LTP_SIZING_BUNDLE
    return round(owlt * 1000), max(PIPELINE_BUNDLES, min(MAX_LTP_SESSIONS, math.ceil(in_flight) + 1))


def ltp_induct(piece: DtnSpec, engine: int, peer: Peer, owlt_ms: int, sessions: int) -> dict[str, Any]:
    """The LTP-over-UDP induct that receives `peer`'s blocks (every key HDTN's InductsConfig requires for it)."""
    ltp, port = piece.ltp, piece.cla_port()
    return {"name": f"ltp from {peer.name}", "convergenceLayer": "ltp_over_udp", "boundPort": port,
            "numRxCircularBufferElements": 1000, "thisLtpEngineId": engine, "remoteLtpEngineId": peer.index,
            "ltpReportSegmentMtu": ltp.segment, "oneWayLightTimeMs": owlt_ms,
            "oneWayMarginTimeMs": round(ltp.margin * 1000), "clientServiceId": LTP_CLIENT_SERVICE,
            "preallocatedRedDataBytes": LTP_PREALLOCATED, "ltpMaxRetriesPerSerialNumber": ltp.rtx_limit,
            "ltpRandomNumberSizeBits": LTP_RANDOM_BITS, "ltpRemoteUdpHostname": peer.isl_ip,
            "ltpRemoteUdpPort": port, "ltpRxDataSegmentSessionNumberRecreationPreventerHistorySize": 1000,
            "ltpMaxExpectedSimultaneousSessions": sessions, "ltpMaxUdpPacketsToSendPerSystemCall": LTP_BATCH,
            "delaySendingOfReportSegmentsTimeMsOrZeroToDisable": 20, "keepActiveSessionDataOnDisk": False,
            "activeSessionDataOnDiskNewFileDurationMs": 2000, "activeSessionDataOnDiskDirectory": "./"}


def ltp_outduct(piece: DtnSpec, engine: int, peer: Peer, owlt_ms: int, sessions: int) -> dict[str, Any]:
    """The LTP-over-UDP outduct toward `peer`'s engine, `sessions` bundles (one LTP session each) in flight."""
    ltp, port = piece.ltp, piece.cla_port()
    out = outduct("ltp_over_udp", hop(peer), peer.isl_ip, port, f"to {peer.name}")
    out.update({"maxNumberOfBundlesInPipeline": sessions,
                "maxSumOfBundleBytesInPipeline": max(PIPELINE_BYTES, sessions * LTP_SIZING_BUNDLE),
                "thisLtpEngineId": engine, "remoteLtpEngineId": peer.index, "ltpDataSegmentMtu": ltp.segment,
                "oneWayLightTimeMs": owlt_ms, "oneWayMarginTimeMs": round(ltp.margin * 1000),
                "clientServiceId": LTP_CLIENT_SERVICE, "numRxCircularBufferElements": 1000,
                "ltpMaxRetriesPerSerialNumber": ltp.rtx_limit, "ltpCheckpointEveryNthDataSegment": 0,
                "ltpRandomNumberSizeBits": LTP_RANDOM_BITS, "ltpSenderBoundPort": port,
                "ltpMaxUdpPacketsToSendPerSystemCall": LTP_BATCH,
                "ltpSenderPingSecondsOrZeroToDisable": LTP_PING_S,
                "delaySendingOfDataSegmentsTimeMsOrZeroToDisable": 20, "keepActiveSessionDataOnDisk": False,
                "activeSessionDataOnDiskNewFileDurationMs": 2000, "activeSessionDataOnDiskDirectory": "./"})
    return out


def isl_ducts(node: str, engine: int, piece: DtnSpec, peers: list[Peer],
              link_of: Callable[[str, str], LinkView]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(inducts, outducts) on the ISL: LTP, one of each per peer; any other CLA, one induct and an outduct per peer."""
    cla, port = cla_of(piece), piece.cla_port()
    if piece.cla != "ltp":
        return ([induct(cla, port, f"isl {piece.cla}")],
                [outduct(cla, hop(p), p.isl_ip, port, f"to {p.name}") for p in peers])
    inducts, outducts = [], []
    for p in peers:
        owlt_ms, sessions = ltp_link(node, p, piece, link_of)
        inducts.append(ltp_induct(piece, engine, p, owlt_ms, sessions))
        outducts.append(ltp_outduct(piece, engine, p, owlt_ms, sessions))
    return inducts, outducts


def hdtn_config(node: str, number: int, piece: DtnSpec, peers: list[Peer], workdir: str, engine: Optional[int] = None,
                link_of: Callable[[str, str], LinkView] = lambda a, b: LinkView()) -> dict[str, Any]:
    """hdtn.json of the router of node `number` (pure); `engine`: its LTP engine ID (default: `number`)."""
    wd = workdir.rstrip("/")
    storage = piece.storage.limit or DEFAULT_STORAGE
    inducts, outducts = isl_ducts(node, number if engine is None else engine, piece, peers, link_of)
    return {
        "hdtnConfigName": f"swarm-emu {node}",
        "userInterfaceOn": False,
        "mySchemeName": "unused_scheme_name",
        "myNodeId": router_number(number),
        "myBpEchoServiceId": 2047,
        "myCustodialSsp": "unused_custodial_ssp",
        "myCustodialServiceId": 0,
        "myRouterServiceId": 100,
        "isAcsAware": False,
        "acsMaxFillsPerAcsPacket": 100,
        "acsSendPeriodMilliseconds": 1000,
        "retransmitBundleAfterNoCustodySignalMilliseconds": 10000,
        "maxBundleSizeBytes": min(MAX_BUNDLE, piece.max_bundle() or MAX_BUNDLE),
        "maxIngressBundleWaitOnEgressMilliseconds": 2000,
        "bufferRxToStorageOnLinkUpSaturation": False,
        # each receive slot a whole datagram: the node's segment and LTP's headers (the most UDP carries otherwise)
        "maxLtpReceiveUdpPacketSizeBytes": piece.ltp.segment + LTP_DATAGRAM_SLACK if piece.cla == "ltp" else 65536,
        "neighborDepletedStorageDelaySeconds": 0,
        "fragmentBundlesLargerThanBytes": 0,
        "enforceBundlePriority": False,
        "zmqBoundRouterPubSubPortPath": ZMQ_PORTS[0],
        "zmqBoundTelemApiPortPath": ZMQ_PORTS[1],
        "inductsConfig": {"inductConfigName": "swarm-emu", "inductVector": [
            *inducts, induct("stcp", LOCAL_PORT, "applications")]},
        "outductsConfig": {"outductConfigName": "swarm-emu", "outductVector": [
            *outducts, outduct("stcp", number, "127.0.0.1", APP_PORT, "to applications")]},
        "storageConfig": {"storageImplementation": "asio_single_threaded", "tryToRestoreFromDisk": False,
                          "autoDeleteFilesOnExit": True, "totalStorageCapacityBytes": storage,
                          "storageDeletionPolicy": "never",
                          "storageDiskConfigVector": [{"name": "d1", "storeFilePath": f"{wd}/store1.bin"}]},
    }


def contact_plan(node: str, number: int, peers: list[Peer], link_of: Callable[[str, str], LinkView],
                 fallback_rate: Optional[int] = None) -> dict:
    """contacts.json (pure): both directions between the routers of every two of the node and its peers, at the
    link's rate (else `fallback_rate`; 0: unlimited, as HDTN reads it) with its one-way delay in whole seconds, and
    each router to its node's applications; all from the router's start for HORIZON_S. HDTN paces an outduct at its
    contact's rate: with LTP that is the only pacing there is (`dtn.ltp.rate` for links without a rate)."""
    members = [(node, number, router_number(number))] + [(p.name, int(p.key), hop(p)) for p in peers]
    rows = [(via, num, 0, HORIZON_S, 0, 0) for _, num, via in members if via != num]  # router -> applications
    for a, _, ha in members:
        for b, _, hb in members:
            if a != b:
                link = link_of(a, b)
                rows.append((ha, hb, 0, HORIZON_S, int(link.rate or fallback_rate or 0),
                             max(1, round(link.delay)) if link.delay else 0))
    return write_hdtn(rows)


def _hop_of(name: str, load: ContactLoad) -> int:
    """The node number a contact of `name` runs to or from: its HDTN router, or the node itself (another agent)."""
    number = load.numbers[name]
    return router_number(number) if load.agents.get(name) == "hdtn" else number


def _light_time(c: Contact, load: ContactLoad) -> int:
    """A contact's one-way light time in whole seconds: its pair's range in the plan at its start, else the link's."""
    for r in load.plan.ranges:
        if pair(r.a, r.b) == pair(c.a, c.b) and r.start <= c.start < r.end:
            return math.ceil(r.owlt)
    return math.ceil(load.owlt(c.a, c.b))


def _unnamed_started(started: list[dict], load: ContactLoad, named: set[tuple[str, str]],
                     forever: int) -> list[tuple[int, int, int, int, int, int]]:
    """The started contacts between two of the swarm's DTN nodes whose pair the plan does not name (others: keep)."""
    hops = {_hop_of(name, load): name for name in load.numbers}
    rows = []
    for c in started:
        a, b = hops.get(c["source"]), hops.get(c["dest"])
        if a and b and pair(a, b) not in named:
            rows.append((c["source"], c["dest"], 0, forever, c["rateBitsPerSec"], c["owlt"]))
    return rows


def run_contact_plan(generated: str, load: ContactLoad) -> tuple[dict, list[str]]:
    """The run's contact plan as a running HDTN router is given it (pure): HDTN's JSON document with times in Unix
    seconds (flightsw/hdtn_api.py makes them relative to the moment it uploads, as HDTN reads an uploaded plan), and
    what of the plan it would not take (one line each). `generated`: the node's contacts.json from its start.

    Like ION, HDTN routes (CGR) over the whole plan and brings an outduct up and down by its own contacts, pacing
    it at the contact's rate. Each contact of the plan between two DTN nodes of the swarm goes from the sender's
    hop (its HDTN router, else the node itself) to the receiver's, at whole seconds from the release; a contact at
    no finite rate keeps the rate the node's start gave that hop (the link's, or `dtn.ltp.rate`, for LTP pacing);
    its one-way light time is the plan's range for the pair, else the link's delay. Pairs the plan names keep only
    the plan's contacts; other pairs keep their started contacts when `load.others` is 'keep', none when 'down'.
    Every HDTN router of the swarm delivers to its node's applications throughout (CGR needs that last hop for
    nodes beyond the node's peers too)."""
    started = json.loads(generated).get("contacts", []) if generated else []
    started_rate = {(c["source"], c["dest"]): c["rateBitsPerSec"] for c in started}
    numbers = load.numbers
    ours = [c for c in load.plan.contacts if c.a in numbers and c.b in numbers and c.a != c.b]
    refused = [f"line {c.line}: contact {c.a} -> {c.b}: not two DTN nodes of the swarm"
               for c in load.plan.contacts if c.a not in numbers or c.b not in numbers]
    forever = round(load.release) + HORIZON_S
    rows = [(router_number(numbers[name]), numbers[name], 0, forever, 0, 0)  # every router -> its applications
            for name in numbers if load.agents.get(name) == "hdtn"]
    if load.others == "keep":
        rows += _unnamed_started(started, load, {pair(c.a, c.b) for c in ours}, forever)
    for c in ours:
        src, dst = _hop_of(c.a, load), _hop_of(c.b, load)
        rate = round(c.rate * 8) if math.isfinite(c.rate) else started_rate.get((src, dst), 0)
        rows.append((src, dst, round(load.release + c.start), round(load.release + c.end), rate,
                     _light_time(c, load)))
    return write_hdtn(rows), refused


def plan_hdtn(node: str, number: int, piece: DtnSpec, peers: list[Peer], workdir: str,
              link_of: Callable[[str, str], LinkView], user_text: str = "", user_source: str = "",
              engine: Optional[int] = None) -> AgentPlan:
    """HDTN on `node` (node number `number`: its applications ipn:<number>.1; LTP engine `engine`, default
    `number`); ValueError (one line naming the field) for a piece it cannot run."""
    if piece.eid != "ipn":
        raise ValueError(f"node {node!r}: dtn.eid {piece.eid!r}: agent 'hdtn' speaks ipn only (set dtn.eid: ipn)")
    cla_of(piece)
    if piece.peers != "static":
        raise ValueError(f"node {node!r}: dtn.peers {piece.peers!r}: agent 'hdtn' needs static peers (HDTN's "
                         "outducts name their peers)")
    if piece.routes:
        raise ValueError(f"node {node!r}: dtn.routes: agent 'hdtn' routes by its contact plan (leave routes out)")
    numbers = {int(p.key) for p in peers} | {number}
    for n in sorted(numbers):
        if router_number(n) in numbers:
            raise ValueError(f"dtn.number {n}: agent 'hdtn' gives node N's router the number N + {ROUTER_BASE}, "
                             f"and {router_number(n)} is another node's number here")
    if piece.cla == "ltp" and piece.ltp.red < 1.0:
        raise ValueError(f"node {node!r}: dtn.ltp.red {piece.ltp.red:g}: agent 'hdtn' sends every block red "
                         "(leave red out or set 1.0)")
    if piece.cla == "ltp" and piece.ltp.peers:
        raise ValueError(f"node {node!r}: dtn.ltp.peers: agent 'hdtn' reaches swarm nodes only here (add the outside "
                         "engine with your own dtn.config: an ltp_over_udp induct and outduct)")
    config = hdtn_config(node, number, piece, peers, workdir, engine, link_of)
    if user_text:
        config = merged(config, user_config(user_text, user_source or "dtn.config"))
    wd = workdir.rstrip("/")
    files = {CONFIG: json.dumps(config, indent=2) + "\n",
             CONTACTS: json.dumps(contact_plan(node, number, peers, link_of,
                                               piece.ltp.rate if piece.cla == "ltp" else None), indent=2) + "\n",
             START: START_SCRIPT.format(node=node, helper=HELPER, app_port=APP_PORT, local_port=LOCAL_PORT,
                                        number=number, service=piece.app_service(), program=PROGRAM, gui_noise=GUI_NOISE,
                                        config=f"{wd}/{CONFIG}", contacts=f"{wd}/{CONTACTS}")}
    if user_text:
        files[USER] = user_text
    return AgentPlan(node=node, argv=["sh", f"{wd}/{START}"], workdir=workdir, node_id=f"ipn:{number}.0",
                     files=files, web_port=piece.web_port,
                     expected_peers=tuple(node_key(p.eid) for p in peers) if piece.cla == "tcp" else (),
                     agent="hdtn")


#: start.sh: the application side first (the router's outduct to it connects at once), then HDTN's router; TERM ends
#: both. "HDTN start: ..." is the line readiness looks for when the router exits, with the first error HDTN logged
#: (e.g. the configuration key it refused).
START_SCRIPT = r"""#!/bin/sh
# HDTN of {node} (swarm-emu, generated): the user's hdtn-one-process as the node's router, ipn:{number}.* its
# applications (flightsw/hdtn_app.py).
cd "$(dirname "$0")"
echo {number} > node-number
rm -f app.ready
python3 {helper} serve --port {app_port} --node {number} --service {service} &
app=$!
i=0
until [ -e app.ready ]; do  # the router's outduct to the applications connects at once when they listen first
    i=$((i + 1)); [ $i -le 300 ] && kill -0 $app 2>/dev/null || {{ echo "HDTN start: the application side did not start"; exit 1; }}
    sleep 0.1
done
{program} --hdtn-config-file={config} --contact-plan-file={contacts} &
hdtn=$!
trap 'kill $hdtn $app 2>/dev/null; wait; exit 0' TERM INT
wait $hdtn
rc=$?
why=$(grep -a -i -e "error\]" -e "fatal\]" dtnd.log | grep -v "{gui_noise}" | head -n 1 | cut -c 1-300)
echo "HDTN start: {program} exited ($rc): ${{why:-see dtnd.log}}"
kill $app 2>/dev/null
exit 1
"""
