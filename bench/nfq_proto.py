#!/usr/bin/env python3
"""The Python prototype of a userspace delay engine (NetfilterQueue from PyPI), kept ONLY as the baseline of
bench/bench_linkd.py: the design the issue measured first (constant delay, packets retained and
accepted after the delay without blocking the receive loop). The framework's engine is netem/linkd (Rust).

usage: nfq_proto.py QUEUE_NUM DELAY_MS [MAXLEN]
Needs `pip install NetfilterQueue` (which builds against Debian's libnetfilter-queue-dev).
"""
import collections
import select
import signal
import sys
import time

from netfilterqueue import NetfilterQueue


def main() -> None:
    qnum, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000.0
    maxlen = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
    held: collections.deque = collections.deque()  # (deadline, packet): FIFO, a constant delay keeps order
    counts = {"in": 0, "out": 0}

    def on_packet(pkt) -> None:
        pkt.retain()
        held.append((time.monotonic() + delay, pkt))
        counts["in"] += 1

    nfq = NetfilterQueue()
    nfq.bind(qnum, on_packet, max_len=maxlen)
    fd = nfq.get_fd()
    running = [True]

    def stop(*_):
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while running[0]:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else 0.5
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        except InterruptedError:
            continue
        if ready:
            nfq.run(block=False)
        now = time.monotonic()
        while held and held[0][0] <= now:
            held.popleft()[1].accept()
            counts["out"] += 1
    nfq.unbind()
    print(f"nfq_proto: queued={counts['in']} released={counts['out']}", file=sys.stderr)


if __name__ == "__main__":
    main()
