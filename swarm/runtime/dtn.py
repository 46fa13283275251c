"""DTN agents of a running swarm: the dtn7-rs binaries and image, starting, readiness, status, stopping.

- Binaries: images/dtn/build.sh (`cargo install --locked dtn7` into ~/.cache/swarm-emu/dtn7/<version>-<rustc>,
  once; `make setup` runs it ahead). The netns backend runs them from there; the compose backend runs the
  image `swarm-emu/dtn:<hash>` (images/dtn/Dockerfile: the node image plus the binaries).
- Each DTN node's agent runs `dtnd` (swarm.dtn.plan) under a small shell wrapper that records its pid and
  appends its output to <work folder>/dtnd.log: on netns the work folder is
  <workdir>/.swarm/<swarm>/dtn/<node> (removed with the swarm's state), in a container /var/lib/swarm-dtn.
  The agent is a process of the node: it goes with the namespace or container on `down`; `stop()` ends it
  earlier (by its recorded pid, nothing else).
- TCP quick ACKs: dtn7-rs's TCP convergence layers write without TCP_NODELAY and wait for each transfer's
  acknowledgement, so Linux's delayed ACK (40 ms) caps a session at ~23 bundles/s. With `dtn.quickack`
  (default) the node's ISL subnet route gets `quickack 1` (a route attribute, inside the node only); from a
  1 s round trip also larger initial windows (swarm.dtn.plan.route_attributes).
- `cla: ltp`: beside dtnd runs swarm-ltpcla (flightsw/ltpcla, built by `make ltpcla` into
  ~/.cache/swarm-emu/ltpcla-target, or here on first use; on compose copied into the DTN image with dtnd), under
  the same kind of wrapper (ltpcla.pid, ltpcla.log); its record (ltp.csv), counters (ltp-status.json) and the
  contact plan's down windows (ltp-down.txt, re-read when it changes) are in the node's work folder.
- Readiness: every agent answers its status API (GET /status/nodeid, from inside the node on loopback) with its
  own node ID and lists every expected peer (/status/peers).
- Who may inject bundles (issue 29, defect 13): the convergence layer listens on the node's ISL address only
  (dtn7's `bind=`), and an nft table in the node's namespace (swarm.dtn.plan.guard_rules) keeps dtnd's HTTP
  port, which dtnd 0.21.0 binds to every address, to loopback (and the ISL subnet for `cla: http`): a host
  user cannot reach any agent port over the ground network; status and bundles go through the node (exec).
"""
from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from flightsw import protocol as proto
from netem.spec.links import LinksSpec, resolve_links
from swarm.dtn.plan import (LTP_DOWN, LTP_LOG, LTP_STATUS, AgentPlan, guard_rules, ltp_down_windows, ltp_summary,
                            peer_clas, peer_names, plan_agents, readiness, spec_link_view)
from swarm.spec.dtn import DtnSpec
from swarm.errors import RuntimeFailure, SpecError
from swarm.runtime.backends import swarm_dir
from swarm.runtime.dtn_image import ensure_binaries, ltpcla_binary
from swarm.spec.model import NodePlan

if TYPE_CHECKING:
    from swarm.runtime.context import SwarmContext

IN_NODE_DIR = "/var/lib/swarm-dtn"
PID_FILE = "dtnd.pid"
LOG_FILE = "dtnd.log"
TRAFFIC_PROGRAM = f"flightsw/{proto.DTN_TRAFFIC}"
HTTP_TIMEOUT = 3.0
#: The wrapper: record the shell's pid (exec keeps it for dtnd), then become dtnd with output appended to the
#: log. Paths and argv are positional arguments, nothing is interpolated into the script.
WRAPPER = 'mkdir -p "$0" && cd "$0" && echo $$ > "$0/dtnd.pid" && exec "$@" >> "$0/dtnd.log" 2>&1'
LTP_WRAPPER = 'mkdir -p "$0" && cd "$0" && echo $$ > "$0/ltpcla.pid" && exec "$@" >> "$0/ltpcla.log" 2>&1'
#: Run inside a node by DtnAgents.http_many: GET each path from dtnd on loopback, print the bodies as one JSON list.
FETCH = ("import json, sys, urllib.request\n"
         "port, timeout, paths = sys.argv[1], float(sys.argv[2]), sys.argv[3:]\n"
         "out = []\n"
         "for p in paths:\n"
         "    with urllib.request.urlopen(f'http://127.0.0.1:{port}{p}', timeout=timeout) as r:\n"
         "        out.append(r.read().decode('utf-8', 'replace'))\n"
         "print(json.dumps(out))\n")


def dtn_nodes(nodes: list[NodePlan]) -> list[NodePlan]:
    return [n for n in nodes if n.spec.dtn is not None]


# ------------------------------------------------------------------------------------- binaries, image
@dataclass
class AgentStatus:
    """One row of `swarm dtn NAME`."""

    node: str
    eid: str
    cla: str
    routing: str
    peers: list[str]
    stored: int
    delivered: int
    forwarded: int
    received: int
    failed: int
    state: str  # "ok" or why not
    clas: list[str] = field(default_factory=list)  # the convergence layers dtnd reaches its peers by
    ltp: Optional[dict] = None  # cla: ltp: swarm-ltpcla's counters (swarm.dtn.plan.ltp_summary)

    def to_json(self) -> dict:
        return self.__dict__.copy()


class DtnAgents:
    """The agents of one swarm (every node with a `dtn:` piece)."""

    def __init__(self, swarm: "SwarmContext"):
        self.swarm = swarm  # the context, not the Swarm facade
        self.nodes = dtn_nodes(swarm.nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.netns = not swarm.backend.traits.containers  # the agents run the host's dtnd, in host folders
        self._bindir: Optional[Path] = None
        self._ltpcla: Optional[Path] = None

    @property
    def enabled(self) -> bool:
        return bool(self.nodes)

    def check(self) -> None:
        """Swarm-wide DTN checks (before anything starts); the binaries must be buildable here."""
        if self.enabled and self.netns:
            self._bindir = ensure_binaries(self.swarm.runner, self.swarm.workdir, self.swarm.message)
        if self.ltp:
            self.plans()  # the LTP peers' rates and delays derive (SpecError naming the field otherwise)
            if self.netns:
                self._ltpcla = ltpcla_binary(self.swarm.workdir, self.swarm.runner, self.swarm.message)

    @property
    def ltp(self) -> bool:
        """Any node on `cla: ltp` (swarm-ltpcla runs beside its dtnd)."""
        return any(n.spec.dtn is not None and n.spec.dtn.cla == "ltp" for n in self.nodes)

    def link_view(self):
        """a, b -> LinkView of the directed ISL link a->b as the spec's `links:` set it (delay s, rate bit/s)."""
        return spec_link_view(self.swarm.spec.links, [n.name for n in self.swarm.nodes])

    def workdir(self, node: str) -> str:
        if self.netns:
            return str(swarm_dir(self.swarm.workdir, self.swarm.name) / "dtn" / node)
        return IN_NODE_DIR

    def plans(self) -> list[AgentPlan]:
        nodes = [(n.name, n.isl_ip, n.spec.dtn) for n in self.swarm.nodes]
        try:
            plans = plan_agents(nodes, self.swarm.spec.networks.isl.subnet, self.workdir,
                                link_delays_ms(self.swarm.spec.links, [n.name for n in self.swarm.nodes]),
                                link_of=self.link_view())
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        if self.netns:
            if self._bindir is None:
                self._bindir = ensure_binaries(self.swarm.runner, self.swarm.workdir, self.swarm.message)
            dtnd = str(self._bindir / "dtnd")
            if self.ltp and self._ltpcla is None:
                self._ltpcla = ltpcla_binary(self.swarm.workdir, self.swarm.runner, self.swarm.message)
            plans = [replace(p, argv=[dtnd, *p.argv[1:]],
                             ltp_argv=[str(self._ltpcla), *p.ltp_argv[1:]] if p.ltp_argv else None) for p in plans]
        return plans

    def piece(self, node: str) -> DtnSpec:
        piece = self.by_name[node].spec.dtn
        assert piece is not None
        return piece

    # ---------------------------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 60.0, nodes: Optional[list[str]] = None) -> float:
        """Start every agent (or those of `nodes`, e.g. after a node restart) and wait until they are ready;
        seconds taken. RuntimeFailure naming the first agent that is not ready, with the tail of its log."""
        if not self.enabled:
            return 0.0
        started = time.monotonic()
        plans = [p for p in self.plans() if nodes is None or p.node in nodes]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._start_one, plans))
        self.wait_ready(plans, timeout)
        return time.monotonic() - started

    def _exec(self, node: str, argv: list[str], input: Optional[str] = None, timeout: float = 30, check: bool = True):
        b = self.swarm.backend
        prefix = b.exec_prefix(self.swarm.name, node, interactive=input is not None)
        return self.swarm.runner.run(prefix + argv, input=input, timeout=timeout, check=check)

    def _start_one(self, plan: AgentPlan) -> None:
        node = plan.node
        self._exec(node, ["mkdir", "-p", plan.workdir])
        for name, text in plan.files.items():
            self._exec(node, ["sh", "-c", 'cat > "$0"', f"{plan.workdir}/{name}"], input=text)
        if plan.route_attrs:
            self._route_attrs(node, list(plan.route_attrs))
        self._guard(node)
        self.swarm.backend.start_daemon(self.swarm.name, node, wrapper_argv(plan.workdir, plan.argv), "dtnd")
        if plan.ltp_argv:  # connects to dtnd's WebSocket as soon as it answers (retries until then)
            self._exec(node, ["sh", "-c", ': >> "$0"', f"{plan.workdir}/{LTP_DOWN}"])
            self.swarm.backend.start_daemon(self.swarm.name, node, ["sh", "-c", LTP_WRAPPER, plan.workdir, *plan.ltp_argv],
                                            "ltpcla")

    def _guard(self, node: str) -> None:
        """The node's firewall for its agent's ports (swarm.dtn.plan.guard_rules), set before dtnd starts; a
        node where nft cannot run gets one line saying its agent answers every address."""
        res = self._exec(node, ["nft", "-f", "-"], input=guard_rules(self.piece(node), self.swarm.spec.networks.isl.subnet),
                         check=False)
        if not res.ok:
            self.swarm.message(f"dtn: {node}: nft failed ({(res.stderr or res.stdout).strip()[-160:]}): its agent's "
                               "HTTP port answers every address of the node")

    def _route_attrs(self, node: str, attrs: list[str]) -> None:
        """`attrs` (swarm.dtn.plan.route_attributes: quickack, initial windows) on the node's ISL subnet route
        (see the module text); attributes the route already has are replaced."""
        subnet = self.swarm.spec.networks.isl.subnet
        res = self._exec(node, ["ip", "-4", "route", "show", subnet], check=False)
        line = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else ""
        if not line:
            self.swarm.message(f"dtn: {node}: no route for {subnet}; {' '.join(attrs)} not set")
            return
        words, wanted = line.split(), dict(zip(attrs[0::2], attrs[1::2]))
        kept, have, i = [], {}, 0
        while i < len(words):
            if words[i] in wanted and i + 1 < len(words):
                have[words[i]] = words[i + 1]
                i += 2
            else:
                kept.append(words[i])
                i += 1
        if have != wanted:
            self._exec(node, ["ip", "route", "change", *kept, *attrs])

    def wait_ready(self, plans: Optional[list[AgentPlan]] = None, timeout: float = 60.0) -> None:
        plans = plans if plans is not None else self.plans()
        pending = {p.node: p for p in plans}
        why: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        total = len(pending)
        while pending:
            self.swarm.progress(total - len(pending), total, "DTN agents ready")
            with ThreadPoolExecutor(max_workers=8) as pool:
                answers = dict(zip(pending, pool.map(self._ready_check, pending.values())))
            for node, problem in answers.items():
                if problem is None:
                    del pending[node]
                else:
                    why[node] = problem
            if not pending:
                break
            if time.monotonic() > deadline:
                node = sorted(pending)[0]
                raise RuntimeFailure(f"DTN agent of {node!r} not ready after {timeout:.0f} s ({why.get(node)}); "
                                     f"log tail:\n{self.log(node, tail=15)}")
            time.sleep(0.3)
        self.swarm.progress(total, total, "DTN agents ready")

    def _ready_check(self, plan: AgentPlan) -> Optional[str]:
        try:
            nodeid, peers = self.http_many(plan.node, ["/status/nodeid", "/status/peers"])
        except OSError as exc:
            return f"status API: {exc}"
        problem = readiness(plan, nodeid, peers)
        if problem is None and plan.ltp_argv:
            status = self.ltp_status(plan.node)
            if not status.get("registered"):
                return "swarm-ltpcla not registered with dtnd yet"
        return problem

    def ltp_status(self, node: str) -> dict:
        """swarm-ltpcla's counters on `node` (its ltp-status.json), {} when there are none (yet)."""
        res = self._exec(node, ["cat", f"{self.workdir(node)}/{LTP_STATUS}"], check=False, timeout=30)
        try:
            return json.loads(res.stdout) if res.ok else {}
        except ValueError:
            return {}

    def ltp_cpu_seconds(self, node: str) -> Optional[float]:
        """CPU time (user + system, s) swarm-ltpcla on `node` has used so far (its /proc stat), None without one:
        the LTP program's cost per bit, the figure a segment size changes (seed 004)."""
        script = 'p=$(cat "$0/ltpcla.pid") && awk -v t=$(getconf CLK_TCK) \'{print ($14 + $15) / t}\' /proc/$p/stat'
        res = self._exec(node, ["sh", "-c", script, self.workdir(node)], check=False, timeout=30)
        try:
            return float(res.stdout.strip()) if res.ok else None
        except ValueError:
            return None

    def ltp_record(self, node: str) -> str:
        """swarm-ltpcla's CSV record on `node` (every block, retransmission, cancel, refusal)."""
        res = self._exec(node, ["cat", f"{self.workdir(node)}/{LTP_LOG}"], check=False, timeout=60)
        return res.stdout if res.ok else ""

    def set_ltp_down(self, windows: dict[str, list[tuple[str, float, float]]], t0: float) -> None:
        """Tell each node's swarm-ltpcla when its links are down: `windows` node -> [(peer, from s, until s)]
        relative to `t0` (Unix s; the contact plan's time 0). It re-reads the file within a second."""
        engine_of = {n.name: n.index for n in self.swarm.nodes}
        for n in self.nodes:
            if n.spec.dtn is not None and n.spec.dtn.cla == "ltp":
                text = ltp_down_windows(windows.get(n.name, []), engine_of, t0)
                self._exec(n.name, ["sh", "-c", 'cat > "$0.tmp" && mv "$0.tmp" "$0"', f"{self.workdir(n.name)}/{LTP_DOWN}"],
                           input=text)

    def http(self, node: str, path: str, timeout: float = HTTP_TIMEOUT) -> str:
        """GET `path` of the agent's status API, from inside the node (its HTTP port answers loopback only)."""
        return self.http_many(node, [path], timeout)[0]

    def http_many(self, node: str, paths: list[str], timeout: float = HTTP_TIMEOUT) -> list[str]:
        """GET each of `paths` from the agent on the node's loopback, in one program run inside the node (the
        node's Python: the host's on netns, the image's in a container); OSError naming why on any failure."""
        res = self._exec(node, ["python3", "-c", FETCH, str(self.piece(node).web_port), f"{timeout:g}", *paths],
                         timeout=timeout * len(paths) + 30, check=False)
        try:
            bodies = json.loads(res.stdout) if res.ok else None
        except ValueError:
            bodies = None
        if not isinstance(bodies, list) or len(bodies) != len(paths):
            last = (res.stderr or res.stdout).strip().splitlines()[-1:]
            raise OSError(last[0][-200:] if last else f"exit {res.returncode}")
        return bodies

    def stop(self, timeout: float = 10.0) -> list[str]:
        """End every agent by its recorded pid (and only that process); the nodes stay up. Returns the nodes
        whose agent was stopped."""
        script = ('for f in ltpcla dtnd; do p=$(cat "$0/$f.pid" 2>/dev/null) || continue; kill "$p" 2>/dev/null || continue; '
                  'i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; '
                  'kill -9 "$p" 2>/dev/null; rm -f "$0/$f.pid"; [ $f = dtnd ] && echo stopped; done; true')
        stopped = []

        def one(node: str) -> None:
            res = self._exec(node, ["sh", "-c", script, self.workdir(node)], timeout=timeout + 10, check=False)
            if "stopped" in res.stdout:
                stopped.append(node)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, [n.name for n in self.nodes]))
        return sorted(stopped)

    def reset(self) -> None:
        """Stop every agent and empty its work folder (store, log), for a fresh start."""
        self.stop()
        for n in self.nodes:
            self._exec(n.name, ["sh", "-c", 'rm -rf "$0" && mkdir -p "$0"', self.workdir(n.name)], check=False)

    # --------------------------------------------------------------------------- in-node programs
    def tool(self, name: str) -> str:
        """Path of a dtn7-rs program (dtnsend, dtnrecv, ...) as the nodes see it."""
        if self.netns:
            if self._bindir is None:
                self._bindir = ensure_binaries(self.swarm.runner, self.swarm.workdir, self.swarm.message)
            return str(self._bindir / name)
        return name

    def traffic_argv(self, node: str, *args: str) -> list[str]:
        """argv that runs flightsw/dtn_traffic.py inside `node` with stdin open."""
        b = self.swarm.backend
        if self.netns:
            program = [sys.executable or "python3", str(Path(self.swarm.workdir) / TRAFFIC_PROGRAM)]
        else:
            program = ["python3", f"/opt/swarm/{TRAFFIC_PROGRAM}"]
        return b.exec_prefix(self.swarm.name, node, interactive=True) + proto.labelled(
            program + list(args), proto.label(self.swarm.name, node))  # ps names the swarm (issue 29 #12)

    def send(self, src: str, dst: str, payload: bytes, lifetime: float = 3600.0, service: str = "in") -> str:
        """Send one bundle from `src`'s agent to dtn://<dst>/<service> with dtnsend; returns its bundle ID."""
        for node in (src, dst):
            if node not in self.by_name:
                raise SpecError(f"node {node!r}: no DTN agent in swarm {self.swarm.name!r} "
                                f"(DTN nodes: {', '.join(self.by_name) or 'none'})")
        argv = [self.tool("dtnsend"), "-p", str(self.piece(src).web_port), "-r", f"dtn://{dst}/{service}",
                "-l", str(max(1, int(lifetime)))]
        b = self.swarm.backend
        res = self.swarm.runner.run(b.exec_prefix(self.swarm.name, src, interactive=True) + argv,
                                    input=payload.decode("utf-8", "replace"), timeout=30)
        for line in res.stdout.splitlines():
            if line.startswith("Bundle-Id:"):
                return line.split(":", 1)[1].strip()
        raise RuntimeFailure(f"dtnsend on {src!r} printed no bundle ID: {res.stdout.strip()[:200]}")

    def recv(self, node: str, timeout: float = 10.0, service: str = "in") -> dict:
        """Take the next bundle delivered to dtn://<node>/<service> (waiting up to `timeout` s)."""
        if node not in self.by_name:
            raise SpecError(f"node {node!r}: no DTN agent in swarm {self.swarm.name!r}")
        argv = self.traffic_argv(node, proto.DTN_RECV_ONCE, "--port", str(self.piece(node).web_port), "--service", service,
                                 "--timeout", f"{timeout:g}")
        res = self.swarm.runner.run(argv, timeout=timeout + 30, check=False)
        try:
            return json.loads(res.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise RuntimeFailure(f"receiving on {node!r} failed: {(res.stderr or res.stdout).strip()[-300:]}") from None

    # ------------------------------------------------------------------------------------- looking
    def log(self, node: str, tail: int = 0) -> str:
        res = self._exec(node, ["cat", f"{self.workdir(node)}/{LOG_FILE}"], check=False, timeout=60)
        text = res.stdout if res.ok else ""
        return "\n".join(text.splitlines()[-tail:]) if tail else text

    def status(self) -> list[AgentStatus]:
        def one(node: NodePlan) -> AgentStatus:
            piece = self.piece(node.name)
            try:
                eid, peers_json, store_text, info_text = self.http_many(
                    node.name, ["/status/nodeid", "/status/peers", "/status/store", "/status/info"])
                eid, peers = eid.strip(), peer_names(peers_json)
                store, info = json.loads(store_text), json.loads(info_text)
            except (OSError, ValueError) as exc:
                return AgentStatus(node.name, "", piece.cla, piece.routing, [], 0, 0, 0, 0, 0, f"no answer ({exc})")
            stored = sum(1 for e in store if "Deleted" not in e)
            ltp = ltp_summary(self.ltp_status(node.name)) if piece.cla == "ltp" else None
            state = "ok" if ltp is None or ltp["registered"] else "swarm-ltpcla not registered"
            return AgentStatus(node.name, eid, piece.cla, piece.routing, peers, stored, info.get("delivered", 0),
                               info.get("outgoing", 0), info.get("incoming", 0), info.get("failed", 0), state,
                               peer_clas(peers_json), ltp)

        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(one, self.nodes))


def link_delays_ms(links: Optional[LinksSpec], nodes: list[str]) -> dict[tuple[str, str], float]:
    """One-way delay plus jitter (ms) of each directed link of the swarm's `links:` (profiles resolved), for
    sizing dtnd's CLA timeouts (swarm.dtn.plan.cla_timeouts)."""
    out = {}
    for pair, imp in resolve_links(links, nodes).items():
        ms = (imp.delay or 0.0) + (imp.jitter or 0.0)
        if ms > 0:
            out[pair] = ms
    return out


def wrapper_argv(workdir: str, argv: list[str]) -> list[str]:
    """The command that starts an agent (pure): the wrapper shell, the work folder, dtnd's argv."""
    return ["sh", "-c", WRAPPER, workdir, *argv]
