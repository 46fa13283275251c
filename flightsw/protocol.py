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


def dtn_flow(dst: str, size: int, rate: float, count: int | None) -> dict:
    """Bundles to dtn://dst/<service>: `size` payload bytes at `rate` bundles/s (0: as fast as the agent
    accepts), `count` of them (None: until the end of sending)."""
    return {"dst": dst, "size": size, "rate": rate, "count": count}


def dtn_probe(bind: str, port: int, rate: float, dsts: list[tuple[str, str]]) -> dict:
    """The UDP probe: from `bind`:`port` at `rate` datagrams/s to each (node, address)."""
    return {"bind": bind, "port": port, "rate": rate, "dsts": [{"dst": d, "ip": ip} for d, ip in dsts]}
