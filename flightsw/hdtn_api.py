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
"""
from __future__ import annotations

import argparse
import json
import sys
import time

API_PORT = 10305  # swarm.dtn.agents.hdtn.plan.ZMQ_PORTS[1]
ANSWER_S = 10.0  # HDTN answers on its telemetry thread within its next interval (about a second)


def relative_to(plan: dict, now: float) -> dict:
    """`plan` (times in Unix s) with times in whole seconds from `now`; contacts over by `now` dropped (pure)."""
    out: list[dict] = []
    for c in plan.get("contacts", []):
        end = round(c["endTime"] - now)
        if end > 0:
            out.append({**c, "contact": len(out), "startTime": max(0, round(c["startTime"] - now)), "endTime": end})
    return {"contacts": out}


def call(command: dict, port: int, timeout: float = ANSWER_S) -> dict:
    """Send one API command and return HDTN's answer (the JSON object it replies with); OSError without one."""
    import zmq  # Debian's python3-zmq, in the HDTN node image only

    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    try:
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send_json(command)
        parts = sock.recv_multipart()
    except zmq.Again:
        raise OSError(f"no answer from HDTN's telemetry API on port {port} within {timeout:g} s") from None
    finally:
        sock.close()
    for part in reversed(parts):
        try:
            answer = json.loads(part)
        except ValueError:
            continue
        if isinstance(answer, dict):
            return answer
    raise OSError(f"HDTN's answer was no JSON object: {b' '.join(parts)[:200]!r}")


def upload_contacts(path: str, port: int) -> int:
    with open(path) as f:
        plan = relative_to(json.load(f), time.time())
    try:
        answer = call({"apiCall": "upload_contact_plan", "contactPlanJson": json.dumps(plan)}, port)
    except OSError as exc:
        print(f"HDTN did not take the contact plan: {exc}", file=sys.stderr)
        return 1
    if not answer.get("success"):
        print(f"HDTN did not take the contact plan: {json.dumps(answer)[:300]}", file=sys.stderr)
        return 1
    print(f"HDTN took {len(plan['contacts'])} contacts")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="hdtn_api.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("upload-contacts")
    u.add_argument("file")
    u.add_argument("--port", type=int, default=API_PORT)
    args = ap.parse_args(argv)
    return upload_contacts(args.file, args.port)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
