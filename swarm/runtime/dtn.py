"""DTN agents of a running swarm: their programs and image, starting, readiness, status, stopping, whatever the
agent: what differs between agents is asked of their adapters (swarm.dtn.agents), given a shell into the node.

- Programs: each agent's Install (e.g. dtn7: images/dtn/build.sh, `cargo install --locked dtn7` into
  ~/.cache/swarm-emu/dtn7/<version>-<key>, once; `make setup` runs it ahead). The netns backend runs them from
  there; the compose backend runs the agent's image (e.g. `swarm-emu/dtn:<hash>`: the node image plus the programs).
- Each DTN node's agent runs its adapter's command (swarm.dtn.plan) under a small shell wrapper that records its
  pid and appends its output to <work folder>/dtnd.log: on netns the work folder is
  <workdir>/.swarm/<swarm>/dtn/<node> (removed with the swarm's state), in a container /var/lib/swarm-dtn.
  The agent is a process of the node: it goes with the namespace or container on `down`; `stop()` ends it
  earlier (by its recorded pid, nothing else).
- TCP route attributes: the adapter's plan may ask for attributes of the node's ISL subnet route (dtn7: with
  `dtn.quickack`, `quickack 1`, and from a 1 s round trip larger initial windows), set inside the node only.
- `cla: ltp`: beside dtnd runs swarm-ltpcla (flightsw/ltpcla, built by `make ltpcla` into
  ~/.cache/swarm-emu/ltpcla-target, or here on first use; on compose copied into the DTN image with dtnd), under
  the same kind of wrapper (ltpcla.pid, ltpcla.log); its record (ltp.csv), counters (ltp-status.json) and the
  contact plan's down windows (ltp-down.txt, re-read when it changes) are in the node's work folder.
- Readiness: the adapter says when an agent is ready (dtn7: its status API answers with its own node ID and
  lists every expected peer); with `cla: ltp`, swarm-ltpcla must also have registered.
- Who may inject bundles: the adapter's nft table (Agent.guard), applied in the node's
  namespace before the agent starts, keeps its ports to loopback and the ISL: a host user cannot reach any agent
  port over the ground network; status and bundles go through the node (exec).
"""
from __future__ import annotations

import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from flightsw import protocol as proto
from netem.spec.links import LinksSpec, resolve_links
from swarm.dtn.agents import Agent, AgentFailed, AgentPlan, agent_of
from swarm.dtn.agents.base import ContactLoad
from swarm.dtn.contacts import ContactPlan
from swarm.dtn.agents.ltp import LTP_DOWN, LTP_LOG, LTP_STATUS, ltp_down_windows, ltp_summary
from swarm.dtn.plan import plan_agents, spec_link_view
from swarm.spec.dtn import DtnSpec, node_key, node_numbers
from swarm.errors import RuntimeFailure, SpecError
from swarm.runtime.backends import swarm_dir
from swarm.runtime.dtn_image import check_install_tree, ensure_binaries, ltpcla_binary
from swarm.spec.model import NodePlan

if TYPE_CHECKING:
    from swarm.runtime.context import SwarmContext

IN_NODE_DIR = "/var/lib/swarm-dtn"
PID_FILE = "dtnd.pid"
LOG_FILE = "dtnd.log"
TRAFFIC_PROGRAM = f"flightsw/{proto.DTN_TRAFFIC}"
#: The wrapper of every agent (its files keep dtnd's names whatever the agent): record the shell's pid (exec keeps
#: it for the agent), then become the agent with output appended to the
#: log. Paths and argv are positional arguments, nothing is interpolated into the script.
WRAPPER = 'mkdir -p "$0" && cd "$0" && echo $$ > "$0/dtnd.pid" && exec "$@" >> "$0/dtnd.log" 2>&1'
LTP_WRAPPER = 'mkdir -p "$0" && cd "$0" && echo $$ > "$0/ltpcla.pid" && exec "$@" >> "$0/ltpcla.log" 2>&1'


def dtn_nodes(nodes: Sequence[NodePlan]) -> list[NodePlan]:
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
    clas: list[str] = field(default_factory=list)  # the convergence layers the agent reaches its peers by
    ltp: Optional[dict] = None  # cla: ltp: swarm-ltpcla's counters (swarm.dtn.agents.ltp.ltp_summary)
    agent_title: str = ""  # the agent, for people (Agent.title)

    def to_json(self) -> dict:
        return self.__dict__.copy()


class DtnAgents:
    """The agents of one swarm (every node with a `dtn:` piece)."""

    def __init__(self, swarm: "SwarmContext"):
        self.swarm = swarm  # the context, not the Swarm facade
        self.nodes = dtn_nodes(swarm.nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.netns = not swarm.backend.traits.containers  # the agents run the host's programs, in host folders
        self._bindirs: dict[str, Path] = {}  # agent name -> folder of its programs on this host
        self._ltpcla: Optional[Path] = None

    @property
    def enabled(self) -> bool:
        return bool(self.nodes)

    def agents(self) -> list[Agent]:
        """The adapters this swarm's nodes use, each once, in node order."""
        out: dict[str, Agent] = {}
        for n in self.nodes:
            agent = self.agent(n.name)
            out.setdefault(agent.name, agent)
        return list(out.values())

    def agent(self, node: str) -> Agent:
        try:
            return agent_of(self.piece(node))
        except ValueError as exc:
            raise SpecError(f"node {node!r}: {exc}") from None

    def bindir(self, agent: Agent) -> Path:
        """The folder of `agent`'s programs on this host (built now the first time)."""
        if agent.name not in self._bindirs and agent.install.user_tree:
            tree = self.user_trees().get(agent.name)
            self._bindirs[agent.name] = check_install_tree(agent.install, tree, agent.title) / "bin"
        if agent.name not in self._bindirs:
            self._bindirs[agent.name] = ensure_binaries(self.swarm.runner, self.swarm.workdir, self.swarm.message,
                                                        agent.install, agent.title)
        return self._bindirs[agent.name]

    def shell(self, node: str):
        """A NodeShell into `node` (swarm.dtn.agents.base): how adapters ask their running agent."""
        return lambda argv, input=None, timeout=30, check=True: self._exec(node, argv, input, timeout, check)

    def user_trees(self) -> dict[str, Optional[str]]:
        """Agents the user builds (Install.user_tree) -> the one install prefix this swarm's nodes name for it
        (None: not given); SpecError when nodes name two (one image layers one build)."""
        trees: dict[str, tuple[str, Optional[str]]] = {}
        for n in self.nodes:
            agent = self.agent(n.name)
            if not agent.install.user_tree:
                continue
            tree = agent.install_tree(self.piece(n.name))
            first = trees.setdefault(agent.name, (n.name, tree))
            if first[1] != tree:
                raise SpecError(f"node {n.name!r}: dtn.install {tree!r}: node {first[0]!r} runs {first[1]!r}; the "
                                f"{agent.name} nodes of a swarm run one build")
        return {name: tree for name, (_, tree) in trees.items()}

    def check_backend(self) -> None:
        """Agents that run on container backends only (Agent.needs_containers): SpecError on the others."""
        for agent in self.agents():
            if agent.needs_containers and self.netns:
                raise SpecError(f"dtn.agent {agent.name!r}: needs a container backend (compose or swarm): "
                                f"{agent.needs_containers}")

    def check(self) -> None:
        """Swarm-wide DTN checks (before anything starts); the binaries must be buildable here."""
        self.check_backend()
        if self.enabled and self.netns:
            for agent in self.agents():
                self.bindir(agent)
        if self.ltp:
            self.plans()  # the LTP peers' rates and delays derive (SpecError naming the field otherwise)
            if self.netns:
                self._ltpcla = ltpcla_binary(self.swarm.workdir, self.swarm.runner, self.swarm.message)

    def host_notes(self, udp_rcvbuf: Optional[int]) -> list[str]:
        """What each agent asks of the host at its node's fastest link (Agent.host_notes), each line once."""
        if udp_rcvbuf is None:
            return []
        link_of, names = self.link_view(), [n.name for n in self.nodes]
        notes: dict[str, None] = {}
        for n in self.nodes:
            fastest = max((link_of(n.name, m).rate or 0 for m in names if m != n.name), default=0)
            for note in self.agent(n.name).host_notes(self.piece(n.name), fastest, udp_rcvbuf):
                notes.setdefault(note)
        return list(notes)

    @property
    def ltp(self) -> bool:
        """Any node on `cla: ltp` (swarm-ltpcla runs beside its dtnd)."""
        return any(n.spec.dtn is not None and n.spec.dtn.cla == "ltp" and self.agent(n.name).ltp_by_ltpcla
                   for n in self.nodes)

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
            if self.ltp and self._ltpcla is None:
                self._ltpcla = ltpcla_binary(self.swarm.workdir, self.swarm.runner, self.swarm.message)
            plans = [replace(p, argv=[str(self.bindir(self.agent(p.node)) / p.argv[0]), *p.argv[1:]],
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
        self.swarm.backend.start_daemon(self.swarm.name, node, wrapper_argv(plan.workdir, plan.argv),
                                        self.agent(node).daemon)
        if plan.ltp_argv:  # connects to dtnd's WebSocket as soon as it answers (retries until then)
            self._exec(node, ["sh", "-c", ': >> "$0"', f"{plan.workdir}/{LTP_DOWN}"])
            self.swarm.backend.start_daemon(self.swarm.name, node, ["sh", "-c", LTP_WRAPPER, plan.workdir, *plan.ltp_argv],
                                            "ltpcla")

    def _guard(self, node: str) -> None:
        """The node's firewall for its agent's ports (the adapter's guard), set before the agent starts; a node
        where nft cannot run gets one line saying its agent answers every address."""
        rules = self.agent(node).guard(self.piece(node), self.swarm.spec.networks.isl.subnet)
        res = self._exec(node, ["nft", "-f", "-"], input=rules, check=False)
        if not res.ok:
            self.swarm.message(f"dtn: {node}: nft failed ({(res.stderr or res.stdout).strip()[-160:]}): its agent's "
                               "HTTP port answers every address of the node")

    def _route_attrs(self, node: str, attrs: list[str]) -> None:
        """`attrs` (the plan's route_attrs, e.g. quickack, initial windows) on the node's ISL subnet route
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
                try:
                    answers = dict(zip(pending, pool.map(self._ready_check, pending.values())))
                except AgentFailed as exc:  # it said why it will not be ready: no use waiting
                    raise RuntimeFailure(f"DTN agent failed to start: {exc}") from None
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
        problem = self.agent(plan.node).ready(self.shell(plan.node), plan)
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
        engine_of = {n.name: n.spec.dtn.ltp.engine_of(n.index) if n.spec.dtn else n.index for n in self.swarm.nodes}
        for n in self.nodes:
            if n.spec.dtn is not None and n.spec.dtn.cla == "ltp" and self.agent(n.name).ltp_by_ltpcla:
                text = ltp_down_windows(windows.get(n.name, []), engine_of, t0)
                self._exec(n.name, ["sh", "-c", 'cat > "$0.tmp" && mv "$0.tmp" "$0"', f"{self.workdir(n.name)}/{LTP_DOWN}"],
                           input=text)

    def load_contacts(self, plan: ContactPlan, release: float, others: str) -> list[str]:
        """Give every agent that routes by a contact plan (Agent.load_contacts: ION, HDTN) the run's plan (swarm node
        names, times from `release`, Unix s), in parallel; what an agent would not take of it, one line per entry
        naming the node. RuntimeFailure when an agent refuses the load."""
        pieces = {n.name: n.spec.dtn for n in self.swarm.nodes}
        link_of = self.link_view()
        load = ContactLoad(plan, release, node_numbers(pieces), others, lambda a, b: link_of(a, b).delay,
                           {name: piece.agent for name, piece in pieces.items() if piece is not None})
        notes: list[str] = []

        def one(p: AgentPlan) -> None:
            refused = self.agent(p.node).load_contacts(self.shell(p.node), p, load)
            notes.extend(f"{p.node}: {line}" for line in refused or [])

        try:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(one, self.plans()))
        except OSError as exc:
            raise RuntimeFailure(str(exc)) from None
        return sorted(notes)

    def store(self, node: str, timeout: float = 3.0) -> list[str]:
        """The entries of the agent's bundle store (swarm.observe.view counts them); OSError/ValueError when it
        does not answer."""
        return self.agent(node).store(self.shell(node), self.piece(node), timeout)

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
    def programs(self, node: str) -> dict[str, str]:
        """The agent's programs (its Install.programs) as `node` sees them: name -> path."""
        agent = self.agent(node)
        if self.netns:
            return {p: str(self.bindir(agent) / p) for p in agent.install.programs}
        return {p: p for p in agent.install.programs}

    def traffic_argv(self, node: str, *args: str) -> list[str]:
        """argv that runs flightsw/dtn_traffic.py inside `node` with stdin open."""
        b = self.swarm.backend
        if self.netns:
            program = [sys.executable or "python3", str(Path(self.swarm.workdir) / TRAFFIC_PROGRAM)]
        else:
            program = ["python3", f"/opt/swarm/{TRAFFIC_PROGRAM}"]
        return b.exec_prefix(self.swarm.name, node, interactive=True) + proto.labelled(
            program + list(args), proto.label(self.swarm.name, node))  # ps names the swarm

    def app_eid(self, node: str) -> str:
        """Where `node`'s applications receive: dtn://<node>/in, or ipn:<number>.1 with `dtn.eid: ipn`."""
        index = next(i for i, n in enumerate(self.swarm.nodes, start=1) if n.name == node)
        return self.piece(node).app_eid(node, index)

    def destination(self, dst: str) -> str:
        """A destination given as a DTN node's name (-> its applications' endpoint) or as an endpoint ID
        (dtn://..., ipn:N.S: e.g. a node outside the swarm); SpecError naming it otherwise."""
        if dst in self.by_name:
            return self.app_eid(dst)
        if re.fullmatch(r"dtn://[^/\s]+/\S*|ipn:\d+\.\d+", dst):
            return dst
        raise SpecError(f"destination {dst!r}: no DTN agent of that name in swarm {self.swarm.name!r} and not an "
                        f"endpoint ID (dtn://node/service, ipn:N.S) (DTN nodes: {', '.join(self.by_name) or 'none'})")

    def send(self, src: str, dst: str, payload: bytes, lifetime: float = 3600.0) -> str:
        """Send one bundle from `src`'s agent to `dst` (a node's applications, or an endpoint ID: see
        destination); returns its bundle ID."""
        if src not in self.by_name:
            raise SpecError(f"node {src!r}: no DTN agent in swarm {self.swarm.name!r} "
                            f"(DTN nodes: {', '.join(self.by_name) or 'none'})")
        eid = self.destination(dst)
        try:
            return self.agent(src).send(self.shell(src), self.programs(src), self.piece(src), eid, payload, lifetime)
        except OSError as exc:
            raise RuntimeFailure(f"sending from {src!r}: {exc}") from None

    def client(self, node: str) -> dict:
        """How the traffic program talks to `node`'s agent (merged into its plan; Agent.client)."""
        return self.agent(node).client(self.piece(node))

    def recv(self, node: str, timeout: float = 10.0, service: Optional[str] = None) -> dict:
        """Take the next bundle delivered to `node`'s `service` (default its applications': dtn://<node>/in or
        ipn:<number>.1), waiting up to `timeout` s."""
        if node not in self.by_name:
            raise SpecError(f"node {node!r}: no DTN agent in swarm {self.swarm.name!r}")
        service = service or self.piece(node).app_service()
        opts = [w for k, v in self.client(node).items() for w in (f"--{k}", str(v))]
        argv = self.traffic_argv(node, proto.DTN_RECV_ONCE, *opts, "--service", service, "--timeout", f"{timeout:g}")
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

    def log_events(self, node: str, text: str) -> list[dict]:
        """`node`'s agent log (see log()) as events per bundle (Agent.log_events)."""
        return self.agent(node).log_events(text)

    def failure_lines(self, node: str, text: str) -> list[tuple[Optional[float], str]]:
        """`node`'s agent log lines that say something went wrong, with their time (Agent.failure_lines)."""
        return self.agent(node).failure_lines(text)

    def handovers(self, node: str, text: str, cla: str) -> int:
        """Bundles `node`'s agent log says it handed to the external CLA module `cla` (Agent.handovers)."""
        return self.agent(node).handovers(text, cla)

    def status(self) -> list[AgentStatus]:
        # agents list peers by node name (dtn) or number (ipn): shown by name
        index = {n.name: i for i, n in enumerate(self.swarm.nodes, start=1)}
        names = {node_key(self.piece(n.name).node_id(n.name, index[n.name])): n.name for n in self.nodes}

        def one(node: NodePlan) -> AgentStatus:
            piece = self.piece(node.name)
            try:
                c = self.agent(node.name).counters(self.shell(node.name), node.name, piece)
            except (OSError, ValueError) as exc:
                return AgentStatus(node.name, "", piece.cla, piece.routing, [], 0, 0, 0, 0, 0, f"no answer ({exc})",
                                   agent_title=self.agent(node.name).title)
            ltp = ltp_summary(self.ltp_status(node.name)) if piece.cla == "ltp" and \
                self.agent(node.name).ltp_by_ltpcla else None
            state = "ok" if ltp is None or ltp["registered"] else "swarm-ltpcla not registered"
            peers = [names.get(p, p) for p in c.peers]
            return AgentStatus(node.name, c.eid, piece.cla, piece.routing, peers, c.stored, c.delivered, c.forwarded,
                               c.received, c.failed, state, c.clas, ltp, self.agent(node.name).title)

        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(one, self.nodes))


def host_udp_rcvbuf() -> Optional[int]:
    """The host's default UDP receive buffer (net.core.rmem_default, bytes), which new network namespaces take; None
    where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/core/rmem_default").read_text().strip())
    except (OSError, ValueError):
        return None


def link_delays_ms(links: Optional[LinksSpec], nodes: list[str]) -> dict[tuple[str, str], float]:
    """One-way delay plus jitter (ms) of each directed link of the swarm's `links:` (profiles resolved), for
    sizing the agents' CLA timeouts (e.g. swarm.dtn.agents.dtn7.plan.cla_timeouts)."""
    out = {}
    for pair, imp in resolve_links(links, nodes).items():
        ms = (imp.delay or 0.0) + (imp.jitter or 0.0)
        if ms > 0:
            out[pair] = ms
    return out


def wrapper_argv(workdir: str, argv: list[str]) -> list[str]:
    """The command that starts an agent (pure): the wrapper shell, the work folder, dtnd's argv."""
    return ["sh", "-c", WRAPPER, workdir, *argv]
