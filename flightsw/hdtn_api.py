#!/usr/bin/env python3
"""HDTN's telemetry API from inside a node: JSON commands over ZeroMQ (a REQ socket to 127.0.0.1:10305, the port
hdtn-one-process binds as hdtn.json's zmqBoundTelemApiPortPath), as HDTN's own test scripts speak it. pyzmq is
Debian's python3-zmq, installed in the HDTN node image (images/hdtn/Dockerfile): a ZeroMQ peer needs ZMTP's
handshake and framing, which a well-kept binding does and hand-written socket code would only copy.

    hdtn_api.py upload-contacts FILE [--port 10305]
        FILE: an HDTN contact plan whose times are Unix seconds (swarm.dtn.agents.hdtn.plan.run_contact_plan). HDTN
        reads an uploaded plan's times from the moment it takes it, so they are made relative to now, in whole
        seconds (a contact already open starts at 0; one already over is left out), and uploaded. Exit 1 with
        HDTN's answer, or with "no answer", when the router did not take it.
    hdtn_api.py counters [--config hdtn.json] [--port 10305] [--timeout S]
        one JSON line: bundles received and forwarded on the ISL, failed sends, bundles in storage (HDTN's
        get_inducts, get_outducts and get_storage, asked at once: HDTN answers them in its next second)
"""
from __future__ import annotations

import argparse
import json
import sys
import time

API_PORT = 10305  # swarm.dtn.agents.hdtn.plan.ZMQ_PORTS[1]
LOCAL_PORT = 4557  # the router's STCP induct the node's applications send into (swarm.dtn.agents.hdtn.plan)
ANSWER_S = 10.0  # HDTN answers on its telemetry thread within its next interval (about a second)


def relative_to(plan: dict, now: float) -> dict:
    """`plan` (times in Unix s) with times in whole seconds from `now`; contacts over by `now` dropped (pure)."""
    out: list[dict] = []
    for c in plan.get("contacts", []):
        end = round(c["endTime"] - now)
        if end > 0:
            out.append({**c, "contact": len(out), "startTime": max(0, round(c["startTime"] - now)), "endTime": end})
    return {"contacts": out}


def ask(commands: list[dict], port: int, timeout: float = ANSWER_S) -> list[dict]:
    """Send API commands at once (a REQ socket each: HDTN answers every waiting request in one interval) and return
    HDTN's answers in order (the JSON object each replies with); OSError when one does not come."""
    import zmq  # Debian's python3-zmq, in the HDTN node image only

    ctx = zmq.Context.instance()
    socks = []
    try:
        for command in commands:
            sock = ctx.socket(zmq.REQ)
            socks.append(sock)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
            sock.connect(f"tcp://127.0.0.1:{port}")
            sock.send_json(command)
        return [_answer(sock.recv_multipart()) for sock in socks]
    except zmq.Again:
        raise OSError(f"no answer from HDTN's telemetry API on port {port} within {timeout:g} s") from None
    finally:
        for sock in socks:
            sock.close()


def _answer(parts: list[bytes]) -> dict:
    for part in reversed(parts):
        try:
            answer = json.loads(part)
        except ValueError:
            continue
        if isinstance(answer, dict):
            return answer
    raise OSError(f"HDTN's answer was no JSON object: {b' '.join(parts)[:200]!r}")


def _listed(value) -> list:
    return value if isinstance(value, list) else []  # HDTN writes an empty list as the string "[]"


def tally(config: dict, inducts: dict, outducts: dict, storage: dict) -> dict:
    """The node's counters from HDTN's telemetry (pure): bundles received on the ISL inducts, sent and failed on the
    ISL outducts (the router's handing to its node's applications on loopback is `delivered`, counted by them), and
    bundles in storage. HDTN lists inducts and outducts in its configuration's order, so hdtn.json tells which are
    the ISL's."""
    local_in = [i.get("boundPort") == LOCAL_PORT for i in config.get("inductsConfig", {}).get("inductVector", [])]
    local_out = [o.get("remoteHostname") == "127.0.0.1"
                 for o in config.get("outductsConfig", {}).get("outductVector", [])]
    received = sum(c.get("totalBundlesReceived", 0)
                   for i, ind in enumerate(inducts.get("allInducts", []))
                   if not (i < len(local_in) and local_in[i]) for c in _listed(ind.get("inductConnections")))
    isl_out = [o for i, o in enumerate(outducts.get("allOutducts", [])) if not (i < len(local_out) and local_out[i])]
    return {"received": received, "forwarded": sum(o.get("totalBundlesSent", 0) for o in isl_out),
            "failed": sum(o.get("totalBundlesFailedToSend", 0) for o in isl_out),
            "stored": storage.get("numBundlesOnDisk", 0)}


def upload_contacts(path: str, port: int) -> int:
    with open(path) as f:
        plan = relative_to(json.load(f), time.time())
    try:
        [answer] = ask([{"apiCall": "upload_contact_plan", "contactPlanJson": json.dumps(plan)}], port)
    except OSError as exc:
        print(f"HDTN did not take the contact plan: {exc}", file=sys.stderr)
        return 1
    if not answer.get("success"):
        print(f"HDTN did not take the contact plan: {json.dumps(answer)[:300]}", file=sys.stderr)
        return 1
    print(f"HDTN took {len(plan['contacts'])} contacts")
    return 0


def counters(config_path: str, port: int, timeout: float) -> int:
    with open(config_path) as f:
        config = json.load(f)
    try:
        answers = ask([{"apiCall": "get_inducts"}, {"apiCall": "get_outducts"}, {"apiCall": "get_storage"}], port,
                      timeout)
    except OSError as exc:
        print(f"HDTN did not tell its counters: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(tally(config, *answers)))
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="hdtn_api.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("upload-contacts")
    u.add_argument("file")
    u.add_argument("--port", type=int, default=API_PORT)
    c = sub.add_parser("counters")
    c.add_argument("--config", default="hdtn.json")
    c.add_argument("--port", type=int, default=API_PORT)
    c.add_argument("--timeout", type=float, default=ANSWER_S)
    args = ap.parse_args(argv)
    if args.cmd == "counters":
        return counters(args.config, args.port, args.timeout)
    return upload_contacts(args.file, args.port)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
