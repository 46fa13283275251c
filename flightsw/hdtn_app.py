#!/usr/bin/env python3
"""The applications' side of an HDTN node: a BP node ipn:<N> beside the node's HDTN router (hdtn-one-process), which
reaches it as HDTN reaches its own bpsink/bpgen, over STCP on loopback (HDTN's simple TCP convergence layer: each
bundle preceded by its length, 4 bytes big-endian; a length of 0 is a keepalive). Standard library only.

    hdtn_app.py serve --port 4558 --node N --service 1
        listens on 127.0.0.1:PORT for the router's STCP outduct and files every bundle it delivers into inbox/ (one
        file each, whole BPv7 bundles), counting them in `delivered`; once listening it makes app.ready and says
        "HDTN applications ready"
    hdtn_app.py send --node N [--port 4557] [--lifetime S] DST
        stdin as one BPv7 bundle from ipn:<N>.<SOURCE_SERVICE> to DST, into the router's STCP induct on
        127.0.0.1:PORT: "<source EID> <bundle ID>"

The traffic program (dtn_traffic.py's hdtn-stcp client) uses send_bundle / take_bundle below. Bundles are made here
(RFC 9171: primary block with a CRC-16, payload block), as HDTN's bpgen makes its own: HDTN decodes and routes
them, and every other agent of the swarm reads what HDTN forwards.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import socket
import struct
import sys
import time

INBOX = "inbox"
DELIVERED = "delivered"
SENT = "sent"
SEQ = "seq"
READY = "app.ready"  # made once the listener is up (start.sh starts the router after it)
SOURCE_SERVICE = 2  # where the node's applications send from (ipn:<N>.2); they receive on ipn:<N>.1
LOCAL_PORT = 4557  # the router's STCP induct (swarm.dtn.agents.hdtn.plan.LOCAL_PORT)
DTN_EPOCH = 946_684_800  # 2000-01-01T00:00:00Z in Unix seconds
LENGTH = struct.Struct("!I")
#: The previous node block (RFC 9171 section 4.4.1) each bundle made here carries, naming this node, without a CRC.
#: HDTN's router rewrites a bundle's previous node block to name itself and keeps its CRC type, but gives a bundle
#: without one a new block with a CRC-32C; ION 4.1.3 drops such a bundle ("CRC check failed for extension block",
#: seen in the three-stack live test) though tshark and an independent CRC-32C both find that CRC right. With
#: this block, HDTN's forwards of the node's bundles reach ION too.
PREVIOUS_NODE = 6


# ---------------------------------------------------------------------------------------------- BPv7
def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | info]) + n.to_bytes(size, "big")
    raise ValueError(f"CBOR: {n} is too large")


def cbor(value) -> bytes:
    """CBOR of the items a bundle holds: unsigned ints, byte strings, arrays."""
    if isinstance(value, int):
        return _head(0, value)
    if isinstance(value, (bytes, bytearray)):
        return _head(2, len(value)) + bytes(value)
    if isinstance(value, list):
        return _head(4, len(value)) + b"".join(cbor(v) for v in value)
    raise TypeError(f"CBOR: {type(value).__name__}")


def crc16_x25(data: bytes) -> int:
    """CRC-16/X.25 (RFC 9171 section 4.2.1, CRC type 1)."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x8408 if crc & 1 else crc >> 1
    return crc ^ 0xFFFF


def ipn(eid: str) -> list:
    """"ipn:N.S" -> its BPv7 form [2, [N, S]]; ValueError for anything else."""
    if not eid.startswith("ipn:"):
        raise ValueError(f"{eid!r}: HDTN nodes speak ipn only (ipn:<node>.<service>)")
    node, _, service = eid[4:].partition(".")
    return [2, [int(node), int(service or 0)]]


def make_bundle(src: str, dst: str, payload: bytes, created_ms: int, seq: int, lifetime_ms: int) -> bytes:
    """One BPv7 bundle: a primary block with its CRC-16 (computed over the block with a zeroed CRC, as RFC 9171
    section 4.2.1 says), a previous node block without a CRC (PREVIOUS_NODE says why) and a payload block, in an
    indefinite-length array."""
    fields = [7, 0, 1, ipn(dst), ipn(src), ipn(src), [created_ms, seq], lifetime_ms]
    unsigned = _head(4, 9) + b"".join(cbor(f) for f in fields) + cbor(b"\0\0")
    primary = unsigned[:-2] + crc16_x25(unsigned).to_bytes(2, "big")
    node = ipn(src)[1][0]
    previous = cbor([PREVIOUS_NODE, 2, 0, 0, cbor([2, [node, 0]])])
    return b"\x9f" + primary + previous + cbor([1, 1, 0, 0, payload]) + b"\xff"


def next_seq(workdir: str) -> int:
    """A creation-sequence number no other sender of this node has used, so two bundles of one millisecond never
    share a bundle ID."""
    return count(workdir, SEQ) - 1


def count(workdir: str, name: str, n: int = 1) -> int:
    """Add `n` to the counter file `name` under a lock (several senders of a node share it); its new value."""
    path = os.path.join(workdir, name)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read().strip()
        value = (int(text) if text.isdigit() else 0) + n
        f.seek(0)
        f.truncate()
        f.write(str(value))
        return value


# ----------------------------------------------------------------------------------------- sending
class Sender:
    """One STCP connection into the router's induct, opened on the first bundle and re-opened after a failure."""

    def __init__(self, workdir: str, node: int, port: int = LOCAL_PORT):
        self.workdir, self.node, self.port = workdir, node, port
        self.sock: socket.socket | None = None

    def send(self, dst: str, payload: bytes, lifetime_s: float) -> str:
        src = f"ipn:{self.node}.{SOURCE_SERVICE}"
        created = int((time.time() - DTN_EPOCH) * 1000)
        seq = next_seq(self.workdir)
        bundle = make_bundle(src, dst, payload, created, seq, int(lifetime_s * 1000))
        for attempt in (0, 1):
            try:
                if self.sock is None:
                    self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                self.sock.sendall(LENGTH.pack(len(bundle)) + bundle)
                break
            except OSError:
                self.close()
                if attempt:
                    raise
        count(self.workdir, SENT)
        return f"{src}-{created}-{seq}"

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None


# --------------------------------------------------------------------------------------- receiving
def _read(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def file_bundle(workdir: str, bundle: bytes, n: int) -> None:
    """Into inbox/ whole (written aside under a name readers skip, then renamed: a reader never sees half a
    bundle)."""
    box = os.path.join(workdir, INBOX)
    name = f"{time.time_ns():020d}-{os.getpid()}-{n:08d}.bundle"
    tmp = os.path.join(box, f".{name}.part")
    with open(tmp, "wb") as f:
        f.write(bundle)
    os.rename(tmp, os.path.join(box, name))


def take_bundle(workdir: str, wanted=lambda raw: True) -> bytes | None:
    """The oldest bundle in inbox/ that `wanted` accepts, removed; None when none."""
    box = os.path.join(workdir, INBOX)
    try:
        names = sorted(n for n in os.listdir(box) if n.endswith(".bundle"))
    except FileNotFoundError:
        return None
    for name in names:
        path = os.path.join(box, name)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:  # another client took it
            continue
        if not wanted(raw):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        return raw
    return None


def serve(workdir: str, port: int) -> int:
    os.makedirs(os.path.join(workdir, INBOX), exist_ok=True)
    srv = socket.create_server(("127.0.0.1", port), reuse_port=False)
    with open(os.path.join(workdir, READY), "w"):
        pass
    print("HDTN applications ready", flush=True)
    n = 0
    while True:
        conn, _ = srv.accept()  # the router's outduct; it connects again after a restart
        with conn:
            while True:
                head = _read(conn, LENGTH.size)
                if head is None:
                    break
                (size,) = LENGTH.unpack(head)
                if size == 0:
                    continue  # keepalive
                bundle = _read(conn, size)
                if bundle is None:
                    break
                n += 1
                file_bundle(workdir, bundle, n)
                count(workdir, DELIVERED)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="hdtn_app.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--node", type=int, required=True)
    s.add_argument("--service", default="1")
    s.add_argument("--workdir", default=".")
    t = sub.add_parser("send")
    t.add_argument("--node", type=int, required=True)
    t.add_argument("--port", type=int, default=LOCAL_PORT)
    t.add_argument("--lifetime", type=float, default=3600.0)
    t.add_argument("--workdir", default=".")
    t.add_argument("dst")
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        return serve(os.path.abspath(args.workdir), args.port)
    sender = Sender(os.path.abspath(args.workdir), args.node, args.port)
    try:
        bid = sender.send(args.dst, sys.stdin.buffer.read(), args.lifetime)
    except (OSError, ValueError) as exc:
        print(f"HDTN did not take the bundle: {exc}", file=sys.stderr)
        return 1
    finally:
        sender.close()
    print(f"ipn:{args.node}.{SOURCE_SERVICE} {bid}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
