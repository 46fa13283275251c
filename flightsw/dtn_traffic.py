#!/usr/bin/env python3
"""DTN traffic for one node: sends bundles through the node's own agent and receives what arrives for it.

Standard library only (runs inside every node, like the agent). It talks to the local agent through one client
interface (send a bundle, take the next one delivered to a service, list the store), one client object per
thread; the plan's "client" names which (CLIENTS; the host's agent adapter, swarm.dtn.agents, says which and
with what options, e.g. "port").

    dtn_traffic.py run PLAN.json        # or '-' for stdin
    plan = {"node": "sat01", "client": "dtn7-http", "port": 3000, "service": "in",
            "flows": [{"dst": "ground", "size": 100000, "rate": 10.0}],   # rate: bundles/s, or 0 = as fast as possible
                                                                         # "eid": the destination (default dtn://<dst>/<service>)
            "release": <epoch s>, "duration": <s>, "drain": <s>,            # send in [release, release+duration)
            "lifetime": <s>, "receive": true, "store_interval": 0.5, "expect": <bundles>, "quiet": <s>,
            "ip_probe": {"bind": <ISL address>, "port": 5999, "rate": 10, "dsts": [{"dst": "ground", "ip": ..}]}}
    dtn_traffic.py recv-once [--client dtn7-http] [--port 3000] [--service in]   # one bundle, decoded, as JSON

Output: JSON lines on stdout, one per event, each stamped with the shared host clock (time.time()); the names are
flightsw/protocol.py's, which the host imports too:
    {"ev": "sent", "dst": <EID>, "to": <node>, "seq": n, "t": send start, "t_ack": agent answered, "size": payload bytes, "ok": ..}
    {"ev": "recv", "dup": false, "bid": .., "src": <EID>, "from": <node>, "seq": n, "t_sent": .., "t": taken, "created_ms": .., "hops": ..,
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

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

TYPE_CHECKING = False  # what mypy reads as True: it checks the package's imports (no `typing` import at start-up)
if TYPE_CHECKING or __package__:  # imported as flightsw.dtn_traffic (the host side's parsers and tests)
    from flightsw import hdtn_app
    from flightsw import protocol as proto
    from flightsw import ud3tn_aap
else:  # run as a script in a node: this directory is sys.path[0]
    import hdtn_app
    import protocol as proto
    import ud3tn_aap

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
        if arg is None:
            raise ValueError("CBOR: a negative integer of indefinite length")
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
class Refused(OSError):
    """The agent answered, but not with what was asked (e.g. an HTTP error status)."""


class Dtn7Http:
    """dtn7-rs's HTTP API on the node's loopback, on one keep-alive connection: POST /send?dst=<EID>&lifetime=<s>s
    creates a bundle, GET /endpoint?<service> takes the next one delivered to dtn://<node>/<service> (b"Nothing to
    receive" when none), GET /status/store lists the store (one text per bundle, constraints in braces)."""

    name = "dtn7-http"

    def __init__(self, opts: dict):
        self.port = int(opts.get("port", 3000))
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

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

    def _ok(self, method: str, path: str, body: bytes | None = None) -> bytes:
        status, answer = self.request(method, path, body)
        if status != 200:
            raise Refused(f"HTTP {status}: {answer[:80].decode('utf-8', 'replace')}")
        return answer

    def send(self, dst_eid: str, lifetime: int, payload: bytes) -> None:
        """Create one bundle; OSError (Refused: the agent said no) when it was not taken."""
        self._ok("POST", f"/send?dst={dst_eid}&lifetime={lifetime}s", payload)

    def take(self, service: str) -> bytes | None:
        """The next bundle delivered to `service` (its encoded BPv7 bytes), None when there is none."""
        body = self._ok("GET", f"/endpoint?{service}")
        return None if body.startswith(NOTHING) else body

    def store(self) -> list[str]:
        return json.loads(self._ok("GET", "/status/store"))


class HardyHttp(Dtn7Http):
    """swarm-hardy's (flightsw/hardy-node) HTTP API on the node's loopback: the same subset of requests and
    answers as dtn7's above (it was made to speak them), so only the name differs."""

    name = "hardy-http"


class IonTools:
    """ION's own tools inside the node (the host's ion adapter): bpsendfile sends each bundle from
    dtn://<node>/src (the payload spooled in ION's work folder until ION has sent it: ION reads the file when the
    bundle leaves; spooled files older than twice the lifetime are removed), and one `bprecvfile <endpoint>`, running
    while the client lives, writes a file per bundle delivered to dtn://<node>/<service> (ION keeps what arrives
    while none runs: the endpoint queues; what bprecvfile took and no client read waits in <workdir>/inbox/<service>
    for the next client). ION hands an application the payload only, so a bundle's source is the node its payload
    header names and its creation time is not known (None). The node name is the host name (ION's own rule for its
    dtn admin endpoint). With `eid: ipn` the endpoints are ipn:<N>.2 (sending) and ipn:<N>.<service>, N the node
    number its ionrc gives."""

    name = "ion-tools"
    STORE_EVERY_S = 5.0

    def __init__(self, opts: dict):
        self.wd = os.environ.get("ION_NODE_WDNAME") or opts.get("workdir") or "/var/lib/swarm-dtn"
        self.node = socket.gethostname()
        self.scheme = opts.get("eid") or "dtn"
        self.proc: subprocess.Popen | None = None
        self.rxdir = ""
        self.next = 1  # the testfile bprecvfile writes next
        self.service = ""
        self.stored, self.stored_at = 0, -1e9  # bplist's last answer and when (store)
        atexit.register(self.close)

    def _own(self, service: str) -> str:
        """This node's endpoint of `service` in its scheme (the node number from ION's own ionrc, `1 <N> ...`)."""
        if self.scheme != "ipn":
            return f"dtn://{self.node}/{service}"
        with open(os.path.join(self.wd, "node.ionrc")) as f:
            number = next(line.split()[1] for line in f if line.startswith("1 "))
        return f"ipn:{number}.{service}"

    def _inbox(self, service: str) -> str:
        """Where bundles bprecvfile took but no client read are kept for the next client: bprecvfile takes every
        bundle queued at the endpoint, so a one-shot `recv` that ends it must not lose the rest."""
        return os.path.join(self.wd, "inbox", service)

    def send(self, dst_eid: str, lifetime: int, payload: bytes) -> None:
        spool = os.path.join(self.wd, "spool")
        os.makedirs(spool, exist_ok=True)
        fd, path = tempfile.mkstemp(dir=spool, prefix="t.")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        res = subprocess.run(["bpsendfile", self._own("2" if self.scheme == "ipn" else "src"), dst_eid, path, "0.1",
                              str(lifetime)],
                             cwd=self.wd, capture_output=True, text=True, timeout=60)
        said = (res.stdout + res.stderr).strip()
        if res.returncode or "Can't" in said or "Invalid" in said:  # it exits 0 either way; complaints on stdout
            os.unlink(path)
            raise Refused(f"bpsendfile: {said.splitlines()[-1] if said else f'exit {res.returncode}'}")
        old = time.time() - 2 * max(lifetime, 60)
        for name in os.listdir(spool):
            full = os.path.join(spool, name)
            if os.path.getmtime(full) < old:
                os.unlink(full)

    def take_decoded(self, service: str) -> tuple[dict, int] | None:
        """The next bundle delivered to `service` as decode_bundle's fields (what ION tells), and its size. One
        `bprecvfile <endpoint>` runs for the client's life and writes testfile1, testfile2, ...; a file is
        complete once bprecvfile no longer holds it open (its /proc fd table), then it is read and removed."""
        inbox = self._inbox(service)
        kept = sorted(os.listdir(inbox)) if os.path.isdir(inbox) else []
        if kept:  # what an earlier client's bprecvfile took and nobody read, oldest first
            path = os.path.join(inbox, kept[0])
            with open(path, "rb") as f:
                payload = f.read()
            os.unlink(path)
            return self._decoded(service, payload)
        if self.proc is None:
            self.service = service
            self.rxdir = tempfile.mkdtemp(dir=self.wd, prefix="rx.")
            self.proc = subprocess.Popen(["bprecvfile", self._own(service)], cwd=self.rxdir,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.next = 1
        path = os.path.join(self.rxdir, f"testfile{self.next}")
        if not os.path.exists(path):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self._clean()
                raise OSError(f"bprecvfile ended (exit {code})")
            return None
        if self._held(path):
            return None
        with open(path, "rb") as f:
            payload = f.read()
        os.unlink(path)
        self.next += 1
        return self._decoded(service, payload)

    def _decoded(self, service: str, payload: bytes) -> tuple[dict, int]:
        head = read_payload(payload)
        src = f"dtn://{head['from']}/" if head else "unknown (ION gives the payload only)"
        return ({"src": src, "dst": self._own(service), "created_ms": None, "cts_seq": None,
                 "lifetime_ms": None, "bid": f"{src}-{head['seq']}" if head else "", "hops": None, "age_ms": None,
                 "previous": None, "payload": payload}, len(payload))

    def _held(self, path: str) -> bool:
        """Whether bprecvfile still has `path` open (it is writing it)."""
        fds = f"/proc/{self.proc.pid}/fd" if self.proc else ""
        try:
            return any(os.readlink(os.path.join(fds, fd)) == path for fd in os.listdir(fds))
        except OSError:
            return False

    def store(self) -> list[str]:
        """The bundles ION holds (bplist count), asked at most every STORE_EVERY_S: bplist walks every bundle in
        one SDR transaction, which every half second with hundreds held competes with ION's own daemons."""
        now = time.monotonic()
        if now - self.stored_at >= self.STORE_EVERY_S:
            res = subprocess.run(["bplist", "count"], cwd=self.wd, capture_output=True, text=True, timeout=30)
            found = [w for w in res.stdout.replace(".", " ").split() if w.isdigit()]
            self.stored, self.stored_at = int(found[-1]) if found else 0, now
        return [f"bundle {i + 1} {{Stored}}" for i in range(self.stored)]

    def _clean(self) -> None:
        """Keeps every whole file bprecvfile wrote that no one read (in the order written) in the service's inbox,
        then removes the receiving folder."""
        self.proc = None
        if self.service and os.path.isdir(self.rxdir):
            inbox = self._inbox(self.service)
            while os.path.exists(path := os.path.join(self.rxdir, f"testfile{self.next}")):
                os.makedirs(inbox, exist_ok=True)
                os.replace(path, os.path.join(inbox, f"{time.time_ns():020d}-{self.next:06d}"))
                self.next += 1
        shutil.rmtree(self.rxdir, ignore_errors=True)

    def close(self) -> None:
        """End a waiting bprecvfile the way ION's tools expect (SIGINT: it closes its endpoint)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._clean()


class Ud3tnAap:
    """µD3TN over its AAP 1.0 socket in the node's work folder, with the user's ud3tn-utils (ud3tn_aap.py): one
    connection per client sends every bundle (from a fresh agent ID); what arrives is taken from the inbox the
    endpoint keeper beside µD3TN fills (µD3TN drops bundles for an endpoint nobody holds, so one holds the
    applications' endpoint for the agent's life). AAP 1.0 hands over the source EID and the payload only: the
    creation time is not known (None), and a bundle's lifetime is µD3TN's -l, not the plan's."""

    name = "ud3tn-aap"

    def __init__(self, opts: dict):
        self.wd = opts.get("workdir") or "/var/lib/swarm-dtn"
        self.client = None
        atexit.register(self.close)

    def send(self, dst_eid: str, lifetime: int, payload: bytes) -> None:
        if self.client is None:
            client = ud3tn_aap.aap(os.path.join(self.wd, "ud3tn.socket"))
            client.register(ud3tn_aap.source_id(client.node_eid))
            self.client = client
        try:
            ud3tn_aap.send_bundle(self.client, dst_eid, payload)
        except (AssertionError, AttributeError, OSError) as exc:  # the next send connects anew
            self.close()
            raise Refused(f"µD3TN: {exc or 'no confirmation'}") from None
        ud3tn_aap.count(self.wd, ud3tn_aap.SENT)

    def take_decoded(self, service: str) -> tuple[dict, int] | None:
        got = ud3tn_aap.take_bundle(self.wd)
        if got is None:
            return None
        head, payload = got
        return ({"src": head["src"], "dst": head["dst"], "created_ms": None, "cts_seq": None, "lifetime_ms": None,
                 "bid": "", "hops": None, "age_ms": None, "previous": None, "payload": payload}, len(payload))

    def store(self) -> list[str]:
        return []  # µD3TN 0.13 lists no store over AAP

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.disconnect()
            except OSError:
                pass
            self.client = None


class HdtnStcp:
    """HDTN's router over STCP on loopback, as HDTN's own bpgen/bpsink reach it (hdtn_app.py): bundles are made here
    and sent into the router's STCP induct; what the router delivers to the node's applications the application side
    beside it files whole into inbox/, from which a client takes the oldest addressed to its service."""

    name = "hdtn-stcp"

    def __init__(self, opts: dict):
        self.wd = opts.get("workdir") or "/var/lib/swarm-dtn"
        with open(os.path.join(self.wd, "node-number")) as f:
            self.sender = hdtn_app.Sender(self.wd, int(f.read().strip()))
        atexit.register(self.sender.close)

    def send(self, dst_eid: str, lifetime: int, payload: bytes) -> None:
        try:
            self.sender.send(dst_eid, payload, lifetime)
        except (OSError, ValueError) as exc:
            raise Refused(f"HDTN: {exc}") from None

    def take(self, service: str) -> bytes | None:
        return hdtn_app.take_bundle(self.wd, lambda raw: decode_bundle(raw)["dst"].rsplit(".", 1)[-1] == service)

    def store(self) -> list[str]:
        return []  # HDTN tells its storage over its telemetry API only

    def close(self) -> None:
        self.sender.close()


#: The clients by name (the host's adapter names one in the plan); DEFAULT_CLIENT for plans that name none.
CLIENTS = {Dtn7Http.name: Dtn7Http, HardyHttp.name: HardyHttp, IonTools.name: IonTools, Ud3tnAap.name: Ud3tnAap,
           HdtnStcp.name: HdtnStcp}
DEFAULT_CLIENT = Dtn7Http.name


def client_of(opts: dict):
    return CLIENTS[opts.get("client") or DEFAULT_CLIENT](opts)


def next_bundle(agent, service: str) -> tuple[dict, int] | None:
    """The next bundle delivered to `service`: (decode_bundle's fields, its size in bytes), None when none. A client
    that hands over only what its agent tells (take_decoded) answers itself; the others give the bundle's bytes."""
    if hasattr(agent, "take_decoded"):
        return agent.take_decoded(service)
    body = agent.take(service)
    return None if body is None else (decode_bundle(body), len(body))


def sender(plan: dict, stop: threading.Event, counts: dict) -> None:
    agent = client_of(plan)
    node, service = plan["node"], plan.get("service", "in")
    release, duration = plan["release"], plan["duration"]
    lifetime = int(plan.get("lifetime", 3600))
    flows = []
    for f in plan.get("flows", []):
        rate = float(f.get("rate", 0))
        flows.append({"dst": f.get("eid") or f"dtn://{f['dst']}/{service}", "to": f["dst"], "size": int(f["size"]),
                      "period": 1.0 / rate if rate else 0.0,
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
            agent.send(flow["dst"], lifetime, payload)
            ok, err = True, ""
        except OSError as exc:
            ok, err = False, str(exc)
        rec = {proto.EV: proto.EV_SENT, "dst": flow["dst"], "to": flow["to"], "seq": seq, "t": now, "t_ack": time.time(),
               "size": flow["size"], "ok": ok}
        if err:
            rec["error"] = err
            counts["errors"] += 1
        emit(rec)
        counts["sent"] += 1
        flow["seq"] += 1
        flow["next"] = flow["next"] + flow["period"] if flow["period"] else time.time()


def receiver(plan: dict, stop: threading.Event, counts: dict) -> None:
    agent = client_of(plan)
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
            got = next_bundle(agent, service)
        except Refused:
            got = None
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            emit({proto.EV: proto.EV_ERROR, "t": time.time(), "error": f"undecodable bundle: {exc}"})
            continue
        except OSError as exc:
            emit({proto.EV: proto.EV_ERROR, "t": time.time(), "error": f"receive: {exc}"})
            time.sleep(0.2)
            continue
        now = time.time()
        if got is None:
            time.sleep(POLL_BUSY_S if now - last < 1.0 else POLL_IDLE_S)
            continue
        last = now
        b, size = got
        head = read_payload(b["payload"]) or {}
        key = (b["src"], head.get("seq"), b["created_ms"])
        duplicate = key in seen  # epidemic and flooding can hand the same bundle over more than once
        seen.add(key)
        emit({proto.EV: proto.EV_RECV, "dup": duplicate, "bid": b["bid"], "src": b["src"], "from": head.get("from"),
              "seq": head.get("seq"),
              "t_sent": head.get("t_sent"), "t": now, "created_ms": b["created_ms"], "hops": b["hops"], "age_ms": b["age_ms"],
              "size": len(b["payload"]), "bundle_bytes": size})
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
    agent = client_of(plan)
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
            try:
                entries = agent.store()
            except Refused:
                entries = []
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


def recv_once(opts: dict, service: str, timeout: float) -> int:
    agent = client_of(opts)
    deadline = time.time() + timeout
    while True:
        try:
            got = next_bundle(agent, service)
        except Refused as exc:
            print(json.dumps({"error": str(exc)}))
            return 1
        if got is not None:
            b = got[0]
            payload = b.pop("payload")
            head = read_payload(payload)
            b["payload"] = payload.decode("utf-8", "replace") if head is None else f"<{len(payload)} bytes from {head['from']}>"
            b["t"] = time.time()
            print(json.dumps(b))
            return 0
        if time.time() >= deadline:
            close = getattr(agent, "close", None)
            if close:
                close()
            print(json.dumps({"error": f"nothing received on {service} within {timeout:g} s"}))
            return 3
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == proto.DTN_RUN:
        text = sys.stdin.read() if argv[1] == proto.STDIN else open(argv[1]).read()
        return run(json.loads(text))
    if argv and argv[0] == proto.DTN_RECV_ONCE:
        opts = {k.removeprefix("--"): v for k, v in zip(argv[1::2], argv[2::2])}
        return recv_once(opts, opts.get("service", "in"), float(opts.get("timeout", 10)))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
