"""µD3TN (D3TN's ud3tn, the user's own build) as a DTN agent of the framework.

- Installed by the user, like ION: `dtn.install` (or $SWARM_UD3TN_INSTALL) is a prefix holding `bin/ud3tn` (µD3TN's
  `make posix` builds build/posix/ud3tn) and, under lib/python3.*/site-packages, µD3TN's Python packages pyd3tn and
  ud3tn-utils (`pip install --prefix`): the framework talks to µD3TN over AAP through them. Checked before anything
  starts; images/ud3tn/Dockerfile layers the tree on the node image (ldd of bin/ against the image's libraries, the
  packages imported by the image's python3). Container backends only (the helper runs in the image's Python).
- Planned by swarm.dtn.agents.ud3tn.plan: the ud3tn command (node ID, the CLA on the ISL address, AAP sockets) and
  one µD3TN contact per peer, sent over AAP to its config agent by flightsw/ud3tn_aap.py, which then holds the
  applications' endpoint (µD3TN drops bundles for an endpoint nobody holds) and files what arrives in inbox/.
- CLAs: `mtcp` only (µD3TN 0.13 has tcpclv3, mtcp, smtcp, tcpspp; no TCPCLv4, so `tcp` is refused with one line).
- Asked in the node: readiness = the helper said "µD3TN started" and the AAP socket answers with the node ID
  (`ud3tn_aap.py ping`); counters from the helper's files (delivered, sent) and µD3TN's log (contacts started,
  bundles deleted); µD3TN 0.13 tells no forwarded/received counts and lists no store over AAP.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

from swarm.dtn.agents.base import (Agent, AgentPlan, Counters, Install, LinkView, NodeShell, Peer, script_output,
                                   script_ready)
from swarm.dtn.agents.dtn7.plan import guard_rules
from swarm.dtn.agents.ud3tn.plan import AAP_SOCKET, CLA_NAMES, HELPER, PROGRAM, plan_ud3tn
from swarm.spec.dtn import DtnSpec, endpoint, node_key

PROGRAMS = (PROGRAM,)
#: What the image and the helper need of the tree besides bin/: µD3TN's Python packages.
PATHS = ("lib/python3*/site-packages/ud3tn_utils/aap", "lib/python3*/site-packages/pyd3tn")
NODE_DIR = "/var/lib/swarm-dtn"
#: Inside the node, in its work folder: why the start failed, or not started yet, or the node ID AAP answers with.
READY = ('cd "$0" || exit 4; grep -m 1 "^µD3TN start:" dtnd.log && exit 3; grep -q "^µD3TN started" dtnd.log || '
         '{ echo starting; exit 4; }; python3 "$1" ping --socket "$PWD/$2"')
#: Counters: the helper's files, the contacts configured, then µD3TN's log lines that count.
COUNTERS = ('cd "$0" || exit 4; cat node-id; echo ---; cat delivered 2>/dev/null || echo 0; echo ---; '
            'cat sent 2>/dev/null || echo 0; echo ---; '
            'grep -e "Scheduled contact with" -e "Deleting bundle" -e "not destined for any registered" dtnd.log; true')
SEND = 'cd "$0" && python3 "$1" send --socket "$PWD/$2" "$3"'
CONTACT_RE = re.compile(r'Scheduled contact with "([^"]+)" started')


class Ud3tn(Agent):
    name = "ud3tn"
    title = "µD3TN (the user's build)"
    clas = tuple(CLA_NAMES)
    daemon = "ud3tn"
    install = Install(script="", programs=PROGRAMS, cache="", cache_env="SWARM_UD3TN_INSTALL",
                      dockerfile="images/ud3tn/Dockerfile", image_repo="swarm-emu/ud3tn", first_build="",
                      user_tree=True, paths=PATHS)
    needs_containers = "its AAP helper runs in the image built from your install tree (µD3TN's Python packages)"

    def plan(self, node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             isl_subnet: str, rtt: float, link_of: Callable[[str, str], LinkView]) -> AgentPlan:
        return plan_ud3tn(node, piece.node_id(node, index), isl_ip, piece, peers, workdir, link_of,
                          self.config_text(piece), piece.config or "")

    def guard(self, piece: DtnSpec, isl_subnet: str) -> str:
        return guard_rules(piece, isl_subnet)  # the CLA's port answers the ISL only; AAP is a UNIX socket

    def ready(self, shell: NodeShell, plan: AgentPlan) -> Optional[str]:
        why, out = script_ready(shell, ["sh", "-c", READY, plan.workdir, HELPER, AAP_SOCKET])
        return why or readiness(plan, out)

    def counters(self, shell: NodeShell, node: str, piece: DtnSpec) -> Counters:
        out = script_output(shell, ["sh", "-c", COUNTERS, NODE_DIR])
        return parse_counters(out, node, piece)

    def store(self, shell: NodeShell, piece: DtnSpec, timeout: float) -> list[str]:
        return []  # µD3TN 0.13 lists no stored bundles over AAP

    def send(self, shell: NodeShell, programs: dict[str, str], piece: DtnSpec, dst_eid: str, payload: bytes,
             lifetime: float) -> str:
        res = shell(["sh", "-c", SEND, NODE_DIR, HELPER, AAP_SOCKET, dst_eid], payload.decode("utf-8", "replace"),
                    60, False)
        if not res.ok:
            raise OSError(f"µD3TN did not take the bundle: {(res.stderr or res.stdout).strip()[-200:]}")
        words = res.stdout.split()
        return f"{words[0]} -> {dst_eid} (µD3TN bundle {words[1]})" if len(words) == 2 else dst_eid

    def log_events(self, log: str) -> list[dict]:
        return []  # a release build of µD3TN logs no per-bundle events (they are debug lines)

    def failure_lines(self, log: str) -> list[tuple[Optional[float], str]]:
        return [(None, line.strip()) for line in log.splitlines()
                if "[WARNING]" in line or "[ERROR]" in line or line.startswith("µD3TN start:")]

    def handovers(self, log: str, cla: str) -> int:
        return 0  # no external CLA modules

    def client(self, piece: DtnSpec) -> dict[str, Any]:
        return {"client": "ud3tn-aap", "workdir": NODE_DIR}


def readiness(plan: AgentPlan, answer: str) -> Optional[str]:
    """None when µD3TN's AAP answered with the plan's node ID."""
    said = answer.strip().splitlines()
    if not said or said[-1] != plan.node_id:
        return f"AAP answers {said[-1] if said else 'nothing'!r}, not {plan.node_id!r}"
    return None


def parse_counters(text: str, node: str, piece: DtnSpec) -> Counters:
    """COUNTERS' answer (pure): the node ID, delivered (the endpoint keeper's count), the peers whose contact
    started (µD3TN's log), and failed = bundles µD3TN deleted or dropped (no one held their endpoint). µD3TN 0.13
    counts nothing itself: forwarded, received and stored are 0 (see the module text)."""
    node_id, delivered, _sent, log = (text.split("---\n") + ["", "", ""])[:4]
    started = sorted({node_key(m.group(1)) for m in CONTACT_RE.finditer(log)})
    failed = sum(1 for ln in log.splitlines() if "Deleting bundle" in ln or "not destined for any registered" in ln)
    return Counters(node_id.strip() or endpoint(node), started, 0, _int(delivered), 0, 0, failed, [piece.cla])


def _int(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0
