#!/usr/bin/env python3
"""Benchmark of the userspace link engine (swarm-linkd, netem/linkd) against the Python NFQUEUE prototype.

Two network namespaces (le-bench-s 10.202.0.1, le-bench-r 10.202.0.2). `--hold switch` (the default, as the
framework on the netns backend): they are joined through a third namespace's bridge (le-bench-w), whose mangle
FORWARD queues the sender's frames (by source MAC, for the receiver's bridge port, -m physdev) to the engine
running there. `--hold ingress` (as on compose, or without br_netfilter): one veth pair, the receiver's mangle
PREROUTING queues them to an engine in the receiver.

- accuracy: one-way delay of 200-byte UDP probes (userspace send -> userspace receive time, one clock) for
  1 ms, 10 ms, 100 ms, 1 s, 4 s: median and p99 minus the set delay; baseline: the same path without rule.
- jitter: measured standard deviation / set for each distribution; loss, Gilbert-Elliott loss, duplication,
  corruption (the receiver's UDP checksum errors), reordering: measured share / set over >= 10,000 packets.
- UDP delivered / offered at 1 s one-way delay at rising shares of the bare veth UDP capacity measured in
  the same run (udp-blast, a sendmmsg sender built with the engine: iperf3's one datagram per syscall could
  not offer more than ~0.35 Gbit/s on this busy host; 1400-byte datagrams; delivered = the receiver's INPUT
  counter after the delay).
- TCP goodput over 600 ms RTT (300 ms each way, an engine on each side) with BDP-sized buffers (iperf3).
- the engine's CPU share (of one core) and peak memory during the UDP runs.
The Python prototype (bench/nfq_proto.py, constant delay only) runs the delay, UDP and TCP parts.

usage: sudo python3 bench/bench_linkd.py [--quick] [--hold switch|ingress] [--json out.json]
Needs root, iptables with NFQUEUE, iperf3, the swarm-linkd binary (`make setup`); the prototype part
needs `pip install NetfilterQueue` (skipped with a note otherwise). Leaves nothing behind (namespaces are
removed at the end, also after Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from netem.engines.drivers.linkd import linkd_binary  # noqa: E402

NS_S, NS_R, NS_W = "le-bench-s", "le-bench-r", "le-bench-w"
IF_S, IF_R = "le-bench0", "le-bench1"
PORT = {NS_R: "wr", NS_S: "ws"}  # the switch's bridge port towards each end
QUEUE = {NS_R: 1, NS_S: 2}  # at the switch every direction has its own queue (one namespace)
HOLD = "switch"
IP_S, IP_R = "10.202.0.1", "10.202.0.2"
PROBE = str(HERE / "udp_probe.py")
PROTO = str(HERE / "nfq_proto.py")
CTL_DIR = Path("/run/le-bench")


def run(argv, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=check, capture_output=True, text=True, **kw)


def ns(name: str, *argv) -> list[str]:
    return ["ip", "netns", "exec", name, *[str(a) for a in argv]]


def mac(name: str, dev: str) -> str:
    return json.loads(run(["ip", "-n", name, "-j", "link", "show", dev]).stdout)[0]["address"]


def teardown() -> None:
    for name in (NS_S, NS_R, NS_W):
        run(["ip", "netns", "pids", name], check=False)
        for pid in run(["ip", "netns", "pids", name], check=False).stdout.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        run(["ip", "netns", "del", name], check=False)


def setup() -> tuple[str, str]:
    teardown()
    for name in (NS_S, NS_R) + ((NS_W,) if HOLD == "switch" else ()):
        run(["ip", "netns", "add", name])
        run(ns(name, "ip", "link", "set", "lo", "up"))
    if HOLD == "switch":
        run(ns(NS_W, "ip", "link", "add", "br0", "type", "bridge", "stp_state", 0, "forward_delay", 0))
        run(ns(NS_W, "ip", "link", "set", "br0", "up"))
        for name, dev in ((NS_S, IF_S), (NS_R, IF_R)):
            run(["ip", "link", "add", dev, "netns", name, "type", "veth", "peer", "name", PORT[name], "netns", NS_W])
            run(ns(NS_W, "ip", "link", "set", PORT[name], "master", "br0", "up"))
        run(ns(NS_W, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"))
    else:
        run(["ip", "link", "add", IF_S, "netns", NS_S, "type", "veth", "peer", "name", IF_R, "netns", NS_R])
    run(ns(NS_S, "ip", "addr", "add", f"{IP_S}/24", "dev", IF_S))
    run(ns(NS_R, "ip", "addr", "add", f"{IP_R}/24", "dev", IF_R))
    run(ns(NS_S, "ip", "link", "set", IF_S, "up"))
    run(ns(NS_R, "ip", "link", "set", IF_R, "up"))
    # delivered counter; DROP: a sink that sends no ICMP back (no socket needed, nothing to refuse)
    run(ns(NS_R, "iptables", "-A", "INPUT", "-p", "udp", "--dport", "5201", "-j", "DROP"))
    run(ns(NS_S, "ping", "-c", "1", "-W", "2", IP_R))
    CTL_DIR.mkdir(parents=True, exist_ok=True)
    return mac(NS_S, IF_S), mac(NS_R, IF_R)


def hold_ns(name: str) -> str:
    """Where the engine for packets to namespace `name` runs: the switch, or the receiver itself."""
    return NS_W if HOLD == "switch" else name


def hold_queue(name: str) -> int:
    return QUEUE[name] if HOLD == "switch" else 0


def queue_rule(name: str, dev: str, src_mac: str, on: bool) -> None:
    """Queue the frames from `src_mac` to namespace `name` (arriving on its `dev`) to its engine."""
    op = "-A" if on else "-D"
    where = (["FORWARD", "-m", "physdev", "--physdev-out", PORT[name]] if HOLD == "switch"
             else ["PREROUTING", "-i", dev])
    run(ns(hold_ns(name), "iptables", "-t", "mangle", op, *where, "-m", "mac", "--mac-source", src_mac,
           "-j", "NFQUEUE", "--queue-num", hold_queue(name)), check=on)


class Engine:
    """One engine process for the packets to namespace `name` (at the switch or in it): swarm-linkd, or the
    Python prototype (constant delay only)."""

    def __init__(self, kind: str, name: str, src_mac: str, config: str = ""):
        self.kind, self.name, self.src_mac = kind, name, src_mac
        self.where, self.queue = hold_ns(name), hold_queue(name)
        self.ctl = CTL_DIR / f"{name}.sock"
        self.proc = None
        self.start(config)

    def start(self, config: str) -> None:
        if self.kind == "linkd":
            # at the switch a duplicate leaves as a frame through the receiver's bridge port (as the framework's)
            inject = (["--inject-dev", PORT[self.name], "--inject-mac", mac(self.name, IF_R if self.name == NS_R else IF_S)]
                      if HOLD == "switch" else [])
            argv = ns(self.where, LINKD, "run", "--queue", self.queue, *inject, "--control", self.ctl, "--seed", 1, "--realtime",
                      "--link", f"{self.src_mac} {config}")
        else:  # the same real-time priority as swarm-linkd's --realtime
            delay = re.search(r"delay=(\d+)ms", config)
            argv = ns(self.where, "chrt", "-f", 1, sys.executable, PROTO, self.queue, delay.group(1) if delay else 0)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.4)
        if self.proc.poll() is not None:
            raise SystemExit(f"{self.kind} engine did not start: {self.proc.stderr.read()}")

    def set(self, config: str) -> None:
        if self.kind == "linkd":
            res = run([LINKD, "ctl", "--control", self.ctl, "set", f"link {self.src_mac} {config}"])
            assert res.stdout.startswith("ok"), res
        else:
            self.stop()
            self.start(config)

    def late_hist(self) -> dict[str, int]:
        """The engine's release lateness histogram (bucket -> count), cumulative."""
        res = run([LINKD, "ctl", "--control", self.ctl, "stats"], check=False)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("late_us")), "")
        return {k: int(v) for k, v in (w.split("=", 1) for w in line.split()[1:]) if k[:2] in ("lt", "ge")}

    def head(self) -> dict[str, str]:
        """The first line of the engine's stats (counters: kept, kernel_held_peak, ...); {} for the prototype."""
        if self.kind != "linkd":
            return {}
        res = run([LINKD, "ctl", "--control", self.ctl, "stats"], check=False)
        first = res.stdout.splitlines()[0] if res.stdout else ""
        return dict(w.split("=", 1) for w in first.split() if "=" in w)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def probe(count: int, pps: float, idle: float, size: int = 200) -> dict:
    """Probes at real-time priority 1 (as the engines), so a busy shared host disturbs the measurement less."""
    rx = subprocess.Popen(ns(NS_R, "chrt", "-f", 1, sys.executable, PROBE, "recv", 5301, count, idle),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rx.stderr.readline()  # "ready"
    run(ns(NS_S, "chrt", "-f", 1, sys.executable, PROBE, "send", IP_R, 5301, count, pps, size))
    out, _ = rx.communicate(timeout=count / pps + idle + 30)
    return json.loads(out)


def hist_quantile(hist: dict[str, int], q: float) -> str:
    """The bucket holding quantile q of a lateness histogram ('<10us', ... '>=100000us')."""
    total = sum(hist.values())
    acc = 0
    for key, n in hist.items():
        acc += n
        if total and acc >= q * total:
            return ("<" if key.startswith("lt") else ">=") + key[2:] + "us"
    return "-"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def csum_errors() -> int:
    text = run(ns(NS_R, "cat", "/proc/net/snmp")).stdout.splitlines()
    heads = [ln.split() for ln in text if ln.startswith("Udp:")]
    return int(dict(zip(heads[0], heads[1]))["InCsumErrors"])


def input_packets() -> int:
    out = run(ns(NS_R, "iptables", "-nvxL", "INPUT")).stdout.splitlines()
    return sum(int(ln.split()[0]) for ln in out if "dpt:5201" in ln)


# ------------------------------------------------------------------------------------------ parts
def accuracy(kind: str, mac_s: str, delays: list[int], count: int) -> list[dict]:
    rows = []
    bare = probe(count, 1000, 1.0)  # no rule: the path's own latency
    base, kbase = bare["delay_ms"], bare["kernel_delay_ms"]
    base_med = statistics.median(base)
    rows.append({"engine": f"none (bare path, {HOLD} layout)", "set_ms": 0, "median_ms": base_med,
                 "p99_ms": pct(base, 0.99), "kernel_median_ms": statistics.median(kbase),
                 "kernel_p99_ms": pct(kbase, 0.99)})
    queue_rule(NS_R, IF_R, mac_s, True)
    eng = Engine(kind, NS_R, mac_s, f"delay={delays[0]}ms")
    try:
        for d in delays:
            eng.set(f"delay={d}ms")
            before = eng.late_hist() if kind == "linkd" else {}
            res = probe(count, 1000, d / 1000 + 1.5)
            got, kgot = res["delay_ms"], res["kernel_delay_ms"]
            late = {k: v - before.get(k, 0) for k, v in eng.late_hist().items()} if kind == "linkd" else {}
            rows.append({"engine": kind, "set_ms": d, "received": len(got), "sent": count,
                         "median_ms": statistics.median(got), "p99_ms": pct(got, 0.99),
                         "median_err_ms": statistics.median(got) - d - base_med,
                         "p99_err_ms": pct(got, 0.99) - d - pct(base, 0.99),
                         # the receiving kernel's stamp (meaningful at the switch only): the link without the
                         # receiving process's scheduling
                         "kernel_median_err_ms": statistics.median(kgot) - d - statistics.median(kbase),
                         "kernel_p99_err_ms": pct(kgot, 0.99) - d - pct(kbase, 0.99),
                         "engine_late_p50": hist_quantile(late, 0.5) if late else "",
                         "engine_late_p99": hist_quantile(late, 0.99) if late else ""})
            print(f"  {kind:6s} delay {d:5d} ms: median {rows[-1]['median_ms']:.3f} p99 {rows[-1]['p99_ms']:.3f} "
                  f"({len(got)}/{count}); kernel-stamped error median {rows[-1]['kernel_median_err_ms']:+.3f} "
                  f"p99 {rows[-1]['kernel_p99_err_ms']:+.3f}; engine's own release lateness p50 {rows[-1]['engine_late_p50']} "
                  f"p99 {rows[-1]['engine_late_p99']}", flush=True)
    finally:
        eng.stop()
        queue_rule(NS_R, IF_R, mac_s, False)
    return rows


def shares(mac_s: str, count: int) -> list[dict]:
    rows = []
    queue_rule(NS_R, IF_R, mac_s, True)
    eng = Engine("linkd", NS_R, mac_s, "delay=1ms")
    pps = 10_000
    try:
        for dist, want_sd in (("uniform", 10 / 3 ** 0.5), ("normal", 10.0), ("pareto", 10.0), ("paretonormal", 10.0)):
            eng.set(f"delay=100ms jitter=10ms dist={dist}")
            got = probe(count, 1000, 2.0)["delay_ms"]
            sd = statistics.pstdev(got)
            rows.append({"what": f"jitter 10ms {dist} (sd)", "set": round(want_sd, 3), "measured": round(sd, 3),
                         "ratio": sd / want_sd, "packets": len(got)})
        cases = [("loss 1%", "loss=1%", 0.01), ("loss 10%", "loss=10%", 0.10),
                 ("loss gemodel 1%,10%,50%,0% (5x packets)", "ge=1%,10%,50%,0%", 0.5 * 0.01 / 0.11),
                 ("duplicate 5%", "duplicate=5%", 0.05), ("corrupt 5%", "corrupt=5%", 0.05),
                 ("reorder 10% (delay 10ms)", "delay=10ms reorder=10%", 0.10)]
        for label, cfg, want in cases:
            eng.set(cfg)
            before = csum_errors()
            n = 5 * count if "gemodel" in label else count  # bursts of mean length 10: more packets for the mean
            res = probe(n, pps, 1.5)
            seqs, delays = res["seq"], res["delay_ms"]
            if label.startswith("loss"):
                got = 1 - len(set(seqs)) / n
            elif label.startswith("duplicate"):
                got = (len(seqs) - len(set(seqs))) / n
            elif label.startswith("corrupt"):
                got = (csum_errors() - before) / n
            else:
                got = sum(1 for d in delays if d < 5) / len(delays)
            rows.append({"what": label, "set": want, "measured": round(got, 5), "ratio": got / want, "packets": n})
        for r in rows:
            print(f"  {r['what']:32s} set {r['set']:.4f} measured {r['measured']:.4f} ratio {r['ratio']:.3f}", flush=True)
    finally:
        eng.stop()
        queue_rule(NS_R, IF_R, mac_s, False)
    return rows


def blast(rate_bps: int, seconds: int) -> int:
    """Offer UDP at `rate_bps` (0: as fast as one sender thread can) with udp-blast (sendmmsg, 1400 bytes);
    returns the datagrams sent."""
    res = run(ns(NS_S, BLAST, f"{IP_R}:5201", rate_bps, seconds, 1400), check=False)
    m = re.search(r"sent=(\d+)", res.stdout)
    return int(m.group(1)) if m else 0


def udp_capacity(seconds: int) -> float:
    before = input_packets()
    sent = blast(0, seconds)
    time.sleep(0.5)
    got = input_packets() - before
    print(f"  bare veth UDP: {got * 1400 * 8 / seconds / 1e9:.2f} Gbit/s delivered ({got}/{sent})", flush=True)
    return got * 1400 * 8 / seconds


def queue_drops(name: str) -> tuple[int, int]:
    """The kernel's drops for the engine serving namespace `name`: (queue full, netlink buffer full), summed over
    the hold namespace's queues (/proc/net/netfilter/nfnetlink_queue: columns 6 and 7)."""
    text = run(ns(hold_ns(name), "cat", "/proc/net/netfilter/nfnetlink_queue"), check=False).stdout
    rows = [ln.split() for ln in text.splitlines() if len(ln.split()) >= 7]
    return sum(int(r[5]) for r in rows), sum(int(r[6]) for r in rows)


def udp_delay(kind: str, mac_s: str, capacity: float, shares_: list[float], seconds: int) -> list[dict]:
    rows = []
    queue_rule(NS_R, IF_R, mac_s, True)
    eng = Engine(kind, NS_R, mac_s, "delay=1000ms")
    try:
        for share in shares_:
            rate = int(capacity * share)
            before, cpu0, drops0, kept0 = input_packets(), eng.cpu_s(), queue_drops(NS_R), int(eng.head().get("kept", 0))
            sent = blast(rate, seconds)
            time.sleep(1.5)
            got = input_packets() - before
            drops = [b - a for a, b in zip(drops0, queue_drops(NS_R))]
            cpu = (eng.cpu_s() - cpu0) / (seconds + 1.5)
            head = eng.head()
            rows.append({"engine": kind, "target_gbit": rate / 1e9, "offered_gbit": sent * 1400 * 8 / seconds / 1e9,
                         "share_of_capacity": share, "sent": sent,
                         "delivered": got, "ratio": got / sent if sent else 0.0, "cpu_core": cpu,
                         "kernel_queue_dropped": drops[0], "kernel_user_dropped": drops[1],
                         "peak_rss_mb": eng.peak_rss_mb(), "kept": int(head.get("kept", 0)) - kept0,
                         "kernel_held_peak": int(head.get("kernel_held_peak", 0))})
            print(f"  {kind:6s} UDP 1 s delay, target {rate / 1e9:.2f} Gbit/s, offered {rows[-1]['offered_gbit']:.2f}: delivered/offered {rows[-1]['ratio']:.4f} "
                  f"({got}/{sent}; kernel queue drops {drops[0]}, netlink drops {drops[1]}; kept by the engine {rows[-1]['kept']}, "
                  f"kernel held peak {rows[-1]['kernel_held_peak']}), engine {cpu * 100:.0f} % of a core, "
                  f"{rows[-1]['peak_rss_mb']:.0f} MB", flush=True)
    finally:
        eng.stop()
        queue_rule(NS_R, IF_R, mac_s, False)
    return rows


def tcp_goodput(kind: str, mac_s: str, mac_r: str, seconds: int, omit: int) -> dict:
    bdp = int(1e9 * 0.6 / 8)  # 1 Gbit/s x 600 ms: buffers sized from the bandwidth-delay product
    for name in (NS_S, NS_R):
        for key, val in (("net.ipv4.tcp_rmem", f"4096 131072 {2 * bdp}"), ("net.ipv4.tcp_wmem", f"4096 131072 {2 * bdp}"),
                         ("net.core.rmem_max", str(2 * bdp)), ("net.core.wmem_max", str(2 * bdp))):
            run(ns(name, "sysctl", "-qw", f"{key}={val}"), check=False)
    queue_rule(NS_R, IF_R, mac_s, True)
    queue_rule(NS_S, IF_S, mac_r, True)
    engines = [Engine(kind, NS_R, mac_s, "delay=300ms"), Engine(kind, NS_S, mac_r, "delay=300ms")]
    try:
        server = subprocess.Popen(ns(NS_R, "iperf3", "-s", "-1", "-p", 5202), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        rtt = run(ns(NS_S, "ping", "-U", "-c", "2", "-i", "0.3", IP_R), check=False).stdout.strip().splitlines()[-1]
        res = run(ns(NS_S, "iperf3", "-c", IP_R, "-p", 5202, "-t", seconds, "-O", omit, "-J"), check=False)
        server.kill()
        server.wait()
        end = json.loads(res.stdout)["end"]
        gbit = end["sum_received"]["bits_per_second"] / 1e9
        row = {"engine": kind, "rtt": rtt, "goodput_mbit": gbit * 1000, "retransmits": end["sum_sent"].get("retransmits")}
        print(f"  {kind:6s} TCP over 600 ms RTT ({rtt}): {gbit * 1000:.0f} Mbit/s", flush=True)
        return row
    finally:
        for e in engines:
            e.stop()
        queue_rule(NS_R, IF_R, mac_s, False)
        queue_rule(NS_S, IF_S, mac_r, False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer packets and shorter runs")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--no-proto", action="store_true", help="skip the Python prototype")
    ap.add_argument("--parts", default="accuracy,shares,udp,tcp", help="comma-separated subset to run")
    ap.add_argument("--hold", choices=("switch", "ingress"), default="switch",
                    help="where packets are held: a bridging namespace's FORWARD (netns backend) or the receiver's "
                         "PREROUTING (compose)")
    args = ap.parse_args()
    global LINKD, BLAST, HOLD
    HOLD = args.hold
    LINKD = linkd_binary()
    if not LINKD:
        raise SystemExit("swarm-linkd not found: run `make setup` (or set $SWARM_LINKD)")
    BLAST = str(Path(LINKD).with_name("udp-blast"))
    proto = not args.no_proto
    if proto:
        try:
            import netfilterqueue  # noqa: F401
        except ImportError:
            print("note: NetfilterQueue not importable: the Python prototype part is skipped "
                  "(apt-get install libnetfilter-queue-dev; pip install NetfilterQueue)")
            proto = False
    count = 2_000 if args.quick else 10_000
    udp_s = 3 if args.quick else 5
    out: dict = {"machine": {"kernel": os.uname().release, "cpus": os.cpu_count(),
                             "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "hold": HOLD,
                             "load": os.getloadavg()}}
    try:
        mac_s, mac_r = setup()
        parts = set(args.parts.split(","))
    except BaseException:
        teardown()
        raise
    try:
        if "accuracy" in parts:
            accuracy_part(out, mac_s, proto, args.quick)
        if "shares" in parts:
            print(f"shares over {count} packets:", flush=True)
            out["shares"] = shares(mac_s, count)
        if "udp" in parts:
            udp_part(out, mac_s, proto, udp_s)
        if "tcp" in parts:
            print("TCP over 600 ms RTT, BDP buffers:", flush=True)
            out["tcp"] = [tcp_goodput("linkd", mac_s, mac_r, 20 if args.quick else 30, 10)]
            if proto:
                out["tcp"].append(tcp_goodput("python", mac_s, mac_r, 20 if args.quick else 30, 10))
    finally:
        teardown()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps(out["machine"]))


def accuracy_part(out: dict, mac_s: str, proto: bool, quick: bool) -> None:
    print("delay accuracy (one-way, userspace to userspace):", flush=True)
    n_acc = 1000 if quick else 3000
    out["accuracy"] = accuracy("linkd", mac_s, [1, 10, 100, 1000, 4000], n_acc)
    if proto:
        out["accuracy"] += accuracy("python", mac_s, [1, 10, 100, 1000, 4000], n_acc)[1:]


def udp_part(out: dict, mac_s: str, proto: bool, seconds: int) -> None:
    print("UDP at 1 s one-way delay:", flush=True)
    cap = udp_capacity(seconds)
    out["udp_capacity_gbit"] = cap / 1e9
    fractions = [0.1, 0.25, 0.5, 0.75, 1.0]
    out["udp"] = udp_delay("linkd", mac_s, cap, fractions, seconds)
    if proto:
        out["udp"] += udp_delay("python", mac_s, cap, fractions, seconds)


LINKD = BLAST = ""

if __name__ == "__main__":
    main()
