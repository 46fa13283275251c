#!/usr/bin/env python3
"""In-node agent: the main process of every spacecraft node, and its traffic launcher.

Subcommands (each node runs them in its own container or namespace; standard library only, because the
agent runs both inside the node image and, with the netns backend, on the host):

- `run`: the node's long-running main process; waits for SIGTERM/SIGINT and exits 0. When SWARM_APPS names
  `swarm-app`, it becomes the reference swarm app instead (flightsw/swarm_app.py, same interpreter).
- `servers --bind IP --ports P,P,..`: start one one-off iperf3 server per port, wait until every
  port listens, then stop them (SIGSTOP). A stopped server's kernel socket
  still completes TCP handshakes, so clients can connect and wait before the test is released.
- `clients`: reads a JSON list of flows ({"id", "argv"}) as one line on stdin and starts one iperf3
  client per flow at once: each connects to its (stopped) server and waits there, with its process
  start-up cost already paid. Prints {"parked": n}, reads the release instant T (epoch seconds) as the
  next line, and at T continues this node's stopped servers (one kill(SIGCONT) each): every flow whose
  destination is this node starts now. Stamps that instant and each client's exit, and prints one JSON
  line per flow: {"id", "release_ts", "exit_ts", "returncode", "output"} (output: iperf3's JSON verbatim).
  Every node holding servers runs `clients`, with an empty list if it sends nothing.
- `mux`: the multiplexing traffic engine: one process carries all of this node's flows of a test; it speaks its
  own JSON-lines protocol on stdin/stdout (see flightsw/trafficd.py). The agent becomes the Rust engine
  (flightsw/trafficd-rs, swarm-trafficd) where it is built, else runs the Python one (trafficd.py).
- `cleanup`: kill the iperf3 and traffic-engine processes this agent started (from its pid files) and
  nothing else.
"""
from __future__ import annotations

import os
import signal
import sys


def cmd_run(_args: object = None) -> int:
    """Run until told to stop (or become the reference swarm app, when SWARM_APPS names it)."""
    if "swarm-app" in os.environ.get("SWARM_APPS", "").split(","):
        TYPE_CHECKING = False  # what mypy reads as True: it checks the package's import
        if TYPE_CHECKING or __package__:  # the protocol module, imported here: the `run` fast path below has not imported it
            from flightsw import protocol as proto_
        else:
            import protocol as proto_
        app = os.path.join(os.path.dirname(os.path.realpath(__file__)), "swarm_app.py")
        os.execv(sys.executable, proto_.labelled([sys.executable, app], proto_.own_label()))
    stop = False

    def on_signal(signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node = os.environ.get("SWARM_NODE", "?")
    print(f"agent: node {node} (index {os.environ.get('SWARM_INDEX', '?')}) "
          f"isl {os.environ.get('SWARM_ISL_IP', '?')} ground {os.environ.get('SWARM_GROUND_IP', '?')} up", flush=True)
    while not stop:
        signal.pause()
    print(f"agent: node {node} stopping", flush=True)
    return 0


if __name__ == "__main__" and sys.argv[1:] == ["run"]:
    # The node's main process needs nothing below: 100 of them start at once on `up`, and the
    # imports below (argparse, subprocess, the traffic engine, ...) cost each ~40 ms of CPU.
    sys.exit(cmd_run())

import argparse  # noqa: E402  (after the `run` fast path above, on purpose)
import json  # noqa: E402
import selectors  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

TYPE_CHECKING = False  # what mypy reads as True: it checks the package's imports (no `typing` import at start-up)
if TYPE_CHECKING or __package__:  # imported as flightsw.agent (the unit tests)
    from flightsw import protocol as proto
    from flightsw import trafficd
else:  # run as a script, in a node or on the host (netns): its own directory is sys.path[0]
    import protocol as proto
    import trafficd


def run_dir() -> Path:
    """Per-node scratch directory ($SWARM_RUN_DIR; namespaces share the host's /run)."""
    d = Path(os.environ.get(proto.RUN_DIR_ENV, proto.RUN_DIR_DEFAULT))
    d.mkdir(parents=True, exist_ok=True)
    return d


def listening_tcp_ports() -> set[int]:
    """TCP ports in LISTEN state in this network namespace."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _remember(pids: list[int]) -> None:
    with open(run_dir() / proto.IPERF3_PIDS, "a") as f:
        f.writelines(f"{p}\n" for p in pids)


def cmd_servers(args: argparse.Namespace) -> int:
    """Start one-off iperf3 servers, wait until they listen, then stop them (SIGSTOP)."""
    ports = [int(p) for p in args.ports.split(",") if p]
    # Each server in a session of its own: a stopped process group that loses its parent (this agent
    # exits) is sent SIGHUP by the kernel, and iperf3 ends on SIGHUP.
    tag = proto.own_label()  # each server shows its node's label in ps, as the agent does
    pids = []
    for port in ports:
        argv, program = proto.labelled_popen_args(["iperf3", "-s", "-1", "-J", "-B", args.bind, "-p", str(port)], tag)
        pids.append(subprocess.Popen(argv, executable=program, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True).pid)
    _remember(pids)
    deadline = time.monotonic() + args.timeout
    while True:
        missing = set(ports) - listening_tcp_ports()
        if not missing:
            break
        if time.monotonic() > deadline:
            print(json.dumps({"listening": len(ports) - len(missing), "missing": sorted(missing)}))
            return 1
        time.sleep(0.02)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    with open(run_dir() / proto.SERVERS_STOPPED, "a") as f:
        f.writelines(f"{p}\n" for p in pids)
    print(json.dumps({"listening": len(ports), "stopped": len(pids)}))
    return 0


def _continue_servers() -> None:
    """SIGCONT every server `servers` stopped on this node (a few microseconds per server)."""
    path = run_dir() / proto.SERVERS_STOPPED
    if path.exists():
        for pid in path.read_text().split():
            try:
                os.kill(int(pid), signal.SIGCONT)
            except ProcessLookupError:
                pass
        path.unlink()


def cmd_clients(args: argparse.Namespace) -> int:
    """Start every client (they wait on the stopped servers), release at the instant read from stdin."""
    flows = json.loads(sys.stdin.readline())
    tag = proto.own_label()
    procs = {}
    for flow in flows:
        argv, program = proto.labelled_popen_args(flow[proto.ARGV], tag)
        procs[flow[proto.ID]] = subprocess.Popen(argv, executable=program, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
    _remember([p.pid for p in procs.values()])
    print(proto.dumps(proto.parked(len(procs))), flush=True)
    line = sys.stdin.readline()
    if not line.strip():  # the host went away: release nobody
        for proc in procs.values():
            proc.kill()
        return 1
    delay = float(line) - time.time()
    if delay > 0:
        time.sleep(delay)
    _continue_servers()
    release_ts = time.time()
    # Drain every pipe concurrently (outputs can exceed a pipe buffer) and stamp each exit.
    sel = selectors.DefaultSelector()
    chunks: dict[str, list[bytes]] = {fid: [] for fid in procs}
    for fid, proc in procs.items():
        assert proc.stdout is not None  # started with stdout=PIPE
        sel.register(proc.stdout, selectors.EVENT_READ, fid)
    exit_ts: dict[str, float] = {}
    while len(exit_ts) < len(procs):
        for key, _ in sel.select(timeout=1.0):
            data = os.read(key.fd, 65536)
            if data:
                chunks[key.data].append(data)
            else:
                sel.unregister(key.fileobj)
                exit_ts[key.data] = time.time()
    print(proto.dumps({proto.RELEASE_TS: release_ts}), flush=True)
    for fid, proc in procs.items():
        proc.wait()
        print(proto.dumps(proto.flow_report(fid, release_ts, exit_ts[fid], proc.returncode,
                                            b"".join(chunks[fid]).decode(errors="replace"))), flush=True)
    return 0


def trafficd_binary() -> str | None:
    """The Rust traffic engine (swarm-trafficd): $SWARM_TRAFFICD, else where `make setup` builds it, else on PATH;
    None for the Python engine ($SWARM_TRAFFICD=python, or no binary, e.g. in a node image without it)."""
    env = os.environ.get(proto.TRAFFICD_ENV)
    if env:
        return env if env != proto.TRAFFICD_PYTHON and os.access(env, os.X_OK) else None
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    built = os.path.join(cache, "swarm-emu", "trafficd-target", "release", proto.RUST_ENGINE)
    if os.access(built, os.X_OK):
        return built
    import shutil
    return shutil.which(proto.RUST_ENGINE)


def cmd_mux(_args: argparse.Namespace) -> int:
    """Run the multiplexing traffic engine for one test (protocol: flightsw/protocol.py, flightsw/trafficd.py).

    The Rust engine where it is built (the same protocol and reports at about half the CPU), exec'd in
    place of this agent, so the host's pipes and the pid stay; its argv[0] carries this node's label for ps."""
    pid_file = str(run_dir() / proto.MUX_PIDS)
    binary = trafficd_binary()
    if binary:
        tag = proto.own_label()
        try:
            os.execv(binary, [f"{binary} {tag}" if tag else binary, pid_file])
        except OSError as exc:  # e.g. built for another libc: the Python engine still runs the test
            print(f"agent: {binary}: {exc}; running the Python engine", file=sys.stderr, flush=True)
    return trafficd.serve(pid_file)


def _is_ours(pid: int, pid_file: str) -> bool:
    """True if `pid` is still a process this agent started: iperf3, or an agent running `mux` (or the Rust engine
    it became)."""
    try:
        if pid_file == proto.IPERF3_PIDS:
            return Path(f"/proc/{pid}/comm").read_text().strip() == "iperf3"
        if Path(f"/proc/{pid}/comm").read_text().strip() == proto.RUST_ENGINE:
            return True
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(proto.AGENT.encode()) for a in argv) and proto.MUX.encode() in argv and pid != os.getpid()


def cmd_cleanup(_args: argparse.Namespace) -> int:
    """Kill the iperf3 and traffic-engine processes this agent started that are still running."""
    _continue_servers()
    killed = 0
    for name in (proto.IPERF3_PIDS, proto.MUX_PIDS):
        path = run_dir() / name
        if not path.exists():
            continue
        for pid in {int(p) for p in path.read_text().split()}:
            if _is_ours(pid, name):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        path.unlink()
    print(json.dumps({"killed": killed}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=proto.AGENT, description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(proto.RUN, help="the node's main process").set_defaults(func=cmd_run)
    p = sub.add_parser(proto.SERVERS, help="start one-off iperf3 servers and wait until they listen")
    p.add_argument("--bind", required=True)
    p.add_argument("--ports", required=True)
    p.add_argument("--timeout", type=float, default=30)
    p.set_defaults(func=cmd_servers)
    sub.add_parser(proto.CLIENTS, help="park iperf3 clients, release them at one instant").set_defaults(func=cmd_clients)
    sub.add_parser(proto.MUX, help="multiplexing traffic engine for one test").set_defaults(func=cmd_mux)
    sub.add_parser(proto.CLEANUP, help="kill iperf3 and engine processes this agent started").set_defaults(func=cmd_cleanup)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
