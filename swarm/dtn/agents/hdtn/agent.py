"""HDTN (NASA's High-rate DTN, the user's own build) as a DTN agent of the framework.

- Installed by the user, like ION: `dtn.install` (or $SWARM_HDTN_INSTALL) is the prefix of their CMake build
  (`cmake -DCMAKE_INSTALL_PREFIX=...; make; make install`), whose bin/ holds hdtn-one-process; checked before anything
  starts. images/hdtn/Dockerfile layers bin/ and lib/ on the node image with the Debian runtime libraries HDTN links
  (Boost, ZeroMQ, OpenSSL) and runs `ldd` on every program. Container backends only (each router binds the same
  ports in its node).
- Planned by swarm.dtn.agents.hdtn.plan: the node is its router (hdtn-one-process, ipn:<N + 1000000>.0) and its
  applications' BP node ipn:<N> (flightsw/hdtn_app.py over STCP on loopback), hdtn.json and the contact plan HDTN's
  CGR routes over.
- CLAs: `tcp` (HDTN's TCPCLv4), `udp`, `ltp` (HDTN's own LTP engine over UDP, port 1113) and `stcp` (HDTN's
  simple TCP CLA: HDTN to HDTN only, no other agent has it).
- Routed by the run's contact plan when an experiment has one (load_contacts: uploaded over HDTN's telemetry API by
  flightsw/hdtn_api.py), else by the contacts its start gave it (every link up at its rate).
- Asked in the node: readiness = the application side listens and the router holds a TCPCLv4 session with every
  peer's router (its log's "received valid SessionInit from remote with EID ..."; `udp`: the router started);
  counters = the application side's files (delivered), the peers with a session, and the router's telemetry
  (stored, forwarded, received, failed: flightsw/hdtn_api.py).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from swarm.dtn.agents.base import (Agent, AgentPlan, ContactLoad, Counters, Install, LinkView, NodeShell, Peer,
                                   script_output, script_ready)
from swarm.dtn.agents.dtn7.plan import guard_rules
from swarm.dtn.agents.hdtn.plan import (API_MARK, APP_PORT, CONTACTS, GUI_NOISE, GUI_PORT, HELPER, LOCAL_PORT, PROGRAM, ROUTER_BASE,
                                       ZMQ_PORTS, plan_hdtn, run_contact_plan)
from swarm.spec.dtn import DtnSpec

PROGRAMS = (PROGRAM,)
NODE_DIR = "/var/lib/swarm-dtn"
#: The in-node client of HDTN's telemetry API (the run's contact plan, the router's counters).
API = "/opt/swarm/flightsw/hdtn_api.py"
#: Inside the node, in its work folder: why the start failed, or not started yet, or the log lines readiness reads.
READY = ('cd "$0" || exit 4; grep -m 1 "^HDTN start:" dtnd.log && exit 3; test -e app.ready '
         '|| { echo starting; exit 4; }; grep -q "starting Storage" dtnd.log || { echo "router starting"; exit 4; }; '
         'grep -o "received valid SessionInit from remote with EID ipn:[0-9]*" dtnd.log | sort -u; true')
#: Counters: the node's number, the application side's counts (delivered, sent), the routers it has a session with,
#: and the router's own counts from its telemetry API (flightsw/hdtn_api.py; nothing while the router is down).
COUNTERS = ('cd "$0" || exit 4; cat node-number; echo ---; cat delivered 2>/dev/null || echo 0; echo ---; '
            'cat sent 2>/dev/null || echo 0; echo ---; '
            'grep -o "received valid SessionInit from remote with EID ipn:[0-9]*" dtnd.log | sort -u; echo ---; '
            f'test -e {API_MARK} && python3 "$1" counters --port "$2" --timeout 3 2>/dev/null; true')
SEND = 'cd "$0" && python3 "$1" send --node "$(cat node-number)" --lifetime "$2" "$3"'
#: The run's contact plan from stdin (kept as run-contacts.json), uploaded over HDTN's telemetry API.
LOAD_CONTACTS = (f'cd "$0" && cat > run-contacts.json || exit 1; test -e {API_MARK} || {{ echo "its hdtn-one-process has no '
                 'telemetry API (build HDTN with its default USE_WEB_INTERFACE=ON)" >&2; exit 1; }; '
                 'python3 "$1" upload-contacts --port "$2" run-contacts.json')
SESSION_RE = re.compile(r"received valid SessionInit from remote with EID ipn:(\d+)")


class Hdtn(Agent):
    name = "hdtn"
    title = "HDTN (the user's build)"
    clas = ("tcp", "udp", "ltp", "stcp")
    daemon = "hdtn"
    install = Install(script="", programs=PROGRAMS, cache="", cache_env="SWARM_HDTN_INSTALL",
                      dockerfile="images/hdtn/Dockerfile", image_repo="swarm-emu/hdtn", first_build="",
                      user_tree=True)
    ltp_by_ltpcla = False
    needs_containers = "each HDTN router binds the same loopback and ZeroMQ ports in its own node"

    def plan(self, node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             isl_subnet: str, rtt: float, link_of: Callable[[str, str], LinkView]) -> AgentPlan:
        return plan_hdtn(node, piece.number_of(index), piece, peers, workdir, link_of, self.config_text(piece),
                         piece.config or "", piece.ltp.engine_of(index))

    def guard(self, piece: DtnSpec, isl_subnet: str) -> str:
        """The CLA's port answers the ISL only (as for every agent); the application side's and the router's
        loopback ports (STCP, ZeroMQ, the web interface) answer loopback only."""
        return guard_rules(piece, isl_subnet, local_tcp=(LOCAL_PORT, APP_PORT, *ZMQ_PORTS, GUI_PORT))

    def ready(self, shell: NodeShell, plan: AgentPlan) -> Optional[str]:
        why, out = script_ready(shell, ["sh", "-c", READY, plan.workdir])
        return why or readiness(plan, out)

    def counters(self, shell: NodeShell, node: str, piece: DtnSpec) -> Counters:
        out = script_output(shell, ["sh", "-c", COUNTERS, NODE_DIR, API, str(ZMQ_PORTS[1])])
        return parse_counters(out, piece)

    def store(self, shell: NodeShell, piece: DtnSpec, timeout: float) -> list[str]:
        return []  # HDTN tells its storage over its telemetry API only (ZeroMQ), not read here

    def send(self, shell: NodeShell, programs: dict[str, str], piece: DtnSpec, dst_eid: str, payload: bytes,
             lifetime: float) -> str:
        res = shell(["sh", "-c", SEND, NODE_DIR, HELPER, str(max(1, int(lifetime))), dst_eid],
                    payload.decode("utf-8", "replace"), 60, False)
        if not res.ok:
            raise OSError((res.stderr or res.stdout).strip()[-200:] or f"exit {res.returncode}")
        words = res.stdout.split()
        return words[1] if len(words) == 2 else dst_eid

    def log_events(self, log: str) -> list[dict]:
        return []  # HDTN logs no per-bundle events at its INFO level

    def failure_lines(self, log: str) -> list[tuple[Optional[float], str]]:
        return [(None, line.strip()) for line in log.splitlines()
                if ("[error]" in line or "[fatal]" in line or line.startswith("HDTN start:")) and GUI_NOISE not in line]

    def handovers(self, log: str, cla: str) -> int:
        return 0  # no external CLA modules

    def load_contacts(self, shell: NodeShell, plan: AgentPlan, load: ContactLoad) -> Optional[list[str]]:
        """HDTN routes (CGR) and brings its outducts up and down by its contact plan: the run's plan replaces the
        one its start gave it (plan.run_contact_plan), uploaded over HDTN's telemetry API; an upload HDTN does not
        answer with success is an OSError."""
        doc, refused = run_contact_plan(plan.files.get(CONTACTS, ""), load)
        res = shell(["sh", "-c", LOAD_CONTACTS, plan.workdir, API, str(ZMQ_PORTS[1])], json.dumps(doc), 60, False)
        if not res.ok:
            said = (res.stderr or res.stdout).strip()
            raise OSError(f"HDTN on {plan.node} did not take the run's contact plan: "
                          f"{said.splitlines()[-1][:200] if said else f'exit {res.returncode}'}")
        return refused

    def client(self, piece: DtnSpec) -> dict[str, Any]:
        return {"client": "hdtn-stcp", "workdir": NODE_DIR}


def session_routers(log: str) -> set[int]:
    """The router numbers the log says a TCPCLv4 session was set up with."""
    return {int(m.group(1)) for m in SESSION_RE.finditer(log)}


def readiness(plan: AgentPlan, log: str) -> Optional[str]:
    """None when the router holds a TCPCLv4 session with the router of every expected peer (with `udp` the plan
    expects none: UDP has no sessions)."""
    have = session_routers(log)
    missing = [p for p in plan.expected_peers if int(p) + ROUTER_BASE not in have and int(p) not in have]
    return f"no TCPCLv4 session with {', '.join(missing[:5])}" if missing else None


def parse_counters(text: str, piece: DtnSpec) -> Counters:
    """COUNTERS' answer (pure): delivered from the application side, peers = node numbers whose router (or own
    agent) set up a session, stored / forwarded / received / failed from the router's telemetry (0 without it)."""
    number, delivered, _sent, log, telemetry = (text.split("---\n") + ["", "", "", ""])[:5]
    peers = sorted((n - ROUTER_BASE if n > ROUTER_BASE else n for n in session_routers(log)))
    try:
        told = json.loads(telemetry.strip() or "{}")
    except ValueError:
        told = {}
    stored, forwarded, received, failed = (int(told.get(k, 0)) if isinstance(told, dict) else 0
                                           for k in ("stored", "forwarded", "received", "failed"))
    return Counters(f"ipn:{number.strip()}.0", [str(n) for n in peers], stored, _int(delivered), forwarded, received,
                    failed, [piece.cla])


def _int(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0
