"""An LTP sender that behaves as ION's does toward swarm-ltpcla, for test_dtn_ltp_ion_live.py: its own engine ID,
segments sent from an EPHEMERAL UDP port (ION's udplso), replies expected at its declared address, bundles
aggregated into one block (several BPv7 bundles back to back), and blocks either red or wholly green.

Run inside a node's namespace: python3 ion_style_ltp.py ENGINE DEST_IP:PORT LISTEN_IP:PORT DEST_EID SPEC...
where each SPEC is `red:<payload>,<payload>,...` or `green:<payload>` (one LTP block each). Prints one JSON line:
what it sent and what came back. A red block is retransmitted whole (new checkpoint) until a report covers it.

    python3 ion_style_ltp.py recv ENGINE PEER_IP:PORT LISTEN_IP:PORT PAYLOAD TIMEOUT_S
receives as ION's udplsi would: red blocks from the peer engine at LISTEN, each checkpoint answered with a report
(sent from an ephemeral port to the peer's address) claiming what arrived, until a whole block holding PAYLOAD is
in; prints "listening" once bound, then one JSON line: the blocks and whether PAYLOAD arrived.
"""
from __future__ import annotations

import json
import socket
import sys
import time

SEGMENT = 1200  # data bytes per segment
DTN_EPOCH = 946_684_800  # 2000-01-01 in Unix seconds


def sdnv(n: int) -> bytes:
    out = [n & 0x7F]
    n >>= 7
    while n:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    return bytes(reversed(out))


def read_sdnv(buf: bytes, pos: int) -> tuple[int, int]:
    n = 0
    while True:
        b = buf[pos]
        pos += 1
        n = (n << 7) | (b & 0x7F)
        if not b & 0x80:
            return n, pos


def cbor_head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for ai, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | ai]) + n.to_bytes(size, "big")
    raise ValueError(n)


def text(s: str) -> bytes:
    return cbor_head(3, len(s.encode())) + s.encode()


def dtn_eid(uri: str) -> bytes:
    return cbor_head(4, 2) + cbor_head(0, 1) + text(uri.removeprefix("dtn:"))


def bundle(src: str, dst: str, seq: int, payload: bytes) -> bytes:
    """One BPv7 bundle (RFC 9171): an indefinite-length array of a primary block (no CRC) and a payload block."""
    created = int((time.time() - DTN_EPOCH) * 1000)
    primary = (cbor_head(4, 8) + cbor_head(0, 7) + cbor_head(0, 0) + cbor_head(0, 0) + dtn_eid(dst) + dtn_eid(src)
               + dtn_eid(src) + cbor_head(4, 2) + cbor_head(0, created) + cbor_head(0, seq)
               + cbor_head(0, 3_600_000))
    block = (cbor_head(4, 5) + cbor_head(0, 1) + cbor_head(0, 1) + cbor_head(0, 0) + cbor_head(0, 0)
             + cbor_head(2, len(payload)) + payload)
    return b"\x9f" + primary + block + b"\xff"


def data_segments(engine: int, session: int, block: bytes, red: bool, cp_serial: int) -> list[bytes]:
    """The block as data segments: red ends with a checkpoint (EORP, EOB: type 3), green with EOB (type 7)."""
    out = []
    for off in range(0, len(block), SEGMENT):
        chunk = block[off:off + SEGMENT]
        last = off + SEGMENT >= len(block)
        kind = (3 if last else 0) if red else (7 if last else 4)
        body = sdnv(1) + sdnv(off) + sdnv(len(chunk))
        if red and last:
            body += sdnv(cp_serial) + sdnv(0)
        out.append(bytes([kind]) + sdnv(engine) + sdnv(session) + b"\x00" + body + chunk)
    return out


def claims(got: dict[int, bytes], upper: int) -> list[tuple[int, int]]:
    """The contiguous ranges (offset, length) of [0, upper) that arrived, from the data segments `got` (by offset)."""
    out: list[tuple[int, int]] = []
    for off in sorted(got):
        end = min(off + len(got[off]), upper)
        if off >= upper:
            break
        if out and off <= out[-1][0] + out[-1][1]:
            start = out[-1][0]
            out[-1] = (start, max(out[-1][0] + out[-1][1], end) - start)
        else:
            out.append((off, end - off))
    return out


def engine_sockets(listen: str) -> tuple[socket.socket, socket.socket]:
    """(rx bound to the declared LISTEN address, tx on an ephemeral port of the same host, as ION's udplso)."""
    lhost, lport = listen.rsplit(":", 1)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((lhost, int(lport)))
    rx.settimeout(0.2)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind((lhost, 0))
    return rx, tx


def receive(engine_id: int, peer: str, listen: str, payload: bytes, timeout: float) -> None:
    """Take red blocks until one holding `payload` is whole (RFC 5326: a report per checkpoint, claims of what
    arrived; the sender retransmits the rest)."""
    phost, pport = peer.rsplit(":", 1)
    rx, tx = engine_sockets(listen)
    print("listening", flush=True)
    sessions: dict[tuple[int, int], dict] = {}
    out = {"engine": engine_id, "blocks": [], "arrived": False, "reports_sent": 0, "report_acks": 0}
    deadline = time.monotonic() + timeout
    serial = 0
    while time.monotonic() < deadline and not out["arrived"]:
        try:
            seg, _frm = rx.recvfrom(65536)
        except socket.timeout:
            continue
        kind = seg[0] & 0x0F
        pos = 1
        originator, pos = read_sdnv(seg, pos)
        number, pos = read_sdnv(seg, pos)
        pos += 1  # no extensions
        if kind == 9:
            out["report_acks"] += 1
            continue
        if kind > 3:  # green data and the cancel segments: not what this receiver is for
            continue
        _client, pos = read_sdnv(seg, pos)
        offset, pos = read_sdnv(seg, pos)
        length, pos = read_sdnv(seg, pos)
        cp = None
        if kind in (1, 2, 3):
            cp, pos = read_sdnv(seg, pos)
            _rs, pos = read_sdnv(seg, pos)
        state = sessions.setdefault((originator, number), {"got": {}, "end": None})
        state["got"][offset] = seg[pos:pos + length]
        if kind in (2, 3):
            state["end"] = offset + length
        if cp is None:
            continue
        upper = offset + length
        have = claims(state["got"], upper)
        serial += 1
        body = sdnv(serial) + sdnv(cp) + sdnv(upper) + sdnv(0) + sdnv(len(have))
        for off, n in have:
            body += sdnv(off) + sdnv(n)
        tx.sendto(bytes([8]) + sdnv(originator) + sdnv(number) + b"\x00" + body, (phost, int(pport)))
        out["reports_sent"] += 1
        end = state["end"]
        if end is not None and have == [(0, end)]:
            block = b"".join(state["got"][o] for o in sorted(state["got"]))[:end]
            out["blocks"].append({"originator": originator, "session": number, "bytes": end})
            out["arrived"] = out["arrived"] or payload in block
    print(json.dumps(out), flush=True)


def main() -> None:
    if sys.argv[1] == "recv":
        engine, peer, listen, payload, timeout = sys.argv[2:7]
        receive(int(engine), peer, listen, payload.encode(), float(timeout))
        return
    engine, dest, listen, dst_eid, *specs = sys.argv[1:]
    engine_id = int(engine)
    dhost, dport = dest.rsplit(":", 1)
    rx, tx = engine_sockets(listen)
    src_eid = f"dtn://ion{engine_id}/"
    report = {"source_port": tx.getsockname()[1], "blocks": [], "replies_from": []}
    seq = 0
    for n, spec in enumerate(specs, start=1):
        color, _, payloads = spec.partition(":")
        bundles = []
        for p in payloads.split(","):
            bundles.append(bundle(src_eid, dst_eid, seq, p.encode()))
            seq += 1
        block = b"".join(bundles)
        session = 4000 + n
        red = color == "red"
        info = {"session": session, "red": red, "bundles": len(bundles), "bytes": len(block), "attempts": 0,
                "reports": 0, "covered": not red}
        for attempt in range(1, 6):
            info["attempts"] = attempt
            for seg in data_segments(engine_id, session, block, red, attempt):
                tx.sendto(seg, (dhost, int(dport)))
            if not red:
                break
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline and not info["covered"]:
                try:
                    seg, frm = rx.recvfrom(65536)
                except socket.timeout:
                    continue
                report["replies_from"].append(f"{frm[0]}:{frm[1]}")
                if seg[0] & 0x0F != 8:
                    continue
                pos = 1
                originator, pos = read_sdnv(seg, pos)
                number, pos = read_sdnv(seg, pos)
                if (originator, number) != (engine_id, session):
                    continue
                pos += 1  # no extensions
                serial, pos = read_sdnv(seg, pos)
                _cp, pos = read_sdnv(seg, pos)
                upper, pos = read_sdnv(seg, pos)
                lower, pos = read_sdnv(seg, pos)
                claims, pos = read_sdnv(seg, pos)
                got = 0
                for _ in range(claims):
                    _off, pos = read_sdnv(seg, pos)
                    length, pos = read_sdnv(seg, pos)
                    got += length
                info["reports"] += 1
                tx.sendto(bytes([9]) + sdnv(engine_id) + sdnv(session) + b"\x00" + sdnv(serial), (dhost, int(dport)))
                info["covered"] = lower == 0 and upper == len(block) and got == len(block)
            if info["covered"]:
                break
        report["blocks"].append(info)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
