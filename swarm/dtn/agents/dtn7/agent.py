"""dtn7-rs (the Cargo registry's crate `dtn7`, patched at build time) as a DTN agent of the framework.

- Installed by images/dtn/build.sh (`cargo install --locked dtn7` + images/dtn/dtn7-0.21.0.patch into
  ~/.cache/swarm-emu/dtn7/<version>-<key>); on containers layered onto the node image by images/dtn/Dockerfile.
- Planned by swarm.dtn.agents.dtn7.plan (dtnd's argv, routes file, guard rules); `cla: ltp` runs swarm-ltpcla
  beside dtnd on its external-CLA WebSocket (swarm.dtn.agents.ltp).
- Asked through its HTTP API on the node's loopback (the port answers nothing else, see guard_rules): one small
  Python program inside the node fetches several paths per exec (FETCH).
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable, Optional

from swarm.dtn.agents.base import Agent, AgentPlan, Counters, Install, LinkView, NodeShell, Peer
from swarm.dtn.agents.dtn7.log import failure_lines, handovers, parse_dtnd_log
from swarm.dtn.agents.dtn7.plan import guard_rules, peer_clas, peer_names, plan_agent, readiness
from swarm.dtn.agents.ltp import plan_ltp
from swarm.dtn.agents.tcpcl import fastest_rate
from swarm.spec.dtn import DtnSpec

HTTP_TIMEOUT = 3.0
#: Run inside a node: GET each path from dtnd on loopback, print the bodies as one JSON list.
FETCH = ("import json, sys, urllib.request\n"
         "port, timeout, paths = sys.argv[1], float(sys.argv[2]), sys.argv[3:]\n"
         "out = []\n"
         "for p in paths:\n"
         "    with urllib.request.urlopen(f'http://127.0.0.1:{port}{p}', timeout=timeout) as r:\n"
         "        out.append(r.read().decode('utf-8', 'replace'))\n"
         "print(json.dumps(out))\n")


def status_api_ready(shell: NodeShell, plan: AgentPlan,
                     judge: Callable[[AgentPlan, str, str], Optional[str]]) -> Optional[str]:
    """Readiness read from an HTTP status API (dtn7's, and swarm-hardy's that mirrors it): `judge(plan, nodeid,
    peers_json)`, or why the API did not answer."""
    try:
        nodeid, peers = http_many(shell, plan.web_port, ["/status/nodeid", "/status/peers"])
    except OSError as exc:
        return f"status API: {exc}"
    return judge(plan, nodeid, peers)


def http_many(shell: NodeShell, port: int, paths: list[str], timeout: float = HTTP_TIMEOUT) -> list[str]:
    """GET each of `paths` from dtnd on the node's loopback in one program run inside the node (the node's
    Python: the host's on netns, the image's in a container); OSError naming why on any failure."""
    res = shell(["python3", "-c", FETCH, str(port), f"{timeout:g}", *paths], None, timeout * len(paths) + 30, False)
    try:
        bodies = json.loads(res.stdout) if res.ok else None
    except ValueError:
        bodies = None
    if not isinstance(bodies, list) or len(bodies) != len(paths):
        last = (res.stderr or res.stdout).strip().splitlines()[-1:]
        raise OSError(last[0][-200:] if last else f"exit {res.returncode}")
    return bodies


class Dtn7(Agent):
    name = "dtn7"
    title = "dtn7-rs"
    clas = ("tcp", "mtcp", "udp", "http", "ltp")  # built in; ltp through swarm-ltpcla on its external-CLA WebSocket
    daemon = "dtnd"
    install = Install(script="images/dtn/build.sh", programs=("dtnd", "dtnsend", "dtnrecv", "dtnquery", "dtntrigger"),
                      cache="dtn7", cache_env="SWARM_DTN7_CACHE", dockerfile="images/dtn/Dockerfile",
                      image_repo="swarm-emu/dtn", first_build="cargo install --locked dtn7: 10-25 min on 2 cores, once")

    def plan(self, node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             isl_subnet: str, rtt: float, link_of: Callable[[str, str], LinkView]) -> AgentPlan:
        if piece.cla == "ltp" and piece.peers != "static":
            raise ValueError(f"node {node!r}: dtn.peers {piece.peers!r}: cla ltp needs static peers (its one-way "
                             "light time and rate come from the links toward them)")
        rate = fastest_rate([link_of(node, p.name).rate for p in peers])
        plan = replace(plan_agent(node, piece, peers, workdir, isl_subnet, rtt, isl_ip=isl_ip, rate=rate,
                                  node_id=piece.node_id(node, index)),
                       agent=self.name)
        if piece.cla == "ltp":
            ws = f"ws://127.0.0.1:{piece.web_port}/ws/ecla"
            plan = replace(plan, ltp_argv=plan_ltp(node, piece.ltp.engine_of(index), isl_ip, piece, peers, workdir, ws,
                                                   link_of))
        return plan

    def guard(self, piece: DtnSpec, isl_subnet: str) -> str:
        return guard_rules(piece, isl_subnet)

    def ready(self, shell: NodeShell, plan: AgentPlan) -> Optional[str]:
        return status_api_ready(shell, plan, readiness)

    def counters(self, shell: NodeShell, node: str, piece: DtnSpec) -> Counters:
        eid, peers_json, store_text, info_text = http_many(
            shell, piece.web_port, ["/status/nodeid", "/status/peers", "/status/store", "/status/info"])
        store, info = json.loads(store_text), json.loads(info_text)
        stored = sum(1 for e in store if "Deleted" not in e)
        return Counters(eid.strip(), peer_names(peers_json), stored, info.get("delivered", 0), info.get("outgoing", 0),
                        info.get("incoming", 0), info.get("failed", 0), peer_clas(peers_json))

    def store(self, shell: NodeShell, piece: DtnSpec, timeout: float) -> list[str]:
        return json.loads(http_many(shell, piece.web_port, ["/status/store"], timeout)[0])

    def send(self, shell: NodeShell, programs: dict[str, str], piece: DtnSpec, dst_eid: str, payload: bytes,
             lifetime: float) -> str:
        argv = [programs["dtnsend"], "-p", str(piece.web_port), "-r", dst_eid, "-l", str(max(1, int(lifetime)))]
        res = shell(argv, payload.decode("utf-8", "replace"), 30, True)
        for line in res.stdout.splitlines():
            if line.startswith("Bundle-Id:"):
                return line.split(":", 1)[1].strip()
        raise OSError(f"dtnsend printed no bundle ID: {res.stdout.strip()[:200]}")

    def log_events(self, log: str) -> list[dict]:
        return parse_dtnd_log(log)

    def handovers(self, log: str, cla: str) -> int:
        return handovers(log, cla)

    def failure_lines(self, log: str) -> list[tuple[Optional[float], str]]:
        return list(failure_lines(log))

    def client(self, piece: DtnSpec) -> dict[str, Any]:
        return {"client": "dtn7-http", "port": piece.web_port}
