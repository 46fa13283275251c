#!/usr/bin/env python3
"""UDP probes for bench_linkd.py: one-way delay, loss, duplication and order of numbered datagrams.

    udp_probe.py send HOST PORT COUNT PPS [SIZE]    # datagrams carry (seq, CLOCK_MONOTONIC ns, CLOCK_REALTIME ns)
    udp_probe.py recv PORT COUNT IDLE_S             # prints JSON {"seq", "delay_ms", "kernel_delay_ms"} in arrival order

Sender and receiver run in two network namespaces of one host, which share the clocks, so the receive time
(taken in userspace after recvmsg, i.e. after the engine released the packet) minus the send time is the
one-way delay the application sees (`delay_ms`); `kernel_delay_ms` uses the receiving kernel's timestamp
(SO_TIMESTAMPNS, as ping does), which leaves out the receiving process's own scheduling. Where the engine
holds packets at the receiver's ingress the kernel stamps them before the hold, so only `delay_ms` means
the link's delay there.
"""
import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!QQQ")
TIMESPEC = struct.Struct("@qq")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux asm-generic value; Python does not export it


def send(host: str, port: int, count: int, pps: float, size: int = 200) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    pad = b"\0" * max(0, size - HEADER.size)
    gap = 1e9 / pps
    start = time.monotonic_ns()
    for seq in range(count):
        due = start + seq * gap
        while True:
            now = time.monotonic_ns()
            if now >= due:
                break
            if due - now > 2_000_000:
                time.sleep((due - now - 1_000_000) / 1e9)
        sock.sendto(HEADER.pack(seq, time.monotonic_ns(), time.time_ns()) + pad, (host, port))


def recv(port: int, count: int, idle: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(idle)
    seqs, delays, kdelays = [], [], []
    print("ready", file=sys.stderr, flush=True)
    try:
        while len(seqs) < 2 * count:
            data, anc, _, _ = sock.recvmsg(65536, 64)
            now = time.monotonic_ns()
            seq, sent, sent_real = HEADER.unpack_from(data)
            stamp = next((TIMESPEC.unpack_from(d) for lvl, typ, d in anc
                          if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS), None)
            seqs.append(seq)
            delays.append((now - sent) / 1e6)
            kdelays.append((stamp[0] * 10**9 + stamp[1] - sent_real) / 1e6 if stamp else None)
    except socket.timeout:
        pass
    json.dump({"seq": seqs, "delay_ms": delays, "kernel_delay_ms": kdelays}, sys.stdout)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
             int(sys.argv[6]) if len(sys.argv) > 6 else 200)
    elif mode == "recv":
        recv(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
