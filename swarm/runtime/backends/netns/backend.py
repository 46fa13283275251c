"""Embedded netns backend: no daemon, just network namespaces, veth pairs and Linux bridges.

Layout of swarm S:
- namespace `swarm-emu_S` is the swarm's switch: it holds the bridges `isl` and `ground`. Keeping the
  bridges out of the host namespace means the host's firewall (e.g. Docker's FORWARD DROP with
  br_netfilter) never sees swarm traffic, and future nftables fault rules live and die with the swarm;
- namespace `swarm-emu_S_<node>` per node: eth0 on `ground`, eth1 on `isl` (Docker's order), same
  addresses and MACs as the compose backend; its main process (the agent, or the node's command) is
  started from the host with `ip netns exec`;
- one veth in the host namespace, aliased `swarm-emu:S`, gives the host the ground gateway address.
Every namespace carries a marker: its loopback's alias is `swarm-emu:S`. Removing the namespaces removes
every veth and bridge; `down` and `wipe` remove a namespace only when its marker (or the swarm's namespaces.txt,
written before each is made) says the framework made it, never by the name prefix alone, and
host links by the alias.
"""
from __future__ import annotations

import ctypes
import hashlib
import ipaddress
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from compose.render import NODE_SYSCTLS, node_environment
from flightsw import protocol as proto
from swarm.errors import CommandError, SpecError
from swarm.spec.model import NodePlan, SwarmSpec, gateway_address
from swarm.caps import BACKEND_TRAITS
from swarm.cfs.node import NO_CFS, CfsRuntime
from swarm.runtime.backends.base import Backend, ForwardingHop, Progress, swarm_dir

NS_PREFIX = "swarm-emu_"
ALIAS_PREFIX = "swarm-emu:"
GROUND_IF, ISL_IF = "eth0", "eth1"
CLONE_NEWNET = 0x40000000


def node_python() -> str:
    """The interpreter that runs node programs: the one running the framework, so the packages the node
    software needs (pyproject's dependencies, e.g. cyclonedds and spacepackets for the swarm app) are
    importable, as they are in the node image's /opt/venv."""
    return sys.executable or "python3"


def switch_ns(swarm: str) -> str:
    return f"{NS_PREFIX}{swarm}"


def node_ns(swarm: str, node: str) -> str:
    return f"{NS_PREFIX}{swarm}_{node}"


def marker(swarm: str) -> str:
    """The alias set on the loopback of every namespace the framework makes for `swarm` (and on its host link)."""
    return f"{ALIAS_PREFIX}{swarm}"


def host_link(swarm: str) -> str:
    """Name of the host's veth to the swarm's ground bridge (15 characters at most)."""
    return "swe" + hashlib.sha256(swarm.encode()).hexdigest()[:8] + "g"


def switch_port(node_index: int, iface: str) -> str:
    """The switch namespace's end of a node's veth (`g<index>` on the ground bridge, `i<index>` on the ISL one)."""
    return f"{'g' if iface == GROUND_IF else 'i'}{node_index}"


@dataclass(frozen=True)
class UpPlan:
    """What `up` runs to make a swarm's namespaces and wiring, in a handful of processes (pure).

    `namespaces` (switch first) are recorded in the swarm's state before any is made; `host` is one
    `ip -batch -` in the host namespace: every namespace, both bridges, the host's ground link and every veth
    pair, each end made directly in its namespace; `switch` is one `ip -n <switch> -batch -` (marker, bridges
    up, ports enslaved without learning) and `fdb` one `bridge -n <switch> -batch -` (a static entry per node
    port); `sysctls` are written in each node's namespace (/proc/sys, no process); `nodes` is one
    `ip -n <node> -batch -` per node (marker, loopback, addresses, links up, default route)."""

    switch_ns: str
    namespaces: list[str]
    host: list[str]
    switch: list[str]
    fdb: list[str]
    sysctls: dict[str, str]
    nodes: dict[str, list[str]]


def plan_up(spec: SwarmSpec, nodes: list[NodePlan]) -> UpPlan:
    """The batch scripts that bring `nodes` of `spec` up on the netns backend (see UpPlan)."""
    sw, host, mark = switch_ns(spec.name), host_link(spec.name), marker(spec.name)
    ground = ipaddress.IPv4Network(spec.networks.ground.subnet)
    gateway = gateway_address(spec.networks.ground.subnet)
    host_lines = [f"netns add {sw}", *(f"netns add {node_ns(spec.name, n.name)}" for n in nodes)]
    switch_lines = [f"link set lo alias {mark}"]
    for bridge, net in (("isl", spec.networks.isl), ("ground", spec.networks.ground)):
        host_lines.append(f"link add {bridge} netns {sw} mtu {net.mtu} type bridge stp_state 0 forward_delay 0")
        switch_lines.append(f"link set {bridge} up")
    # `down` finds the host's link by its alias (`link add ... alias` would not set it); until then by its
    # peer, which goes with the switch namespace
    host_lines += [f"link add {host} mtu {spec.networks.ground.mtu} type veth peer name host netns {sw}",
                   f"link set {host} alias {mark}", f"addr add {gateway}/{ground.prefixlen} dev {host}",
                   f"link set {host} up"]
    switch_lines.append("link set host master ground up")
    fdb_lines: list[str] = []
    node_lines: dict[str, list[str]] = {}
    for node in nodes:
        ns = node_ns(spec.name, node.name)
        lines = [f"link set lo alias {mark}", "link set lo up"]
        wiring = (
            (GROUND_IF, "ground", spec.networks.ground, node.ground_ip, node.ground_mac),
            (ISL_IF, "isl", spec.networks.isl, node.isl_ip, node.isl_mac),
        )
        for ifname, bridge, net, ip, mac in wiring:
            port = switch_port(node.index, ifname)
            prefix = ipaddress.IPv4Network(net.subnet).prefixlen
            host_lines.append(f"link add {ifname} netns {ns} address {mac} mtu {net.mtu} type veth "
                              f"peer name {port} netns {sw} mtu {net.mtu}")
            # The switch knows each node's MAC and port: a static entry, no learning on node ports. A learning
            # bridge moves a MAC to whichever port last sent it, so one frame whose source MAC a corrupting link
            # flipped into another node's (sat03 ...:04 and sat04 ...:05 differ by one bit) black-holed that
            # node until the entry aged out (seen in CI: 93 % of pings lost over a 10 % corrupting link).
            switch_lines += [f"link set {port} master {bridge}", f"link set {port} type bridge_slave learning off",
                             f"link set {port} up"]
            fdb_lines.append(f"fdb replace {mac} dev {port} master static")
            lines += [f"addr add {ip}/{prefix} brd + dev {ifname}", f"link set {ifname} up"]
        lines.append(f"route add default via {gateway}")
        node_lines[ns] = lines
    return UpPlan(sw, [sw, *node_lines], host_lines, switch_lines, fdb_lines, dict(NODE_SYSCTLS), node_lines)


def write_sysctls(namespaces: list[str], sysctls: dict[str, str]) -> None:
    """Write `sysctls` (dotted names) in each of the named network namespaces through /proc/sys, without a
    process per namespace: a helper thread enters each namespace in turn (setns affects only the calling
    thread; /proc/sys/net shows the opener's namespace), then returns to its own. Raises CommandError naming
    the namespace and the file on the first failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    failure: list[CommandError] = []

    def enter(fd: int, what: str) -> None:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {what}: {os.strerror(ctypes.get_errno())}")

    def work() -> None:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        ns, path = "", ""
        try:
            for ns in namespaces:
                fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
                try:
                    enter(fd, ns)
                finally:
                    os.close(fd)
                for key, value in sysctls.items():
                    path = "/proc/sys/" + key.replace(".", "/")
                    with open(path, "w") as f:
                        f.write(value)
                path = ""
        except OSError as exc:
            failure.append(CommandError(["sysctl", "-w", *(f"{k}={v}" for k, v in sysctls.items())], 1, "",
                                        f"namespace {ns}{' ' + path if path else ''}: {exc}"))
        finally:
            enter(home, "back")  # the thread ends anyway; not leaving it in a node's namespace keeps that cheap
            os.close(home)

    thread = threading.Thread(target=work, name="netns-sysctls", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


class NetnsHop(ForwardingHop):
    """The swarm's switch namespace: every frame between nodes crosses its bridges; the namespace is the swarm's
    own, so the defaults of ForwardingHop (chain and queue per node) apply."""

    placement = "at the swarm's switch namespace (netns; one engine per swarm)"

    def __init__(self, runner, state_dir):
        self.runner, self.state_dir = runner, state_dir

    def port(self, swarm: str, node_index: int, iface: str) -> tuple[list[str], str]:
        return ["ip", "netns", "exec", switch_ns(swarm)], switch_port(node_index, iface)

    def prepare(self, swarm: str) -> None:
        """Bridged IPv4 through iptables in the switch namespace (its own setting; the default there)."""
        self.runner.run(["ip", "netns", "exec", switch_ns(swarm), "sysctl", "-q", "-w",
                         "net.bridge.bridge-nf-call-iptables=1"], timeout=30)

    def start_daemon(self, swarm: str, argv: list[str], name: str) -> bool:
        """One process in the swarm's switch namespace (e.g. the link engine serving every node's queue); it
        goes with the namespace on `down`."""
        log = self.state_dir(swarm) / "logs" / f"hop.{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.runner.start(["ip", "netns", "exec", switch_ns(swarm)] + proto.labelled(list(argv), proto.label(swarm, name)),
                          stdout_path=str(log))
        return True


class NetnsBackend(Backend):
    """Network namespaces on this host, no container runtime."""

    name = "netns"
    traits = BACKEND_TRAITS[name]

    def check_available(self) -> None:
        if not self.caps.root:
            raise SpecError("backend 'netns': needs root (network namespaces); run as root or use --backend compose")
        if not self.caps.netns:
            raise SpecError("backend 'netns': cannot create network namespaces here (unshare --net failed)")

    def state_dir(self, swarm: str) -> Path:
        return swarm_dir(self.workdir, swarm)

    def agent_path(self) -> Path:
        return self.workdir / "flightsw" / proto.AGENT

    def up(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, progress: Progress,
           cfs: CfsRuntime = NO_CFS) -> None:
        """Every namespace is recorded first (namespaces.txt), then made and wired by a few batches (plan_up),
        then each node's main process is started. `timings` keeps the seconds each phase took."""
        total = len(nodes)
        state = self.state_dir(spec.name)
        (state / "logs").mkdir(parents=True, exist_ok=True)
        plan = plan_up(spec, nodes)
        self.timings: dict[str, float] = {}
        clock = time.monotonic()

        def lap(phase: str) -> None:
            nonlocal clock
            now = time.monotonic()
            self.timings[phase] = self.timings.get(phase, 0.0) + now - clock
            clock = now

        self._record(spec.name, *plan.namespaces)
        lap("record")
        progress(0, total, "creating namespaces and links")
        self._batch("ip", None, plan.host)
        lap("namespaces+veths")
        self._batch("ip", plan.switch_ns, plan.switch)
        self._batch("bridge", plan.switch_ns, plan.fdb)
        lap("switch ports")
        write_sysctls(list(plan.nodes), plan.sysctls)
        lap("sysctls")
        for done, (node, ns) in enumerate(zip(nodes, plan.nodes)):
            progress(done, total, f"configuring {node.name}")
            self._batch("ip", ns, plan.nodes[ns])
        lap("addresses+routes")
        pids: dict[str, int] = {}
        launch: dict[str, dict] = {}
        for done, node in enumerate(nodes):
            progress(done, total, f"starting {node.name}")
            launch[node.name] = self.launch_plan(spec, node)
            pids[node.name] = self._start_node(spec.name, node.name, launch[node.name])
        lap("start processes")
        (state / "launch.json").write_text(json.dumps(launch))
        (state / "pids.json").write_text(json.dumps(pids))
        lap("state files")
        progress(total, total, "namespaces created")

    def _batch(self, tool: str, ns: str | None, lines: list[str]) -> None:
        """One `ip`/`bridge` process (in namespace `ns`, or the host's) running `lines` as its batch; it stops
        at the first failing line, which its error names."""
        if lines:
            self.runner.run([tool, *(["-n", ns] if ns else []), "-batch", "-"], input="\n".join(lines) + "\n",
                            timeout=120)

    def _record(self, swarm: str, *namespaces: str) -> None:
        """Note namespaces in the swarm's state before creating them: a crash between `ip netns add` and a
        namespace's marker leaves a namespace that `down` still knows is ours."""
        with open(self.state_dir(swarm) / "namespaces.txt", "a") as f:
            f.write("".join(ns + "\n" for ns in namespaces))

    def launch_plan(self, spec: SwarmSpec, node: NodePlan) -> dict:
        """How a node's main process is started (pure), kept in launch.json so `restart` starts it again."""
        # -S: the agent's `run` needs the standard library only; skipping site (the venv's .pth files) halves
        # each start-up, and `up` starts one per node at once (swarm-app is exec'd with site again)
        command = proto.labelled(node.spec.command or [node_python(), "-S", str(self.agent_path()), proto.RUN],
                                 proto.label(spec.name, node.name))  # ps names its swarm
        env = [f"{k}={v}" for k, v in node_environment(spec, node).items()]
        env.append(f"SWARM_RUN_DIR={self.node_run_dir(spec.name, node.name)}")
        return {"argv": ["ip", "netns", "exec", node_ns(spec.name, node.name), "env", *env, *command],
                "gateway": gateway_address(spec.networks.ground.subnet)}

    def _start_node(self, swarm: str, node: str, launch: dict) -> int:
        """Start a node's main process, its output appended to the node's log; returns its pid."""
        log = self.state_dir(swarm) / "logs" / f"{node}.log"
        return self.runner.start(launch["argv"], stdout_path=str(log)).pid

    def node_action(self, swarm: str, node: str, action: str) -> None:
        """Processes of a namespace: stop (SIGTERM, then SIGKILL) / kill (SIGKILL) also take the node's links
        down, as a stopped container has no network; pause / unpause: SIGSTOP / SIGCONT every process;
        restart: stop, links up again (addresses and default route restored), main process started again."""
        ns = node_ns(swarm, node)
        if ns not in self._swarm_namespaces(swarm):
            raise SpecError(f"node {node!r}: swarm {swarm!r} has no such node (namespace {ns} missing)")
        if action in ("pause", "unpause"):
            sig = signal.SIGSTOP if action == "pause" else signal.SIGCONT
            for pid in self._pids_in(ns):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            return
        if action not in ("stop", "kill", "restart"):
            raise SpecError(f"node action {action!r}: expected one of stop, kill, pause, unpause, restart")
        if action == "kill":
            for pid in self._pids_in(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._kill_all([ns])  # SIGTERM, then SIGKILL for what is left (SIGKILL also ends a paused process)
        if action != "restart":
            for ifname in (ISL_IF, GROUND_IF):
                self.runner.run(["ip", "-n", ns, "link", "set", ifname, "down"], timeout=30)
            return
        launch = json.loads((self.state_dir(swarm) / "launch.json").read_text())[node]
        for ifname in (GROUND_IF, ISL_IF):
            self.runner.run(["ip", "-n", ns, "link", "set", ifname, "up"], timeout=30)
        self.runner.run(["ip", "-n", ns, "route", "replace", "default", "via", launch["gateway"]], timeout=30)
        pid = self._start_node(swarm, node, launch)
        pids_file = self.state_dir(swarm) / "pids.json"
        pids = json.loads(pids_file.read_text()) if pids_file.exists() else {}
        pids_file.write_text(json.dumps({**pids, node: pid}))

    def _namespaces(self) -> list[str]:
        res = self.runner.run(["ip", "netns", "list"], timeout=30)
        return [line.split()[0] for line in res.stdout.splitlines() if line.startswith(NS_PREFIX)]

    def _swarm_namespaces(self, swarm: str) -> list[str]:
        sw = switch_ns(swarm)
        return [ns for ns in self._namespaces() if ns == sw or ns.startswith(sw + "_")]

    def _owner(self, ns: str) -> str | None:
        """The swarm a namespace belongs to when the framework made it, else None: the marker on its loopback,
        or the namespaces.txt of a swarm in this workdir naming it (written before each namespace is made)."""
        res = self.runner.run(["ip", "-n", ns, "-j", "link", "show", "lo"], check=False, timeout=30)
        try:
            alias = json.loads(res.stdout or "[]")[0].get("ifalias", "")
        except (ValueError, IndexError, AttributeError):
            alias = ""
        if alias.startswith(ALIAS_PREFIX):
            return alias[len(ALIAS_PREFIX):]
        swarm = ns[len(NS_PREFIX):].partition("_")[0]
        try:
            recorded = swarm_dir(self.workdir, swarm) / "namespaces.txt"
            if recorded.exists() and ns in recorded.read_text().split():
                return swarm
            launch = swarm_dir(self.workdir, swarm) / "launch.json"  # a swarm made before namespaces.txt
            nodes = json.loads(launch.read_text()) if launch.exists() else {}
            return swarm if nodes and ns in {switch_ns(swarm), *(node_ns(swarm, n) for n in nodes)} else None
        except (SpecError, OSError, ValueError):
            return None

    def owned_namespaces(self, swarm: str | None) -> dict[str, str]:
        """{namespace: swarm} of the namespaces the framework made (of `swarm`, or of every swarm)."""
        candidates = self._swarm_namespaces(swarm) if swarm else self._namespaces()
        owners = {ns: self._owner(ns) for ns in candidates}
        return {ns: owner for ns, owner in owners.items() if owner and (swarm is None or owner == swarm)}

    def leftovers(self, swarm: str | None = None) -> list[tuple[str, str]]:
        if not self.caps.root:
            return []
        found = [(owner, f"namespace {ns}") for ns, owner in self.owned_namespaces(swarm).items()]
        return found + [(owner, f"host link {link}") for link, owner in self._host_links(swarm).items()]

    def _pids_in(self, ns: str) -> list[int]:
        return self._pids_by_namespace([ns])[ns]

    @staticmethod
    def _pids_by_namespace(namespaces: list[str]) -> dict[str, list[int]]:
        """{namespace: pids of the processes in it}, from one walk of /proc for all of them (what
        `ip netns pids` does for one: a process is in a namespace when its /proc/PID/ns/net is that file)."""
        wanted: dict[tuple[int, int], str] = {}
        for ns in namespaces:
            try:
                st = os.stat(f"/run/netns/{ns}")
            except OSError:
                continue
            wanted[(st.st_dev, st.st_ino)] = ns
        found: dict[str, list[int]] = {ns: [] for ns in namespaces}
        if not wanted:
            return found
        with os.scandir("/proc") as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                try:
                    st = os.stat(f"/proc/{entry.name}/ns/net")
                except OSError:  # gone meanwhile, or a kernel thread
                    continue
                holder = wanted.get((st.st_dev, st.st_ino))
                if holder is not None:
                    found[holder].append(int(entry.name))
        return found

    def node_states(self, swarm: str) -> dict[str, str]:
        """running: a process is in the node's namespace; created: none yet, but its main process (as started)
        is alive: `ip netns exec` is between fork and setns, a window a loaded host widens (seen as a node
        "exited" right after `up` started it); exited otherwise."""
        prefix = switch_ns(swarm) + "_"
        pids_file = self.state_dir(swarm) / "pids.json"
        try:
            started = json.loads(pids_file.read_text()) if pids_file.exists() else {}
        except ValueError:
            started = {}
        states = {}
        nodes = [ns for ns in self._swarm_namespaces(swarm) if ns.startswith(prefix)]
        inside = self._pids_by_namespace(nodes)
        for ns in nodes:
            if ns.startswith(prefix):
                name = ns[len(prefix):]
                pid = started.get(name)
                if pid and not self._alive(int(pid)):  # its main process is gone: a dtnd left in the namespace
                    states[name] = "exited"             # does not make the node run
                elif inside[ns]:
                    states[name] = "running"
                else:
                    pid = started.get(name)
                    states[name] = "created" if pid and self._alive(int(pid)) else "exited"
        return states

    def netns_ids(self, swarm: str) -> set[str]:
        prefix = switch_ns(swarm) + "_"
        return {f"net:[{os.stat(f'/run/netns/{ns}').st_ino}]" for ns in self._swarm_namespaces(swarm)
                if ns.startswith(prefix)}

    def isl_iface(self, swarm: str, node: str) -> str | None:
        """Every node's ISL veth is ISL_IF (also under batman-adv, which holds the address on bat0 above it):
        no command per node to find it (1,000 of them at `up` of a 1,000-node swarm)."""
        return ISL_IF

    def exec_prefix(self, swarm: str, node: str, interactive: bool = False) -> list[str]:
        return ["ip", "netns", "exec", node_ns(swarm, node)]

    def node_run_dir(self, swarm: str, node: str) -> Path:
        """The node's private scratch directory (namespaces share the host's /run)."""
        return self.state_dir(swarm) / "nodes" / node

    def private_run_prefix(self, swarm: str, node: str) -> list[str]:
        """`ip netns exec` gives the command a mount namespace of its own; the node's run/ directory is bound
        over /run in it (positional arguments of `sh -c`, nothing interpolated into the script)."""
        run = self.node_run_dir(swarm, node) / "run"
        return self.exec_prefix(swarm, node) + ["sh", "-c", 'mount --bind "$0" /run && exec "$@"', str(run)]

    def run_path_on_host(self, swarm: str, node: str, path: str) -> Path | None:
        rel = Path(path).relative_to("/run")  # a path outside /run is not the node's own
        return self.node_run_dir(swarm, node) / "run" / rel

    def hop(self) -> ForwardingHop | None:
        """The swarm's switch namespace (NetnsHop), where iptables sees bridged frames (br_netfilter)."""
        return NetnsHop(self.runner, self.state_dir) if self.caps.bridge_nf else None

    def start_daemon(self, swarm: str, node: str, argv: list[str], name: str, at_hop: bool = False) -> None:
        """Start a daemon in the node's namespace, or (`at_hop`) in the swarm's switch namespace; either way with
        the node's own /run (its control socket is the node's) and its log among the node's."""
        run = self.node_run_dir(swarm, node) / "run"
        run.mkdir(parents=True, exist_ok=True)
        log = self.state_dir(swarm) / "logs" / f"{node}.{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        prefix = (["ip", "netns", "exec", switch_ns(swarm), "sh", "-c", 'mount --bind "$0" /run && exec "$@"', str(run)]
                  if at_hop else self.private_run_prefix(swarm, node))
        self.runner.start(prefix + proto.labelled(list(argv), proto.label(swarm, node)), stdout_path=str(log))

    def agent_argv(self, swarm: str, node: str, *args: str) -> list[str]:
        return self.exec_prefix(swarm, node) + [
            "env", f"SWARM_RUN_DIR={self.node_run_dir(swarm, node)}",
            *proto.labelled([node_python(), str(self.agent_path()), *args], proto.label(swarm, node))]

    def logs(self, swarm: str, node: str, tail: int = 50) -> str:
        path = self.state_dir(swarm) / "logs" / f"{node}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-tail:])

    def _kill_all(self, namespaces: list[str]) -> int:
        """SIGTERM, then SIGKILL, every process inside the given namespaces (only those: we made them).

        Listed again until none is left: an agent still running may start processes (e.g. iperf3
        servers) after a listing, and those would outlive the namespace's name.
        """
        count = 0
        for _round in range(5):
            victims = [pid for pids in self._pids_by_namespace(namespaces).values() for pid in pids]
            if not victims:
                break
            count += len(victims)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in victims:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + (3 if sig == signal.SIGTERM else 1)
                # a list, not a generator: every victim is looked at, so each one of our children is reaped
                while time.monotonic() < deadline and any([self._alive(p) for p in victims]):
                    time.sleep(0.05)
        return count

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie child of ours counts as gone once reaped
            done, _ = os.waitpid(pid, os.WNOHANG)
            return done == 0
        except ChildProcessError:  # not our child: a zombie its (new) parent has not reaped yet is gone too
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except (OSError, IndexError):
                return False

    def _remove(self, namespaces: list[str], links: list[str]) -> list[str]:
        removed: list[str] = []
        if not self.caps.root:
            return removed
        killed = self._kill_all(namespaces)
        if killed:
            removed.append(f"{killed} process(es)")
        for ns in namespaces:
            self.runner.run(["ip", "netns", "del", ns], timeout=30)
        if namespaces:
            removed.append(f"{len(namespaces)} namespace(s)")
        for link in links:  # normally gone with the switch namespace (its veth peer); leftovers only
            if self.runner.run(["ip", "link", "del", link], check=False, timeout=30).ok:
                removed.append(f"link {link}")
        return removed

    def _host_links(self, swarm: str | None) -> dict[str, str]:
        """{host link: swarm} of the host veths carrying the framework's alias (of `swarm`, or of every swarm)."""
        res = self.runner.run(["ip", "-j", "link", "show"], timeout=30)
        links = {}
        for link in json.loads(res.stdout or "[]"):
            alias = link.get("ifalias", "")
            if alias.startswith(ALIAS_PREFIX) and (swarm is None or alias == marker(swarm)):
                links[link["ifname"]] = alias[len(ALIAS_PREFIX):]
        return links

    def down(self, swarm: str) -> list[str]:
        if not self.caps.root:
            return []
        return self._remove(list(self.owned_namespaces(swarm)), list(self._host_links(swarm)))

    def wipe(self) -> list[str]:
        if not self.caps.root:
            return []
        return self._remove(list(self.owned_namespaces(None)), list(self._host_links(None)))

