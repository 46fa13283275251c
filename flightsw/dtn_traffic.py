#!/usr/bin/env python3
"""DTN traffic for one node: sends bundles through the node's own dtnd and receives what arrives for it.

Standard library only (runs inside every node, like the agent). It talks to the local agent's HTTP API
(dtn7-rs: POST /send?dst=<EID>&lifetime=<s>s to create a bundle, GET /endpoint?in to take the next bundle
delivered to dtn://<node>/in, GET /status/store for the store), on one keep-alive connection per thread.

    dtn_traffic.py run PLAN.json        # or '-' for stdin
    plan = {"node": "sat01", "port": 3000, "service": "in",
            "flows": [{"dst": "ground", "size": 100000, "rate": 10.0}],   # rate: bundles/s, or 0 = as fast as possible
            "release": <epoch s>, "duration": <s>, "drain": <s>,            # send in [release, release+duration)
            "lifetime": <s>, "receive": true, "store_interval": 0.5, "expect": <bundles>, "quiet": <s>,
            "ip_probe": {"bind": <ISL address>, "port": 5999, "rate": 10, "dsts": [{"dst": "ground", "ip": ..}]}}
    dtn_traffic.py recv-once [--port 3000] [--service in]   # one bundle, decoded, as JSON (for `swarm dtn recv`)

Output: JSON lines on stdout, one per event, each stamped with the shared host clock (time.time()); the names are
flightsw/protocol.py's, which the host imports too:
    {"ev": "sent", "dst": .., "seq": n, "t": send start, "t_ack": agent answered, "size": payload bytes, "ok": ..}
    {"ev": "recv", "dup": false, "bid": .., "src": .., "seq": n, "t_sent": .., "t": taken, "created_ms": .., "hops": ..,
     "age_ms": .., "size": .., "bundle_bytes": ..}
    {"ev": "store", "t": .., "bundles": stored (not deleted), "constraints": {name: count}}
    {"ev": "ip_sent", "dst": .., "seq": n, "t": ..} / {"ev": "ip_recv", "src": .., "seq": n, "t_sent": .., "t": ..}
        a UDP probe beside the bundles (same pairs, same path as IP routes it): what plain IP loses
    {"ev": "recv_done", "t": .., "received": n}   the receiver stopped (all expected bundles, quiet, or time up)
    {"ev": "done", "sent": n, "received": n, "errors": n}
Each payload starts with a header (magic, sequence, send time, source node name) so the receiver can match
bundles to what was sent without trusting anything else; the rest is padding to `size`.
"""
from __future__ import annotations

import http.client
import json
import socket
import struct
import sys
import threading
import time

if __package__:  # imported as flightsw.dtn_traffic (the host side's parsers and tests)
    from flightsw import protocol as proto
else:  # run as a script in a node: this directory is sys.path[0]
    import protocol as proto

MAGIC = b"SWDT"
IP_MAGIC = b"SWIP"
IP_HEADER = struct.Struct("!4sIdB")  # magic, sequence, send time, length of the source name
HEADER = struct.Struct("!4sIdB")  # magic, sequence, send time (epoch s), length of the source name
NOTHING = b"Nothing to receive"
DTN_EPOCH = 946_684_800  # 2000-01-01T00:00:00Z in Unix seconds (RFC 9171 DTN time)
POLL_BUSY_S = 0.002  # receiver sleep after an empty poll while bundles are flowing
POLL_IDLE_S = 0.02  # ... and after a second without any bundle
_lock = threading.Lock()


def emit(record: dict) -> None:
    line = proto.event_line(record)
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


# ----------------------------------------------------------------------------------------------- CBOR
def cbor_decode(data: bytes, pos: int = 0):
    """Decode one CBOR item at `pos` (the subset BPv7 uses); return (value, next position)."""
    ib = data[pos]
    major, info = ib >> 5, ib & 0x1F
    pos += 1
    if info < 24:
        arg = info
    elif info in (24, 25, 26, 27):
        n = 1 << (info - 24)
        arg = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    elif info == 31:
        arg = None  # indefinite length
    else:
        raise ValueError(f"CBOR: unsupported additional info {info} at {pos - 1}")
    if major == 0:
        return arg, pos
    if major == 1:
        return -1 - arg, pos
    if major in (2, 3):
        if arg is None:
            raise ValueError("CBOR: indefinite strings are not used by BPv7")
        raw = data[pos:pos + arg]
        return (raw if major == 2 else raw.decode("utf-8", "replace")), pos + arg
    if major == 4:
        items = []
        if arg is None:
            while data[pos] != 0xFF:
                item, pos = cbor_decode(data, pos)
                items.append(item)
            return items, pos + 1
        for _ in range(arg):
            item, pos = cbor_decode(data, pos)
            items.append(item)
        return items, pos
    if major == 5:
        out = {}
        for _ in range(arg or 0):
            k, pos = cbor_decode(data, pos)
            v, pos = cbor_decode(data, pos)
            out[k] = v
        return out, pos
    if major == 6:
        return cbor_decode(data, pos)  # tag: the tagged item
    if major == 7:
        return {20: False, 21: True, 22: None}.get(info, arg), pos
    raise ValueError(f"CBOR: major type {major}")


def eid_text(eid) -> str:
    """A BPv7 endpoint ID ([scheme, ssp]) as text."""
    if not isinstance(eid, list) or len(eid) != 2:
        return str(eid)
    scheme, ssp = eid
    if scheme == 1:
        return "dtn:none" if ssp == 0 else f"dtn:{ssp}"
    if scheme == 2 and isinstance(ssp, list):
        return f"ipn:{ssp[0]}.{ssp[1]}"
    return f"{scheme}:{ssp}"


def decode_bundle(data: bytes) -> dict:
    """The fields of a BPv7 bundle (RFC 9171) the measurements need."""
    blocks, _ = cbor_decode(data)
    primary = blocks[0]
    src, dst = eid_text(primary[4]), eid_text(primary[3])
    created_ms, seq = primary[6]
    out = {"src": src, "dst": dst, "created_ms": created_ms, "cts_seq": seq, "lifetime_ms": primary[7],
           "bid": f"{src}-{created_ms}-{seq}", "hops": None, "age_ms": None, "previous": None, "payload": b""}
    for block in blocks[1:]:
        btype, body = block[0], block[4]
        if btype == 1:
            out["payload"] = body
        elif btype == 10:
            limit_count, _ = cbor_decode(body)
            out["hops"] = limit_count[1]
        elif btype == 7:
            out["age_ms"], _ = cbor_decode(body)
        elif btype == 6:
            prev, _ = cbor_decode(body)
            out["previous"] = eid_text(prev)
    return out


def make_payload(seq: int, node: str, size: int, now: float) -> bytes:
    name = node.encode()[:255]
    head = HEADER.pack(MAGIC, seq, now, len(name)) + name
    return head + b"\0" * max(0, size - len(head))


def read_payload(payload: bytes) -> dict | None:
    if len(payload) < HEADER.size or payload[:4] != MAGIC:
        return None
    _magic, seq, sent, n = HEADER.unpack_from(payload)
    return {"seq": seq, "t_sent": sent, "from": payload[HEADER.size:HEADER.size + n].decode("utf-8", "replace")}


# ------------------------------------------------------------------------------------------ the agent
class Agent:
    """A keep-alive HTTP connection to the local dtnd (one per thread)."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body,
                                  headers={"Content-Type": "application/octet-stream"} if body is not None else {})
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def sender(plan: dict, stop: threading.Event, counts: dict) -> None:
    agent = Agent(plan["port"])
    node, service = plan["node"], plan.get("service", "in")
    release, duration = plan["release"], plan["duration"]
    lifetime = int(plan.get("lifetime", 3600))
    flows = []
    for f in plan.get("flows", []):
        rate = float(f.get("rate", 0))
        flows.append({"dst": f"dtn://{f['dst']}/{service}", "size": int(f["size"]), "period": 1.0 / rate if rate else 0.0,
                      "next": release, "seq": 0, "count": f.get("count")})
    _sleep_until(release, stop)
    end = release + duration
    while flows and not stop.is_set():
        flow = min(flows, key=lambda x: x["next"])
        if flow["next"] >= end or (flow["count"] is not None and flow["seq"] >= flow["count"]):
            flows.remove(flow)
            continue
        _sleep_until(flow["next"], stop)
        seq = flow["seq"]
        now = time.time()
        payload = make_payload(seq, node, flow["size"], now)
        try:
            status, body = agent.request("POST", f"/send?dst={flow['dst']}&lifetime={lifetime}s", payload)
            ok, err = status == 200, "" if status == 200 else f"HTTP {status}: {body[:80].decode('utf-8', 'replace')}"
        except OSError as exc:
            ok, err = False, str(exc)
        rec = {proto.EV: proto.EV_SENT, "dst": flow["dst"], "seq": seq, "t": now, "t_ack": time.time(), "size": flow["size"], "ok": ok}
        if err:
            rec["error"] = err
            counts["errors"] += 1
        emit(rec)
        counts["sent"] += 1
        flow["seq"] += 1
        flow["next"] = flow["next"] + flow["period"] if flow["period"] else time.time()


def receiver(plan: dict, stop: threading.Event, counts: dict) -> None:
    agent = Agent(plan["port"])
    service = plan.get("service", "in")
    until = plan["release"] + plan["duration"] + plan.get("drain", 5.0)
    expect = plan.get("expect")  # stop early once this many distinct bundles arrived (duplicates not counted)
    quiet = plan.get("quiet")  # ... or once nothing arrived for this long after the sending ended
    send_end = plan["release"] + plan["duration"]
    seen: set = set()
    last = time.time()
    while time.time() < until and not stop.is_set():
        if quiet is not None and time.time() > send_end + quiet and time.time() - max(last, send_end) > quiet:
            break
        try:
            status, body = agent.request("GET", f"/endpoint?{service}")
        except OSError as exc:
            emit({proto.EV: proto.EV_ERROR, "t": time.time(), "error": f"receive: {exc}"})
            time.sleep(0.2)
            continue
        now = time.time()
        if status != 200 or body.startswith(NOTHING):
            time.sleep(POLL_BUSY_S if now - last < 1.0 else POLL_IDLE_S)
            continue
        last = now
        try:
            b = decode_bundle(body)
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            emit({proto.EV: proto.EV_ERROR, "t": now, "error": f"undecodable bundle ({len(body)} bytes): {exc}"})
            continue
        head = read_payload(b["payload"]) or {}
        key = (b["src"], head.get("seq"), b["created_ms"])
        duplicate = key in seen  # epidemic and flooding can hand the same bundle over more than once
        seen.add(key)
        emit({proto.EV: proto.EV_RECV, "dup": duplicate, "bid": b["bid"], "src": b["src"], "seq": head.get("seq"),
              "t_sent": head.get("t_sent"), "t": now, "created_ms": b["created_ms"], "hops": b["hops"], "age_ms": b["age_ms"],
              "size": len(b["payload"]), "bundle_bytes": len(body)})
        if duplicate:
            counts["duplicates"] = counts.get("duplicates", 0) + 1
            continue
        counts["received"] += 1
        if expect is not None and counts["received"] >= expect:
            break
    emit({proto.EV: proto.EV_RECV_DONE, "t": time.time(), "received": counts["received"]})


def ip_sender(plan: dict, stop: threading.Event) -> None:


    probe = plan["ip_probe"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    name = plan["node"].encode()[:255]
    period = 1.0 / float(probe.get("rate", 10))
    release, end = plan["release"], plan["release"] + plan["duration"]
    seq = 0
    _sleep_until(release, stop)
    while not stop.is_set():
        t = release + seq * period
        if t >= end:
            break
        _sleep_until(t, stop)
        now = time.time()
        for d in probe["dsts"]:
            try:
                sock.sendto(IP_HEADER.pack(IP_MAGIC, seq, now, len(name)) + name, (d["ip"], int(probe.get("port", 5999))))
                emit({proto.EV: proto.EV_IP_SENT, "dst": d["dst"], "seq": seq, "t": now})
            except OSError as exc:
                emit({proto.EV: proto.EV_IP_SENT, "dst": d["dst"], "seq": seq, "t": now, "error": str(exc)})
        seq += 1


def ip_receiver(plan: dict, stop: threading.Event, ready: threading.Event) -> None:


    probe = plan["ip_probe"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((probe.get("bind", "0.0.0.0"), int(probe.get("port", 5999))))
    sock.settimeout(0.2)
    ready.set()
    until = plan["release"] + plan["duration"] + min(plan.get("drain", 5.0), 5.0)
    while time.time() < until and not stop.is_set():
        try:
            data, _addr = sock.recvfrom(2048)
        except socket.timeout:
            continue
        now = time.time()
        if len(data) < IP_HEADER.size or data[:4] != IP_MAGIC:
            continue
        _m, seq, sent, n = IP_HEADER.unpack_from(data)
        emit({proto.EV: proto.EV_IP_RECV, "src": data[IP_HEADER.size:IP_HEADER.size + n].decode("utf-8", "replace"), "seq": seq,
              "t_sent": sent, "t": now})


def store_sampler(plan: dict, stop: threading.Event) -> None:
    agent = Agent(plan["port"])
    interval = float(plan.get("store_interval", 0.5))
    until = plan["release"] + plan["duration"] + plan.get("drain", 5.0)
    start = min(time.time(), plan["release"] - interval)
    k = 0
    while not stop.is_set():
        t = start + k * interval
        k += 1
        if t > until:
            break
        _sleep_until(t, stop)
        try:
            status, body = agent.request("GET", "/status/store")
            entries = json.loads(body) if status == 200 else []
        except (OSError, ValueError) as exc:
            emit({proto.EV: proto.EV_ERROR, "t": time.time(), "error": f"store: {exc}"})
            continue
        constraints: dict[str, int] = {}
        stored = 0
        for entry in entries:
            names = entry[entry.find("{") + 1:entry.rfind("}")].replace('"', "").split(",") if "{" in entry else []
            names = [n.strip() for n in names if n.strip()]
            if "Deleted" not in names:
                stored += 1
            for n in names or ["none"]:
                constraints[n] = constraints.get(n, 0) + 1
        emit({proto.EV: proto.EV_STORE, "t": time.time(), "bundles": stored, "entries": len(entries), "constraints": constraints})


def _sleep_until(t: float, stop: threading.Event) -> None:
    while not stop.is_set():
        left = t - time.time()
        if left <= 0:
            return
        stop.wait(min(left, 0.5))


def run(plan: dict) -> int:
    stop = threading.Event()
    counts = {"sent": 0, "received": 0, "errors": 0}
    threads = []
    if plan.get("flows"):
        threads.append(threading.Thread(target=sender, args=(plan, stop, counts), daemon=True))
    if plan.get("receive", True):
        threads.append(threading.Thread(target=receiver, args=(plan, stop, counts), daemon=True))
    if plan.get("store_interval"):
        threads.append(threading.Thread(target=store_sampler, args=(plan, stop), daemon=True))
    ip_ready = threading.Event()
    if plan.get("ip_probe"):
        threads.append(threading.Thread(target=ip_receiver, args=(plan, stop, ip_ready), daemon=True))
        if plan["ip_probe"].get("dsts"):
            threads.append(threading.Thread(target=ip_sender, args=(plan, stop), daemon=True))
    emit({proto.EV: proto.EV_START, "t": time.time(), "node": plan["node"]})
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()
    emit({proto.EV: proto.EV_DONE, "t": time.time(), **counts})
    return 0


def recv_once(port: int, service: str, timeout: float) -> int:
    agent = Agent(port)
    deadline = time.time() + timeout
    while True:
        status, body = agent.request("GET", f"/endpoint?{service}")
        if status != 200:
            print(json.dumps({"error": f"HTTP {status}: {body[:80].decode('utf-8', 'replace')}"}))
            return 1
        if not body.startswith(NOTHING):
            b = decode_bundle(body)
            payload = b.pop("payload")
            head = read_payload(payload)
            b["payload"] = payload.decode("utf-8", "replace") if head is None else f"<{len(payload)} bytes from {head['from']}>"
            b["t"] = time.time()
            print(json.dumps(b))
            return 0
        if time.time() >= deadline:
            print(json.dumps({"error": f"nothing received on {service} within {timeout:g} s"}))
            return 3
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == proto.DTN_RUN:
        text = sys.stdin.read() if argv[1] == proto.STDIN else open(argv[1]).read()
        return run(json.loads(text))
    if argv and argv[0] == proto.DTN_RECV_ONCE:
        opts = dict(zip(argv[1::2], argv[2::2]))
        return recv_once(int(opts.get("--port", 3000)), opts.get("--service", "in"), float(opts.get("--timeout", 10)))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
