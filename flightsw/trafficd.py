#!/usr/bin/env python3
"""Multiplexing traffic engine: ONE process per node carries every flow the node sends or receives.

The thesis's method (kept as the default `iperf3` engine) runs one iperf3 server and one client process
per directed connection: 9,900 flows of a 100-node full mesh are 19,800 processes, each waking every
millisecond, which a small host cannot schedule. This engine is the lighter one the sweep anticipated:
per node a single event loop (selectors) with one UDP socket or one TCP listener for all incoming flows
and one socket per outgoing flow, so the process count is the node count.

Every timestamp is taken by the engine itself with the shared host clock (time.time(); namespaces and
containers of one host share CLOCK_REALTIME): the real first and last send of every flow, and the
receive time of every datagram. Nothing is inferred.

Protocol with the host (JSON lines on stdin/stdout; standard library only, like the agent; its names and
message shapes are flightsw/protocol.py's, which the host imports too):

1. host -> {"protocol": "udp"|"tcp", "bind": IP, "port": P, "length": BYTES, "interval": S,
            "out": [{"id", "index", "dst", "port", "rate_bps"}], "in": [{"id", "index"}]}
   engine -> {"listening": P} once its receiver is bound.
2. host -> "connect": TCP flows connect and identify themselves (4-byte magic + 4-byte flow index);
   UDP sends each destination an empty datagram so that addresses are resolved before the test.
   engine -> {"connected": n, "errors": {id: message}, "engine": "trafficd.py"}.
3. host -> "RELEASE DURATION" (epoch seconds, seconds). At RELEASE every outgoing flow starts; at
   RELEASE + DURATION every one stops; the receiver keeps counting for a grace period (late datagrams,
   TCP tails) or until every incoming TCP flow closed. engine -> {"release_ts": actual wake-up}, one
   {"id", "side": "send"|"recv", ...} line per flow, then {"done": true}.
   End of input before step 3 aborts the test: the engine exits without sending anything.

UDP datagrams carry magic, flow index, sequence number and send time (struct "!IIQd", padded to LENGTH),
so the receiver counts, per flow and per interval of send time, how many datagrams arrived: loss per
interval is exact (sent in the interval less received of those), with no guessing from sequence gaps.
Bytes are binned by receive time (what the receiver saw per interval). Jitter is RFC 3550's.
"""
from __future__ import annotations

import heapq
import json
import math
import os
import select
import selectors
import socket
import struct
import sys
import time

TYPE_CHECKING = False  # what mypy reads as True: it checks the package's imports (no `typing` import at start-up)
if TYPE_CHECKING or __package__:  # imported as flightsw.trafficd (the unit tests, the agent imported as a package)
    from flightsw import protocol as proto
else:  # imported by agent.py run as a script: this directory is sys.path[0]
    import protocol as proto

MAGIC = 0x5357_4D58  # "SWMX"
HEADER = struct.Struct("!IIQd")  # magic, flow index, sequence, send time
HELLO = struct.Struct("!II")  # magic, flow index (TCP)
GRACE_S = 1.0  # receiver keeps counting this long after the end of sending
WATCHDOG_S = 600.0  # an engine never told to start gives up after this long
TCP_CHUNK = 128 * 1024
RCVBUF = 8 * 1024 * 1024
# Pacing quantum: after sending what is due the sender sleeps at least QUANTUM_S, so a datagram leaves
# at most that late (its schedule, hence the rate, is kept). One wake-up per datagram (31 flows at
# 1 Mbit/s are ~2,700 a second per node) costs more CPU than the sending itself.
QUANTUM_S = 0.002


def _bin(bins: list, k: int, amount: int) -> None:
    if k < 0:
        k = 0
    while len(bins) <= k:
        bins.append(0)
    bins[k] += amount


class OutFlow:
    """One flow this node sends."""

    def __init__(self, spec: dict):
        self.id, self.index, self.dst, self.port = spec[proto.ID], int(spec["index"]), spec["dst"], int(spec["port"])
        self.rate_bps = spec.get("rate_bps")
        self.sock: socket.socket | None = None
        self.seq = 0
        self.bytes = 0
        self.first_ts = math.nan
        self.last_ts = math.nan
        self.errors = 0
        self.error = ""
        self.bins_packets: list[int] = []
        self.bins_bytes: list[int] = []
        self.closed = False

    def record(self) -> dict:
        return {proto.ID: self.id, proto.SIDE: proto.SEND, "first_send_ts": _num(self.first_ts), "last_send_ts": _num(self.last_ts),
                "packets": self.seq, "bytes": self.bytes, "send_errors": self.errors, "error": self.error,
                "bins_packets": self.bins_packets, "bins_bytes": self.bins_bytes}


class InFlow:
    """One flow this node receives."""

    def __init__(self, spec: dict):
        self.id, self.index = spec[proto.ID], int(spec["index"])
        self.packets = 0
        self.bytes = 0
        self.max_seq = -1
        self.out_of_order = 0
        self.first_ts = math.nan
        self.last_ts = math.nan
        self.jitter = 0.0
        self.prev_transit: float | None = None
        self.latency_sum = 0.0
        self.latency_max = 0.0
        self.bins_bytes: list[int] = []  # by receive time
        self.bins_packets: list[int] = []  # by receive time
        self.bins_sent_packets: list[int] = []  # datagrams received, by their send time (for loss)
        self.closed = False

    def record(self) -> dict:
        return {proto.ID: self.id, proto.SIDE: proto.RECV, "first_recv_ts": _num(self.first_ts), "last_recv_ts": _num(self.last_ts),
                "packets": self.packets, "bytes": self.bytes, "out_of_order": self.out_of_order,
                "jitter_ms": self.jitter * 1000.0,
                "latency_ms_mean": (self.latency_sum / self.packets * 1000.0) if self.packets else None,
                "latency_ms_max": self.latency_max * 1000.0 if self.packets else None,
                "bins_bytes": self.bins_bytes, "bins_packets": self.bins_packets,
                "bins_sent_packets": self.bins_sent_packets}


def _num(x: float):
    return None if math.isnan(x) else x


def emit(obj: dict) -> None:
    sys.stdout.write(proto.dumps(obj) + "\n")
    sys.stdout.flush()


class Engine:
    """The event loop of one node for one test."""

    def __init__(self, plan: dict):
        self.protocol = plan["protocol"]
        self.length = int(plan.get("length") or (1448 if self.protocol == "udp" else TCP_CHUNK))
        self.interval = float(plan.get("interval") or 1.0)
        self.outs = [OutFlow(s) for s in plan.get("out", [])]
        self.ins = {int(s["index"]): InFlow(s) for s in plan.get("in", [])}
        self.sel = selectors.DefaultSelector()
        self.release = math.nan
        self._normal_policy = None  # the scheduling policy to return to while running real-time
        if self.protocol == "udp":
            self.length = max(self.length, HEADER.size)
            self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            _big_buffer(self.rx, socket.SO_RCVBUF, getattr(socket, "SO_RCVBUFFORCE", 33))
            self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.tx.bind((plan["bind"], 0))
            self.tx.setblocking(False)
        else:
            self.rx = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.rx.bind((plan["bind"], int(plan["port"])))
        if self.protocol == "tcp":
            self.rx.listen(1024)
        self.rx.setblocking(False)
        self.sel.register(self.rx, selectors.EVENT_READ, "rx")
        self.bind = plan["bind"]
        self.pending_hello: dict[socket.socket, bytes] = {}
        self.payload = bytearray(self.length)
        self.buf = bytearray(max(self.length, 65536) if self.protocol == "udp" else 256 * 1024)

    # ------------------------------------------------------------------------ set-up (before release)
    def connect(self) -> dict:
        """TCP: connect every outgoing flow and send its hello. UDP: send every destination one empty
        datagram (the receiver ignores it), so that address resolution is done before the release:
        at n=100 the first datagrams of 9,900 flows otherwise wait on 9,900 ARP look-ups."""
        errors = {}
        if self.protocol == "udp":
            for f in self.outs:
                try:
                    self.tx.sendto(b"", (f.dst, f.port))
                except OSError as exc:
                    errors[f.id] = f"warm-up datagram to {f.dst}: {exc}"
        if self.protocol == "tcp":
            for f in self.outs:
                try:
                    s = socket.create_connection((f.dst, f.port), timeout=10, source_address=(self.bind, 0))
                    s.sendall(HELLO.pack(MAGIC, f.index))
                    s.setblocking(False)
                    f.sock = s
                except OSError as exc:
                    f.error = f"connect to {f.dst}:{f.port}: {exc}"
                    f.closed = True
                    errors[f.id] = f.error
        return {proto.CONNECTED: sum(1 for f in self.outs if not f.closed), proto.ERRORS: errors,
                proto.ENGINE: proto.PYTHON_ENGINE}

    def accept_pending(self, until: float) -> None:
        """Accept incoming TCP connections and read their hellos until `until` (epoch s)."""
        while time.time() < until:
            self._poll(min(0.05, max(0.0, until - time.time())))

    # --------------------------------------------------------------------------------------- the test
    def run(self, release: float, duration: float) -> float:
        """Send from `release` for `duration` seconds; receive until the grace period ends.

        From the wait for the release until every flow's first datagram or write is out, the engine runs
        as a real-time (SCHED_FIFO) task where it may: on a loaded host ordinary tasks then cannot delay
        the start. It drops back to normal scheduling for the rest of the test.
        """
        self.release = release
        end = release + duration
        stop_rx = end + GRACE_S
        self._normal_policy = _realtime_on()
        try:
            return self._run(release, end, stop_rx)
        finally:
            self._drop_realtime()

    def _drop_realtime(self) -> None:
        if self._normal_policy is not None:
            _realtime_off(self._normal_policy)
            self._normal_policy = None

    def _run(self, release: float, end: float, stop_rx: float) -> float:
        if self.protocol == "tcp":
            self.accept_pending(release)
        else:
            # Sleep in the poll (no spinning: a swarm has many more engines than the host has cores,
            # and a spinning engine would delay the others' wake-up).
            while time.time() < release:
                self._poll(min(0.05, max(0.0, release - time.time())))
        woke = time.time()
        if self.protocol == "udp":
            self._run_udp(end)
        else:
            self._run_tcp(end)
        for f in self.outs:
            if f.sock is not None and not f.closed:
                self._close_out(f)
        while time.time() < stop_rx:
            if self.protocol == "tcp" and self.ins and all(f.closed for f in self.ins.values()) and not self.pending_hello:
                break
            self._poll(min(0.05, max(0.0, stop_rx - time.time())))
        return woke

    def _run_udp(self, end: float) -> None:
        heap: list[tuple[float, int, OutFlow, float]] = []
        for n, f in enumerate(self.outs):  # n breaks ties: flows due at the same instant go in plan order
            gap = self.length * 8.0 / float(f.rate_bps) if f.rate_bps else 0.0
            heapq.heappush(heap, (self.release, n, f, gap))
        while True:
            now = time.time()
            # past the end, what fell due before it still goes (a wake-up the host made late must not shorten the
            # flow: R bit/s for D s is R*D bits), then the sender stops
            last = now >= end
            if last and not (heap and heap[0][0] < end):
                return
            sent_any = 0
            while heap and (heap[0][0] < end if last else heap[0][0] <= now) and (
                    sent_any < 256 or self._normal_policy is not None):
                due, idx, f, gap = heapq.heappop(heap)
                HEADER.pack_into(self.payload, 0, MAGIC, f.index, f.seq, now)
                try:
                    self.tx.sendto(self.payload, (f.dst, f.port))
                except BlockingIOError:
                    heapq.heappush(heap, (due + 0.0005, idx, f, gap))  # socket full: retry this datagram
                    continue
                except OSError as exc:  # e.g. no route while a link is cut: count it, keep the pace
                    f.errors += 1
                    f.error = f.error or str(exc)
                else:
                    if math.isnan(f.first_ts):
                        f.first_ts = now
                    f.last_ts = now
                    k = int((now - self.release) / self.interval)
                    _bin(f.bins_packets, k, 1)
                    _bin(f.bins_bytes, k, self.length)
                    f.bytes += self.length
                    f.seq += 1
                sent_any += 1
                heapq.heappush(heap, (due + gap if gap else now, idx, f, gap))
            self._drop_realtime()  # every flow has its first datagram out
            nxt = max(heap[0][0], now + QUANTUM_S) if heap else end
            self._poll(max(0.0, min(nxt, end) - time.time()) if sent_any < 256 else 0.0)

    def _run_tcp(self, end: float) -> None:
        for f in self.outs:  # every flow's first write right at the release, then as each can take more
            if f.sock is not None and not f.closed:
                self._tcp_send(f)
                if not f.closed:
                    self.sel.register(f.sock, selectors.EVENT_WRITE, f)
        self._drop_realtime()
        while time.time() < end:
            self._poll(max(0.0, min(0.05, end - time.time())))

    def _close_out(self, f: OutFlow) -> None:
        f.closed = True
        if f.sock is None:  # a UDP flow: no connection to close
            return
        try:
            self.sel.unregister(f.sock)
        except (KeyError, ValueError):
            pass
        try:
            f.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    # ----------------------------------------------------------------------------------- the poll loop
    def _poll(self, timeout: float) -> None:
        for key, _events in self.sel.select(timeout):
            data, conn = key.data, key.fileobj
            if data == "rx":
                self._udp_receive() if self.protocol == "udp" else self._accept()
            elif isinstance(data, OutFlow):
                self._tcp_send(data)
            elif not isinstance(conn, socket.socket):  # every other registration is an accepted TCP connection
                continue
            elif isinstance(data, InFlow):
                self._tcp_receive(conn, data)
            else:  # "hello": a connection not yet identified
                self._read_hello(conn)

    def _udp_receive(self) -> None:
        buf = self.buf
        while True:
            try:
                n = self.rx.recv_into(buf)
            except BlockingIOError:
                return
            now = time.time()
            if n < HEADER.size:
                continue
            magic, idx, seq, sent = HEADER.unpack_from(buf, 0)
            f = self.ins.get(idx)
            if magic != MAGIC or f is None:
                continue
            if math.isnan(f.first_ts):
                f.first_ts = now
            f.last_ts = now
            f.packets += 1
            f.bytes += n
            if seq < f.max_seq:
                f.out_of_order += 1
            else:
                f.max_seq = seq
            transit = now - sent
            if f.prev_transit is not None:
                f.jitter += (abs(transit - f.prev_transit) - f.jitter) / 16.0
            f.prev_transit = transit
            f.latency_sum += transit
            f.latency_max = max(f.latency_max, transit)
            release = self.release if not math.isnan(self.release) else now
            _bin(f.bins_bytes, int((now - release) / self.interval), n)
            _bin(f.bins_packets, int((now - release) / self.interval), 1)
            _bin(f.bins_sent_packets, int((sent - release) / self.interval), 1)

    def _accept(self) -> None:
        while True:
            try:
                conn, _addr = self.rx.accept()
            except BlockingIOError:
                return
            conn.setblocking(False)
            self.pending_hello[conn] = b""
            self.sel.register(conn, selectors.EVENT_READ, "hello")

    def _read_hello(self, conn: socket.socket) -> None:
        try:
            chunk = conn.recv(HELLO.size - len(self.pending_hello[conn]))
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(conn)
            self.pending_hello.pop(conn, None)
            conn.close()
            return
        got = self.pending_hello[conn] + chunk
        if len(got) < HELLO.size:
            self.pending_hello[conn] = got
            return
        del self.pending_hello[conn]
        magic, idx = HELLO.unpack(got)
        f = self.ins.get(idx)
        self.sel.unregister(conn)
        if magic != MAGIC or f is None:
            conn.close()
            return
        self.sel.register(conn, selectors.EVENT_READ, f)

    def _tcp_receive(self, conn: socket.socket, f: InFlow) -> None:
        try:
            n = conn.recv_into(self.buf)
        except BlockingIOError:
            return
        except OSError:
            n = 0
        now = time.time()
        if n == 0:
            f.closed = True
            self.sel.unregister(conn)
            conn.close()
            return
        if math.isnan(f.first_ts):
            f.first_ts = now
        f.last_ts = now
        f.bytes += n
        release = self.release if not math.isnan(self.release) else now
        _bin(f.bins_bytes, int((now - release) / self.interval), n)

    def _tcp_send(self, f: OutFlow) -> None:
        if f.sock is None:  # a UDP flow: sent by _run_udp
            return
        try:
            n = f.sock.send(self.payload)
        except BlockingIOError:
            return
        except OSError as exc:
            f.error = f"send to {f.dst}: {exc}"
            self._close_out(f)
            return
        now = time.time()
        if math.isnan(f.first_ts):
            f.first_ts = now
        f.last_ts = now
        f.bytes += n
        _bin(f.bins_bytes, int((now - self.release) / self.interval), n)

    def records(self) -> list[dict]:
        return [f.record() for f in self.outs] + [f.record() for f in self.ins.values()]


def _realtime_on():
    """Become SCHED_FIFO (priority 50) if allowed; returns the policy to go back to, or None."""
    try:
        previous = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        return previous
    except (OSError, AttributeError):  # no CAP_SYS_NICE (e.g. a container without it): run as is
        return None


def _realtime_off(previous) -> None:
    try:
        os.sched_setscheduler(0, previous[0], previous[1])
    except OSError:
        pass


def _big_buffer(sock: socket.socket, option: int, force_option: int) -> None:
    """Ask for an 8 MiB receive buffer; SO_RCVBUFFORCE passes net.core.rmem_max where allowed."""
    for opt in (force_option, option):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, RCVBUF)
            return
        except OSError:
            continue


class LineReader:
    """Lines of a file descriptor, each returned by `next_line` with a deadline. Reads the descriptor itself
    (os.read) and keeps what follows a newline: `sys.stdin.readline()` after `select` would leave a second line
    of the same write in Python's buffer, where `select` cannot see it, until more input came."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def next_line(self, deadline: float) -> str | None:
        """The next line (with its newline), or None at end of input or after `deadline` (epoch s)."""
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.time()))
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode() + "\n"


def serve(pid_file: str | None = None) -> int:
    """Run one test following the stdin/stdout protocol of the module docstring."""
    if pid_file:
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    give_up = time.time() + WATCHDOG_S
    stdin = LineReader(sys.stdin.fileno())
    line = stdin.next_line(give_up)
    if line is None:
        return 1
    engine = Engine(json.loads(line))
    emit({proto.LISTENING: engine.rx.getsockname()[1]})
    while True:
        line = stdin.next_line(give_up)
        if line is None:
            return 1
        command, release, duration = proto.parse_mux_command(line)
        if command == proto.CONNECT:
            emit(engine.connect())
            continue
        break
    woke = engine.run(release, duration)
    emit({proto.RELEASE_TS: woke})
    for rec in engine.records():
        emit(rec)
    emit({proto.DONE: True})
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1] if len(sys.argv) > 1 else None))
