"""Hardy as a DTN agent of the framework: swarm-hardy (flightsw/hardy-node), our node program on Hardy's crates.

- Installed by images/hardy/build.sh (`cargo build --locked` of flightsw/hardy-node into
  ~/.cache/swarm-emu/hardy-target; `make hardy` runs it ahead); on containers layered onto the node image by
  images/hardy/Dockerfile.
- Planned by swarm.dtn.agents.hardy.plan (argv, readiness, log); TCPCLv4 only.
- Asked through its HTTP API on the node's loopback, the same subset of dtn7's API the traffic program speaks
  (/send, /endpoint, /status/...), with the same in-node fetcher as dtn7's adapter.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Optional

from swarm.dtn.agents.base import Agent, AgentPlan, Counters, Install, LinkView, NodeShell, Peer
from swarm.dtn.agents.dtn7.agent import http_many, status_api_ready
from swarm.dtn.agents.dtn7.plan import guard_rules
from swarm.dtn.agents.hardy.plan import failure_lines, parse_log, peer_names, plan_hardy, readiness
from swarm.dtn.agents.tcpcl import fastest_rate
from swarm.spec.dtn import DtnSpec

#: Run inside a node: POST stdin's bytes to swarm-hardy's /send on loopback, print its answer (the bundle ID).
POST = ("import sys, urllib.parse, urllib.request\n"
        "port, dst, life = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "url = f'http://127.0.0.1:{port}/send?dst={urllib.parse.quote(dst, safe=\":/\")}&lifetime={life}s'\n"
        "with urllib.request.urlopen(urllib.request.Request(url, data=sys.stdin.buffer.read()), timeout=10) as r:\n"
        "    print(r.read().decode())\n")


class Hardy(Agent):
    name = "hardy"
    title = "Hardy (hardy-bpa 0.2.0, hardy-tcpclv4 0.4.0)"
    clas = ("tcp",)
    daemon = "swarm-hardy"
    install = Install(script="images/hardy/build.sh", programs=("swarm-hardy",), cache="hardy-target",
                      cache_env="SWARM_HARDY_CACHE", dockerfile="images/hardy/Dockerfile",
                      image_repo="swarm-emu/hardy", first_build="cargo build --locked of 141 crates: ~6 min on 2 cores, once")

    def plan(self, node: str, index: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             isl_subnet: str, rtt: float, link_of: Callable[[str, str], LinkView]) -> AgentPlan:
        return plan_hardy(node, isl_ip, piece, peers, workdir, rtt, piece.node_id(node, index),
                          rate=fastest_rate([link_of(node, p.name).rate for p in peers]))

    def guard(self, piece: DtnSpec, isl_subnet: str) -> str:
        return guard_rules(piece, isl_subnet)  # the HTTP port answers loopback, TCPCL the ISL only

    def ready(self, shell: NodeShell, plan: AgentPlan) -> Optional[str]:
        return status_api_ready(shell, plan, readiness)

    def counters(self, shell: NodeShell, node: str, piece: DtnSpec) -> Counters:
        eid, peers, store_text, info_text = http_many(
            shell, piece.web_port, ["/status/nodeid", "/status/peers", "/status/store", "/status/info"])
        info = json.loads(info_text)
        return Counters(eid.strip(), peer_names(peers), len(json.loads(store_text)), info.get("delivered", 0),
                        info.get("forwarded", 0),
                        info.get("received", 0), info.get("failed", 0), ["tcp"])

    def store(self, shell: NodeShell, piece: DtnSpec, timeout: float) -> list[str]:
        return json.loads(http_many(shell, piece.web_port, ["/status/store"], timeout)[0])

    def send(self, shell: NodeShell, programs: dict[str, str], piece: DtnSpec, dst_eid: str, payload: bytes,
             lifetime: float) -> str:
        res = shell(["python3", "-c", POST, str(piece.web_port), dst_eid, str(max(1, int(lifetime)))],
                    payload.decode("utf-8", "replace"), 30, True)
        bid = res.stdout.strip()
        if not bid:
            raise OSError(f"swarm-hardy gave no bundle ID: {res.stderr.strip()[-200:]}")
        return bid

    def log_events(self, log: str) -> list[dict]:
        return parse_log(log)

    def handovers(self, log: str, cla: str) -> int:
        return 0  # no external CLA modules

    def failure_lines(self, log: str) -> list[tuple[Optional[float], str]]:
        return failure_lines(log)

    def client(self, piece: DtnSpec) -> dict[str, Any]:
        return {"client": "hardy-http", "port": piece.web_port}
