#!/usr/bin/env python3
"""Bundle rate between two different DTN agents (netns backend): sat01 runs dtn7, sat02 runs Hardy, over TCPCLv4;
N bundles of SIZE bytes each way in turn, sent as fast as the sender's agent takes them, by the framework's traffic
program (flightsw/dtn_traffic.py) inside each node. The rate is bundles over the span from the first sent to the
last received (distinct bundles only; duplicates counted apart).

    bench/bench_dtn_mixed.py [--count 300] [--size 100000] [--delay 0]   # --delay: one-way ms on the ISL link
                             [--agents dtn7,hardy] [--probe] [--tcp-buffers]

`--agents A,B`: sat01's and sat02's agents (dtn7 or hardy; default dtn7,hardy; dtn7,dtn7 for the best pair).
`--probe` says where the time goes (bench/netns_probe.py): the CPU seconds each node's processes used per direction
(agent, traffic program, link engine; the host's busy time beside it, and what no node's process accounts for:
the kernel's softirq work, other sessions), and samples of the sender's TCP connection with `ss -tin` (its window,
retransmissions, and how often it had nothing to send: app-limited).

The `dtn` experiment type gives every node one agent, hence this script. It brings up swarm bench-mix (10.205.x) and
takes it down afterwards.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.dtn_swarm import bring_up, events, swarm, traffic  # noqa: E402
from bench.netns_probe import CpuSpan, SsSampler, namespace, ss_summary  # noqa: E402

NAME = "bench-mix"
CLIENTS = {"dtn7": "dtn7-http", "hardy": "hardy-http"}  # how the traffic program talks to each agent
AGENTS = {"sat01": ("dtn7", "dtn7-http"), "sat02": ("hardy", "hardy-http")}  # --agents sets them
TCPCL_PORT = 4556


def one_way(src: str, dst: str, count: int, size: int, tmp: Path, probe: bool = False) -> dict:
    release = time.time() + 3
    recv = traffic(NAME, dst, AGENTS[dst][1], {"flows": [], "release": release, "duration": 1, "drain": 120, "expect": count}, tmp)
    send = traffic(NAME, src, AGENTS[src][1], {"flows": [{"dst": dst, "size": size, "rate": 0, "count": count}], "release": release,
                         "duration": 120, "receive": False}, tmp)
    if probe:
        time.sleep(max(0.0, release - time.time() - 0.5))  # the traffic programs' start-up is not the transfer's
        cpu = CpuSpan({n: namespace(NAME, n) for n in (src, dst)})
        cpu.start()
        sampler = SsSampler(namespace(NAME, src), TCPCL_PORT, 0.5).start()
    out_s, err_s = send.communicate(timeout=300)
    out_r, err_r = recv.communicate(timeout=300)
    where = {"cpu": cpu.stop(), "tcp": ss_summary(sampler.stop())} if probe else {}
    sent = [e for e in events(out_s) if e.get("ev") == "sent" and e.get("ok")]
    got = [e for e in events(out_r) if e.get("ev") == "recv"]
    fresh = [g for g in got if not g["dup"]]
    if not sent or not fresh:
        raise SystemExit(f"{src} -> {dst}: sent {len(sent)}, received {len(fresh)}; {err_s[-300:]} {out_s[-300:]} {err_r[-300:]}")
    span = max(g["t"] for g in fresh) - min(s["t"] for s in sent)
    return {"from": f"{src} ({AGENTS[src][0]})", "to": f"{dst} ({AGENTS[dst][0]})", "sent": len(sent),
            "delivered": len(fresh), "duplicates": len(got) - len(fresh), "span_s": round(span, 3),
            "bundles_per_s": round(len(fresh) / span, 1),
            "send_ms": round(1000 * sum(s["t_ack"] - s["t"] for s in sent) / len(sent), 2),  # agent's API
            "mbit_per_s": round(len(fresh) * size * 8 / span / 1e6, 1), **where}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--delay", type=float, default=0.0, help="one-way delay on the ISL link, ms")
    ap.add_argument("--agents", default="dtn7,hardy", help="sat01's and sat02's agents (dtn7, hardy)")
    ap.add_argument("--probe", action="store_true", help="CPU per process and TCP samples per direction")
    ap.add_argument("--tcp-buffers", action="store_true",
                    help="links: {tcp_buffers: bdp} (the nodes' TCP buffers sized from the links; with --delay)")
    args = ap.parse_args()
    agents = args.agents.split(",")
    if len(agents) != 2 or any(a not in CLIENTS for a in agents):
        ap.error(f"--agents: two of {', '.join(CLIENTS)}, comma-separated (got {args.agents!r})")
    for node, agent in zip(("sat01", "sat02"), agents):
        AGENTS[node] = (agent, CLIENTS[agent])
    buffers = "tcp_buffers: bdp, " if args.tcp_buffers else ""
    links = f"links: {{{buffers}default: {{delay: {args.delay:g}ms}}}}\n" if args.delay else ""
    with tempfile.TemporaryDirectory(prefix="bench-mix-") as t:
        tmp = Path(t)
        spec = tmp / "spec.yaml"
        spec.write_text(f"name: {NAME}\nbackend: netns\n"
                        f"node_list: [{{name: sat01, dtn: {{agent: {agents[0]}}}}}, "
                        f"{{name: sat02, dtn: {{agent: {agents[1]}}}}}]\n"
                        "networks: {isl: {subnet: 10.205.0.0/25}, ground: {subnet: 10.205.0.128/25}}\n" + links)
        if not bring_up(NAME, spec):
            return 1
        try:
            rows = [one_way("sat01", "sat02", args.count, args.size, tmp, args.probe),
                    one_way("sat02", "sat01", args.count, args.size, tmp, args.probe)]
        finally:
            swarm("down", NAME)
    for r in rows:
        print(json.dumps({**r, "size": args.size, "one_way_ms": args.delay}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
