"""The host <-> node protocol of the in-node programs, written once for both sides.

The programs in flightsw/ run inside every node (agent.py, trafficd.py, dtn_traffic.py) and the host drives
them over stdin/stdout with JSON lines (experiments/traffic, experiments/dtn, experiments/orbits). Both sides
import this module, so a subcommand, a message or a field name cannot drift apart on one side only. Standard
library only: it is copied into the node image with the programs (images/node/Dockerfile copies flightsw/) and
imported there as a sibling module; on the host it is `flightsw.protocol` (a package of the project).
"""
from __future__ import annotations

import json

# ------------------------------------------------------------------------------------- agent.py
AGENT = "agent.py"
#: the agent's subcommands (`agent.py <command>`)
RUN, SERVERS, CLIENTS, MUX, CLEANUP = "run", "servers", "clients", "mux", "cleanup"
#: where the agent keeps its pid files ($SWARM_RUN_DIR; namespaces share the host's /run)
RUN_DIR_ENV, RUN_DIR_DEFAULT = "SWARM_RUN_DIR", "/run/swarm"
IPERF3_PIDS, MUX_PIDS, SERVERS_STOPPED = "iperf3.pids", "mux.pids", "servers.stopped"

# `clients`: host -> a JSON list of flows, one line; agent -> {"parked": n}; host -> the release instant (epoch s)
# as one line (an empty line or end of input: release nobody); agent -> {"release_ts": t}, then one flow report
# per flow.
PARKED, RELEASE_TS, ID, ARGV = "parked", "release_ts", "id", "argv"


def dumps(obj: object) -> str:
    """One protocol line (without its newline)."""
    return json.dumps(obj)


def client_flow(flow_id: str, argv: list[str]) -> dict:
    """One flow of the `clients` list: its id and the client argv the agent starts."""
    return {ID: flow_id, ARGV: argv}


def parked(count: int) -> dict:
    return {PARKED: count}


def is_parked(line: str) -> bool:
    return line.startswith('{"' + PARKED + '"')


def release_line(instant: float) -> str:
    """The release instant as the agent reads it (epoch seconds, one line)."""
    return f"{instant}\n"


def flow_report(flow_id: str, release_ts: float, exit_ts: float, returncode: int, output: str) -> dict:
    """One client's result: stamps, exit code and the client's output verbatim (iperf3's JSON)."""
    return {ID: flow_id, RELEASE_TS: release_ts, "exit_ts": exit_ts, "returncode": returncode, "output": output}


def is_flow_report(line: str) -> bool:
    return line.startswith('{"' + ID + '"')


def is_release_report(line: str) -> bool:
    return line.startswith('{"' + RELEASE_TS + '"')


# -------------------------------------------------------------------- trafficd.py (`agent.py mux`)
# 1. host -> mux_plan(...) as one line; engine -> {"listening": port}
# 2. host -> "connect"; engine -> {"connected": n, "errors": {flow id: message}}
# 3. host -> "RELEASE DURATION"; engine -> {"release_ts": t}, one record per flow ({"id", "side", ...}), {"done": true}
LISTENING, CONNECT, CONNECTED, ERRORS, DONE, SIDE = "listening", "connect", "connected", "errors", "done", "side"
SEND, RECV = "send", "recv"
#: the "connected" reply also names the engine that runs (ENGINE: PYTHON_ENGINE or RUST_ENGINE), for the flow records
ENGINE, PYTHON_ENGINE, RUST_ENGINE = "engine", "trafficd.py", "swarm-trafficd"
#: the Rust engine's binary (flightsw/trafficd-rs, built by `make setup` into ~/.cache/swarm-emu/trafficd-target):
#: $SWARM_TRAFFICD names it ("python": always the Python engine), else the agent looks in the cache, then on PATH
TRAFFICD_ENV, TRAFFICD_PYTHON = "SWARM_TRAFFICD", "python"


def mux_plan(protocol: str, bind: str, port: int, length: int | None, interval: float) -> dict:
    """A node's engine plan without flows; mux_out / mux_in entries go into its "out" and "in" lists."""
    return {"protocol": protocol, "bind": bind, "port": port, "length": length, "interval": interval, "out": [], "in": []}


def mux_out(flow_id: str, index: int, dst: str, port: int, rate_bps: float | None) -> dict:
    """A flow the node sends: to dst:port, identified by `index` (unique per destination), at rate_bps (UDP)."""
    return {ID: flow_id, "index": index, "dst": dst, "port": port, "rate_bps": rate_bps}


def mux_in(flow_id: str, index: int) -> dict:
    """A flow the node receives, told apart by the sender's `index`."""
    return {ID: flow_id, "index": index}


def mux_release_line(release: float, duration: float) -> str:
    return f"{release} {duration}\n"


def parse_mux_command(line: str) -> tuple[str, float, float]:
    """(CONNECT, nan, nan) or ("release", release, duration) from a host line; ValueError for anything else."""
    words = line.split()
    if words == [CONNECT]:
        return CONNECT, float("nan"), float("nan")
    if len(words) != 2:
        raise ValueError(f"traffic engine: not a command: {line.strip()!r}")
    return "release", float(words[0]), float(words[1])


# ---------------------------------------------------------------------------------- dtn_traffic.py
DTN_TRAFFIC = "dtn_traffic.py"
#: its subcommands: `run PLAN.json|-` (a test's traffic) and `recv-once` (one bundle, for `swarm dtn recv`)
DTN_RUN, DTN_RECV_ONCE = "run", "recv-once"
STDIN = "-"
#: the event field and the events the host reads
EV = "ev"
EV_START, EV_SENT, EV_RECV, EV_STORE, EV_IP_SENT, EV_IP_RECV = "start", "sent", "recv", "store", "ip_sent", "ip_recv"
EV_RECV_DONE, EV_DONE, EV_ERROR = "recv_done", "done", "error"


def event_line(record: dict) -> str:
    """One event as dtn_traffic.py writes it (compact separators: the host matches the line's start)."""
    return json.dumps(record, separators=(",", ":"))


def is_event(line: str, ev: str) -> bool:
    """Whether a line of dtn_traffic.py's output is the event `ev`, without parsing the whole line."""
    return line.startswith('{"' + EV + '":"' + ev + '"')


def dtn_plan(node: str, port: int, release: float, duration: float, drain: float, lifetime: float,
             store_interval: float, service: str = "in") -> dict:
    """A node's traffic plan without flows: dtn_flow entries go into "flows"; the host sets "receive" and then
    "expect" (bundles) or "quiet" (s), and "ip_probe" (dtn_probe) where a UDP probe runs beside the bundles."""
    return {"node": node, "port": port, "service": service, "flows": [], "release": release, "duration": duration,
            "drain": drain, "lifetime": lifetime, "receive": False, "store_interval": store_interval}


def dtn_flow(dst: str, size: int, rate: float, count: int | None, eid: str | None = None) -> dict:
    """Bundles to node `dst`'s endpoint `eid` (None: dtn://dst/<service>): `size` payload bytes at `rate`
    bundles/s (0: as fast as the agent accepts), `count` of them (None: until the end of sending)."""
    flow = {"dst": dst, "size": size, "rate": rate, "count": count}
    if eid:
        flow["eid"] = eid
    return flow


def dtn_probe(bind: str, port: int, rate: float, dsts: list[tuple[str, str]]) -> dict:
    """The UDP probe: from `bind`:`port` at `rate` datagrams/s to each (node, address)."""
    return {"bind": bind, "port": port, "rate": rate, "dsts": [{"dst": d, "ip": ip} for d, ip in dsts]}


# ------------------------------------------------------------------------------------- process labels
# Every long-running process the framework starts for a swarm names its swarm and node in its argv, so the
# host's `ps -eo args` (and `pgrep -f swarm-emu:NAME/`) tells whose it is; the environment
# (SWARM_NAME) is not shown by ps. A Python program gets the label as an `-X` option (CPython keeps unknown
# -X options in sys._xoptions and ignores them; its argv[0] stays, so sys.executable and its venv stay right);
# any other program gets it in its argv[0] ("<program> swarm-emu:S/N"), set by bash's `exec -a` or by
# Popen(executable=...). A shell wrapper (`sh -c SCRIPT $0 PROGRAM ARGS`, whose script runs "$@", e.g.
# `exec "$@"` or a restart loop) passes the label on to the program it runs; any other shell command is labelled
# as a whole.
LABEL_PREFIX = "swarm-emu:"
#: `sh -c SCRIPT $0 PROGRAM ARGS...` is a wrapper (its $0 its own argument, "$@" the program it runs or becomes)
#: when SCRIPT runs "$@"; a script running "$0" "$@" has the program as $0 and is labelled as a whole
WRAPPER_RUNS, PROGRAM_IS_DOLLAR_ZERO = '"$@"', '"$0" "$@"'
#: `sh -c EXEC_AS "<program> <label>" program args...`: bash's `exec -a` sets argv[0]; an image without bash
#: (a user's) runs the program unlabelled rather than not at all
EXEC_AS = ('command -v bash >/dev/null 2>&1 && exec bash -c \'exec -a "$0" "$@"\' "$0" "$@"; exec "$@"')


def label(swarm: str, node: str) -> str:
    """The label of every process of `node` in `swarm`: `swarm-emu:<swarm>/<node>`."""
    return f"{LABEL_PREFIX}{swarm}/{node}"


def own_label() -> str | None:
    """This process's label: the -X option it was started with, else one made from SWARM_NAME/SWARM_NODE."""
    import os
    import sys
    for key in getattr(sys, "_xoptions", {}):
        if key.startswith(LABEL_PREFIX):
            return key
    swarm, node = os.environ.get("SWARM_NAME"), os.environ.get("SWARM_NODE")
    return label(swarm, node) if swarm and node else None


def is_python(program: str) -> bool:
    name = program.rsplit("/", 1)[-1]
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[len("python"):])


def labelled(argv: list[str], tag: str | None) -> list[str]:
    """`argv` that shows `tag` in ps (see above); unchanged when `tag` is None or argv already carries it."""
    if not tag or not argv or any(tag in a for a in argv):
        return list(argv)
    program = argv[0]
    if is_python(program):
        return [program, "-X", tag, *argv[1:]]
    if (program.rsplit("/", 1)[-1] in ("sh", "bash", "dash") and len(argv) > 4 and argv[1] == "-c"
            and WRAPPER_RUNS in argv[2] and PROGRAM_IS_DOLLAR_ZERO not in argv[2]):
        return [*argv[:4], *labelled(argv[4:], tag)]  # a wrapper running "$@": label what it runs
    # anything else, a shell script too (e.g. a supervising loop running "$0" "$@": its $0 is the program), keeps
    # its arguments as they are and shows the label in argv[0]
    return ["sh", "-c", EXEC_AS, f"{program} {tag}", *argv]


def labelled_popen_args(argv: list[str], tag: str | None) -> tuple[list[str], str | None]:
    """(args, executable) for subprocess.Popen: the program runs as argv[0] says, shown as "argv[0] tag"."""
    if not tag or not argv or is_python(argv[0]):
        return labelled(argv, tag), None
    return [f"{argv[0]} {tag}", *argv[1:]], argv[0]
