"""ION (NASA JPL's Interplanetary Overlay Network, the user's own build) as a DTN agent of the framework.

- Installed by the user, like cFS: `dtn.install` (or $SWARM_ION_INSTALL) is the prefix of their build
  (`./configure --prefix=...; make; make install`); the framework checks that its bin/ holds PROGRAMS and its lib/
  LIBRARIES before anything starts, and layers bin/ and lib/ onto the node image (images/ion/Dockerfile, which runs
  `ldd` on every program against the image's libraries). Container backends only: each node needs its own UTS name
  (ION's dtn admin endpoint is dtn://<host name>/) and its own IPC namespace.
- Planned by swarm.dtn.agents.ion.plan (ionconfig and rc files, start.sh); `cla: ltp` is ION's own LTP engine
  (ltpcli/ltpclo over udplsi/udplso), which swarm-ltpcla beside dtn7 reaches by engine ID; `cla: udp` ION's udpcli
  and udpclo. ION 4.1's TCP convergence layer is TCPCLv3 (RFC 7242), which none of the other agents speaks, so
  `tcp` is not offered.
- Asked with ION's own tools inside the node: bpadmin (endpoints, plans), bpstats (counters, written to ion.log),
  bplist (bundles held), bpsendfile (send), bprecvfile (receive, in flightsw/dtn_traffic.py's ion-tools client).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

from swarm.dtn.agents.base import (Agent, AgentPlan, ContactLoad, Counters, Install, LinkView, NodeShell, Peer,
                                   script_output, script_ready)
from swarm.dtn.agents.dtn7.plan import guard_rules
from swarm.dtn.agents.ion.plan import SOURCE_SERVICE, contact_plan_rc, host_notes, plan_ion
from swarm.spec.dtn import APP_SERVICE, DtnSpec, endpoint

#: What the adapter runs: the admin programs and ionstop, the daemons they start for the CLAs offered, the tools.
PROGRAMS = ("ionadmin", "ionsecadmin", "ltpadmin", "bpadmin", "ipnadmin", "dtn2admin", "ionstop", "rfxclock",
            "ltpclock", "ltpdeliv", "ltpmeter", "udplsi", "udplso", "ltpcli", "ltpclo", "udpcli", "udpclo", "bpclock",
            "bptransit", "bpclm", "ipnfw", "ipnadminep", "dtn2fw", "dtn2adminep", "bpsendfile", "bprecvfile",
            "bpstats", "bplist", "bpdriver", "bpcounter")
LIBRARIES = ("libici.so", "libltp.so", "libbp.so", "libcgr.so", "libudplsa.so", "libudpcla.so")

#: Inside the node, in its work folder: why the start failed (start.sh's one line), or not started yet, or what
#: bpadmin lists (endpoints, then plans).
READY = ('cd "$0" || exit 4; grep -m 1 "^ION start:" dtnd.log && exit 3; grep -q "^ION started" dtnd.log || '
         '{ echo starting; exit 4; }; printf "l endpoint\\nl plan\\nq\\n" | bpadmin')
#: Counters: a statistics snapshot into ion.log, its lines, the bundles held, the plans, and the bundles bprecvfile
#: took (ION 4.1's bpstats reports no deliveries: "Delivered. Nothing for now; need to poll endpoints.").
COUNTERS = ('cd "$0" || exit 4; bpstats >/dev/null 2>&1; grep "\\[x\\] " ion.log | tail -n 7; echo ---; '
            'bplist count 2>&1; echo ---; printf "l plan\\nq\\n" | bpadmin; echo ---; '
            'grep -c "bprecvfile has created" ion.log; true')
#: Send stdin as one bundle with bpsendfile from dtn://<node>/src (`$3` dtn) or ipn:<N>.2 (`$3` ipn, N from the
#: node's ionrc): the payload is kept in spool/ until ION has sent it (ION reads the file when the bundle leaves),
#: then removed by later sends once older than its lifetime.
SEND = ('cd "$0" && mkdir -p spool && f=$(mktemp "$PWD/spool/b.XXXXXX") && cat > "$f" && '
        'find spool -type f -mmin +"$(( $2 / 60 + 2 ))" ! -newer "$f" -delete; '
        'if [ "$3" = ipn ]; then src="ipn:$(sed -n "s/^1 \\([0-9]*\\) .*/\\1/p" node.ionrc).2"; '
        'else src="dtn://$(hostname)/src"; fi; bpsendfile "$src" "$1" "$f" 0.1 "$2" >/dev/null 2>&1; '
        'tail -n 20 ion.log | grep -q "bpsendfile sent .$f" || { tail -n 3 ion.log >&2; exit 1; }; '
        'echo "$src $(stat -c %Y "$f") $(basename "$f")"')
#: Load ionadmin lines from stdin (kept as contacts.ionrc) and print what ION complained of: ionadmin's own answers
#: to a line (stdout, e.g. "'To' node number must be greater than zero.") and ion.log's `[?]`/`[!]` lines since;
#: ionadmin exits 0 whatever a line did.
LOAD_CONTACTS = ('cd "$0" && cat > contacts.ionrc && s=$(($(wc -c < ion.log) + 1)) && '
                 'ionadmin contacts.ionrc > contacts.out 2>&1; grep -i -e "syntax error" -e "unknown" -e "invalid" '
                 '-e "can.t" -e "failed" -e "usage" -e "must be" contacts.out; '
                 'tail -c +"$s" ion.log | grep -e "\\[?\\]" -e "\\[!\\]"; true')
#: ION's work folder in a node (the image sets ION_NODE_WDNAME to it; the runtime's IN_NODE_DIR).
NODE_DIR = "/var/lib/swarm-dtn"
STAT_RE = re.compile(r"\[x\] (\w+) from .*\(\+\) (\d+) (\d+)")


class Ion(Agent):
    name = "ion"
    title = "ION (the user's build)"
    clas = ("ltp", "udp")
    daemon = "ion"
    install = Install(script="", programs=PROGRAMS, cache="", cache_env="SWARM_ION_INSTALL",
                      dockerfile="images/ion/Dockerfile", image_repo="swarm-emu/ion", first_build="",
                      user_tree=True, libraries=LIBRARIES)
    ltp_by_ltpcla = False  # ION's own LTP engine
    needs_containers = "each ION node needs its own UTS name (its dtn admin endpoint) and IPC namespace"

    def plan(self, node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             isl_subnet: str, rtt: float, link_of: Callable[[str, str], LinkView]) -> AgentPlan:
        number = piece.number_of(index)  # the ipn node number every agent uses (dtn.number, ltp.engine, index)
        if number != piece.ltp.engine_of(index):
            raise ValueError(f"dtn.number {number}: ION's plan here gives a node one number for its ipn node and its "
                             f"LTP engine, and dtn.ltp.engine is {piece.ltp.engine_of(index)}: set both alike")
        return plan_ion(node, number, isl_ip, piece, peers, workdir, link_of, self.config_text(piece),
                        piece.config or "")

    def guard(self, piece: DtnSpec, isl_subnet: str) -> str:
        return guard_rules(piece, isl_subnet)  # the CLA's port answers the ISL only; ION has no web port

    def ready(self, shell: NodeShell, plan: AgentPlan) -> Optional[str]:
        why, out = script_ready(shell, ["sh", "-c", READY, plan.workdir])
        return why or readiness(plan, out)

    def counters(self, shell: NodeShell, node: str, piece: DtnSpec) -> Counters:
        out = script_output(shell, ["sh", "-c", COUNTERS, NODE_DIR])
        stats, held, plans, taken = (out.split("---\n") + ["", "", ""])[:4]
        counts = parse_stats(stats)
        delivered = int(taken.strip()) if taken.strip().isdigit() else 0
        return Counters(endpoint(node), plan_peers(plans), parse_count(held), delivered,
                        counts.get("xmt", 0), counts.get("rcv", 0), counts.get("exp", 0), [piece.cla])

    def store(self, shell: NodeShell, piece: DtnSpec, timeout: float) -> list[str]:
        res = shell(["sh", "-c", 'cd "$0" && bplist count', NODE_DIR], None, timeout + 10, False)
        if not res.ok:
            raise OSError((res.stderr or res.stdout).strip()[-200:])
        return [f"bundle {i + 1} {{Stored}}" for i in range(parse_count(res.stdout))]

    def send(self, shell: NodeShell, programs: dict[str, str], piece: DtnSpec, dst_eid: str, payload: bytes,
             lifetime: float) -> str:
        res = shell(["sh", "-c", SEND, NODE_DIR, dst_eid, str(max(1, int(lifetime))), piece.eid],
                    payload.decode("utf-8", "replace"), 60, False)
        if not res.ok:
            raise OSError(f"bpsendfile did not send: {(res.stderr or res.stdout).strip()[-200:]}")
        return describe_sent(res.stdout, dst_eid, len(payload))

    def log_events(self, log: str) -> list[dict]:
        return []  # ION logs no per-bundle events by default (its ion.log has counters; bptrace is not run)

    def handovers(self, log: str, cla: str) -> int:
        return 0  # no external CLA modules

    def host_notes(self, piece: DtnSpec, fastest_bps: int, udp_rcvbuf: int) -> list[str]:
        return host_notes(piece, fastest_bps, udp_rcvbuf)

    def load_contacts(self, shell: NodeShell, plan: AgentPlan, load: ContactLoad) -> Optional[list[str]]:
        """ION routes and paces LTP by its contacts: the run's plan replaces the ones its start gave it
        (plan.contact_plan_rc); what ION complains of while loading it is an OSError."""
        text, refused = contact_plan_rc(plan.files.get("node.ionrc", ""), load)
        res = shell(["sh", "-c", LOAD_CONTACTS, plan.workdir], text, 60, False)
        said = (res.stdout or res.stderr).strip()
        if not res.ok or res.stdout.strip():
            why = said.splitlines()[0][:200] if said else f"exit {res.returncode}"
            raise OSError(f"ION on {plan.node} did not take the run's contact plan: {why}")
        return refused

    def client(self, piece: DtnSpec) -> dict[str, Any]:
        return {"client": "ion-tools", "eid": piece.eid}


def readiness(plan: AgentPlan, listing: str) -> Optional[str]:
    """None when bpadmin lists the node's application endpoint and a plan for every expected peer."""
    app = endpoint(plan.node, APP_SERVICE)
    if app not in listing.split():
        return f"endpoint {app} not listed yet"
    missing = [p for p in plan.expected_peers if p not in plan_peers(listing)]
    if missing:
        return f"plans missing: {', '.join(missing[:5])}"
    return None


def plan_peers(listing: str) -> list[str]:
    """Node names of bpadmin's `l plan` answer's dtn plans (`dtn://<name>\\tpid: ...`)."""
    names = set()
    for line in listing.splitlines():
        m = re.match(r"^(?::\s*)?dtn://([^/\s*]+)/?\s+pid:", line)
        if m:
            names.add(m.group(1))
    return sorted(names)


def parse_stats(text: str) -> dict[str, int]:
    """bpstats' last snapshot (ion.log lines `[x] dlv from ... (+) <bundles> <bytes>`): kind -> bundles."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = STAT_RE.search(line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def describe_sent(out: str, dst_eid: str, size: int) -> str:
    """What stands for a bundle ID: bpsendfile names none, so the source EID, the second and the spool file."""
    words = out.strip().split()
    return f"{words[0]} -> {dst_eid} at {words[1]} ({size} bytes, spool/{words[2]})" if len(words) == 3 else dst_eid


def parse_count(text: str) -> int:
    """bplist count's `Report count is N.`; 0 when absent."""
    m = re.search(r"Report count is (\d+)", text)
    return int(m.group(1)) if m else 0


__all__ = ["Ion", "SOURCE_SERVICE"]
