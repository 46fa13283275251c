"""A second Docker Engine on this machine, as a real second host for the multi-host (`swarm`) backend.

`dockerd` runs in its own network namespace and UTS namespace (its own hostname, so `docker node ls`
tells the two nodes apart), with its own config file, data root, exec root, socket and pid file, no
iptables and no default bridge, and the same storage driver as the main Engine. A veth pair joins the
namespace to the host: the host side gets `.1` of a /30, the engine `.2`, where it also listens on
tcp://.2:2376 with TLS (a throw-away CA and client certificate in its run dir, `client_tls`); the engine routes everything
else through the host, so it reaches the main Engine (a Swarm manager advertising the host's veth
address) exactly as a machine on a LAN would.

Why `nsenter --net=/var/run/netns/<ns>` and not `ip netns exec`: the latter remounts /sys for the new
namespace and hides the cgroup mounts, and dockerd then fails with "Devices cgroup isn't mounted".

Everything created is written to a state file first (`<run dir>/<name>/state.json`), so `stop` (also a
fresh process after a crash: `python tests/hosts/second_engine.py down <name>`) removes exactly it:
the Swarm membership, the daemon and every process left in its namespace (by pid), mounts under its
roots, its cgroups, the namespace (and with it the veth) and the folders. Nothing else is touched.

Command line (root):

    python tests/hosts/second_engine.py up [--name mh2-host2] [--link 10.249.255.0/30]   # prints DOCKER_HOST
    python tests/hosts/second_engine.py down [--name mh2-host2]
    python tests/hosts/second_engine.py status [--name mh2-host2]

Python:

    with SecondEngine("mh2-host2", "10.249.255.0/30") as eng:
        eng.docker("info")                     # docker -H unix://... info
        with SwarmPair(main_runner, eng):      # main Engine init'ed (or reused) + this one joined as worker
            ...
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:  # run as a script: make the framework importable
    sys.path.insert(0, str(_REPO))

from swarm.errors import CommandError, RuntimeFailure, SpecError  # noqa: E402  (after the sys.path line)
from swarm.runtime.backends.multihost.joining import join_refused, join_request  # noqa: E402
from swarm.runtime.runner import Runner  # noqa: E402

DEFAULT_NAME = "mh2-host2"
DEFAULT_LINK = "10.249.255.0/30"
BASE_DIR = Path("/var/lib/swarm-emu-hosts")  # data roots (images, containers)
RUN_DIR = Path("/run/swarm-emu-hosts")  # config, socket, pid file, exec root, log, state
NETNS_DIR = Path("/var/run/netns")
TLS_PORT = 2376
GOSSIP_PORT = 7946  # Docker Swarm's memberlist (TCP and UDP)
_CGROUP_ROOT = Path("/sys/fs/cgroup")

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


@dataclass
class EngineState:
    """What `start` created, written before it is created (so a crash half-way is still undone)."""

    name: str
    link: str
    netns: str
    veth: str
    data_root: str
    run_dir: str
    cgroup_parent: str
    hostname: str
    pid: int = 0
    swarm_node_id: str = ""
    created: list[str] = field(default_factory=list)


def main_storage_driver(runner: Runner, docker: Sequence[str] = ("docker",)) -> str:
    """The main Engine's storage driver (the second one uses the same, so the same image layers load)."""
    return runner.run([*docker, "info", "--format", "{{.Driver}}"], timeout=30).stdout.strip()


class SecondEngine:
    """A dockerd in its own network namespace, joined to the host by a veth pair."""

    def __init__(self, name: str = DEFAULT_NAME, link: str = DEFAULT_LINK, *, runner: Runner | None = None,
                 storage_driver: str | None = None, base_dir: Path = BASE_DIR, run_dir: Path = RUN_DIR,
                 progress: Progress = _quiet):
        if not name or len(name) > 12 or not all(c.isalnum() or c == "-" for c in name):
            raise SpecError(f"second engine name {name!r}: 1-12 characters of [a-z0-9-] (veth names are 15)")
        net = ipaddress.ip_network(link)
        if net.prefixlen > 30:
            raise SpecError(f"second engine link {link!r}: needs at least a /30")
        self.name = name
        self.link = net
        self.runner = runner or Runner()
        self.storage_driver = storage_driver
        self.progress = progress
        hosts = list(net.hosts())
        self.host_address = str(hosts[0])  # host side of the veth: the main Engine's Swarm address
        self.address = str(hosts[1])  # the engine's own address (its Swarm advertise address)
        self.netns = name
        self.veth = f"ve-{name}"
        self.data_root = Path(base_dir) / name
        self.dir = Path(run_dir) / name
        self.exec_root = self.dir / "exec"
        self.socket = self.dir / "docker.sock"
        self.pidfile = self.dir / "docker.pid"
        self.config = self.dir / "daemon.json"
        self.log = self.dir / "dockerd.log"
        self.state_file = self.dir / "state.json"
        self.cgroup_parent = f"/{name}"
        self.hostname = name
        self.tls_dir = self.dir / "tls"  # CA, server and client certificates of the tcp:// listener

    @classmethod
    def attach(cls, name: str, **kw) -> "SecondEngine":
        """The engine `name` started earlier (by another process), with the link it was started with."""
        st = cls(name, **kw)._load()
        return cls(name, st.link if st else DEFAULT_LINK, **kw)

    # -- addressing -------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """The Docker endpoint (what a `hosts:` entry or DOCKER_HOST names)."""
        return f"unix://{self.socket}"

    @property
    def tcp_endpoint(self) -> str:
        """The engine's TLS listener on its own address (a `hosts:` entry with `tls: self.client_tls`)."""
        return f"tcp://{self.address}:{TLS_PORT}"

    @property
    def client_tls(self) -> dict[str, str]:
        """Paths of the CA and the client certificate and key for `tcp_endpoint` (the spec's `tls:`)."""
        return {"ca": str(self.tls_dir / "ca.pem"), "cert": str(self.tls_dir / "cert.pem"), "key": str(self.tls_dir / "key.pem")}

    def _make_certificates(self) -> None:
        """A throw-away CA, a server certificate for the engine's address and a client certificate (openssl)."""
        d = self.tls_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / "server.ext").write_text(f"subjectAltName=IP:{self.address}\nextendedKeyUsage=serverAuth\n")
        (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        r = self.runner.run
        r(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "ca-key.pem", "-out", d / "ca.pem",
           "-days", "2", "-subj", f"/CN={self.name}-test-ca"], timeout=60)
        for who, key, cert, ext in (("server", "server-key.pem", "server-cert.pem", "server.ext"),
                                    ("client", "key.pem", "cert.pem", "client.ext")):
            r(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", d / key, "-out", d / f"{who}.csr",
               "-subj", f"/CN={self.name}-{who}"], timeout=60)
            r(["openssl", "x509", "-req", "-in", d / f"{who}.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca-key.pem",
               "-CAcreateserial", "-out", d / cert, "-days", "2", "-extfile", d / ext], timeout=60)

    def docker(self, *args: str, check: bool = True, timeout: float | None = 60, input: str | None = None):
        return self.runner.run(["docker", "-H", self.host, *args], check=check, timeout=timeout, input=input)

    # -- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> "SecondEngine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def running(self) -> bool:
        pid = self._pid()
        return bool(pid) and _alive(pid) and self.docker("version", "--format", "{{.Server.Version}}",
                                                          check=False, timeout=10).ok

    def start(self, timeout: float = 90.0) -> "SecondEngine":
        """Create namespace, veth, folders and config; start dockerd; wait until it answers."""
        if os.geteuid() != 0:
            raise SpecError("second engine: needs root (network namespaces, dockerd)")
        if self.state_file.exists():
            if self.running():
                self.progress(f"second engine {self.name}: already running at {self.host}")
                return self
            self.progress(f"second engine {self.name}: removing what a previous run left")
            self.stop()
        if (NETNS_DIR / self.netns).exists():
            raise SpecError(f"second engine name {self.name!r}: network namespace {self.netns} exists and is not ours")
        if _link_exists(self.runner, self.veth):
            raise SpecError(f"second engine name {self.name!r}: interface {self.veth} exists and is not ours")
        driver = self.storage_driver or main_storage_driver(self.runner)
        st = EngineState(self.name, str(self.link), self.netns, self.veth, str(self.data_root), str(self.dir),
                         self.cgroup_parent, self.hostname)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._save(st, "dirs")
        self.data_root.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self._save(st, "netns")
        r = self.runner.run
        r(["ip", "netns", "add", self.netns])
        r(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns])
        r(["ip", "addr", "add", f"{self.host_address}/{self.link.prefixlen}", "dev", self.veth])
        r(["ip", "link", "set", self.veth, "up"])
        r(["ip", "-n", self.netns, "addr", "add", f"{self.address}/{self.link.prefixlen}", "dev", "eth0"])
        r(["ip", "-n", self.netns, "link", "set", "eth0", "up"])
        r(["ip", "-n", self.netns, "link", "set", "lo", "up"])
        r(["ip", "-n", self.netns, "route", "add", "default", "via", self.host_address])
        # The engine's own daemon.json: the machine's /etc/docker/daemon.json pins data-root (and would be
        # read by default), so the second daemon must never see it.
        self.config.write_text(json.dumps({
            "storage-driver": driver, "iptables": False, "ip-forward": False, "ip-masq": False,
            "bridge": "none", "log-driver": "json-file", "log-opts": {"max-size": "10m", "max-file": "2"},
            "shutdown-timeout": 3,
        }, indent=1) + "\n")
        self._make_certificates()
        self._save(st, "dockerd")
        return self._launch(st, t0, timeout)

    def _launch(self, st: EngineState, t0: float, timeout: float) -> "SecondEngine":
        """Start dockerd in the engine's namespaces and wait until it answers (stop everything if it does not)."""
        argv = ["nsenter", f"--net={NETNS_DIR / self.netns}", "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname,
                "dockerd", "--config-file", str(self.config), "--data-root", str(self.data_root),
                "--exec-root", str(self.exec_root), "-H", self.host, "--pidfile", str(self.pidfile),
                "--cgroup-parent", self.cgroup_parent,
                # and a TLS listener on its own address, as a remote host's daemon would have
                "-H", self.tcp_endpoint, "--tlsverify", "--tlscacert", str(self.tls_dir / "ca.pem"),
                "--tlscert", str(self.tls_dir / "server-cert.pem"), "--tlskey", str(self.tls_dir / "server-key.pem")]
        proc = self.runner.start(argv, stdout_path=str(self.log))
        st.pid = proc.pid
        self._save(st)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
                self.stop()
                raise RuntimeFailure(f"second engine {self.name}: dockerd exited ({proc.returncode}): "
                                     + " | ".join(tail))
            if self.socket.exists() and self.docker("version", "--format", "{{.Server.Version}}",
                                                    check=False, timeout=10).ok:
                self.progress(f"second engine {self.name}: dockerd ready at {self.host} "
                              f"(address {self.address}, {time.monotonic() - t0:.1f} s)")
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeFailure(f"second engine {self.name}: dockerd did not answer within {timeout:.0f} s (log: {self.log})")

    def gossip_port_leaked(self) -> bool:
        """True when the engine is in no Swarm yet something in its namespace still listens on the gossip port
        7946: Docker 20.10's `swarm leave` sometimes keeps memberlist's listener (moby PR 50115 fixed it), and
        the next `swarm join` then starts no gossip (seen in CI: "bind: address already in use" in its log, and
        every overlay test after it failed)."""
        pid = self._pid()
        if not pid or not _alive(pid):
            return False
        if self.docker("info", "--format", "{{.Swarm.LocalNodeState}}", check=False, timeout=15).stdout.strip() \
                != "inactive":
            return False
        return any(_listens(Path(f"/proc/{pid}/net/{table}"), GOSSIP_PORT) for table in ("tcp", "tcp6"))

    def restart_daemon(self, timeout: float = 90.0) -> "SecondEngine":
        """Stop this engine's dockerd and every process it left in its namespace, then start it again in the
        same namespace, data root and address: what an operator does for the gossip leak above."""
        st = self._load()
        if st is None:
            raise RuntimeFailure(f"second engine {self.name}: not started (no {self.state_file})")
        pid = self._pid() or st.pid
        if pid and _alive(pid):
            ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=120)
            _terminate(pid, 20.0)
        for p in _pids_in_netns(NETNS_DIR / st.netns):  # containerd and shims our dockerd started
            _terminate(p, 5.0)
        self.progress(f"second engine {self.name}: restarting dockerd")
        return self._launch(st, time.monotonic(), timeout)

    def stop(self) -> list[str]:
        """Remove everything `start` recorded; returns what was removed (one phrase each). Idempotent."""
        st = self._load()
        if st is None:
            return []
        done: list[str] = []
        created = set(st.created)
        pid = self._pid() or st.pid
        if pid and _alive(pid) and self.socket.exists():
            # Everything inside this engine is ours: leave the Swarm, remove containers, so the
            # daemon shuts down without waiting on them.
            if self.docker("info", "--format", "{{.Swarm.LocalNodeState}}", check=False, timeout=15).stdout.strip() \
                    not in ("", "inactive"):
                self.docker("swarm", "leave", "--force", check=False, timeout=60)
                done.append("left the Swarm")
            ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=120)
                done.append(f"removed {len(ids)} containers")
        if pid and _alive(pid):
            _terminate(pid, 20.0)
            done.append(f"stopped dockerd (pid {pid})")
        if "netns" in created:
            stragglers = _pids_in_netns(NETNS_DIR / st.netns)
            for p in stragglers:  # containerd, shims: started by our dockerd, found by namespace, ended by pid
                _terminate(p, 5.0)
            if stragglers:
                done.append(f"ended {len(stragglers)} leftover processes of the engine")
        for mnt in _mounts_under(Path(st.data_root), Path(st.run_dir)):
            self.runner.run(["umount", "-l", mnt], check=False)
            done.append(f"unmounted {mnt}")
        for cg in _CGROUP_ROOT.glob(f"*{st.cgroup_parent}") if st.cgroup_parent.strip("/") else []:
            for sub in sorted(cg.rglob("*"), key=lambda p: -len(p.parts)):
                if sub.is_dir():
                    _rmdir(sub)
            _rmdir(cg)
        if "netns" in created:
            if (NETNS_DIR / st.netns).exists():
                self.runner.run(["ip", "netns", "del", st.netns], check=False)
                done.append(f"deleted netns {st.netns}")
            if _link_exists(self.runner, st.veth):
                self.runner.run(["ip", "link", "del", st.veth], check=False)
        if "dirs" in created:
            for d in (Path(st.data_root), Path(st.run_dir)):
                if d.exists():
                    self.runner.run(["rm", "-rf", "--one-file-system", str(d)], check=False)
            done.append(f"removed {st.data_root} and {st.run_dir}")
            for parent in (Path(st.data_root).parent, Path(st.run_dir).parent):
                _rmdir(parent)  # only if no other engine lives there
        return done

    # -- state ------------------------------------------------------------------------------------
    def _save(self, st: EngineState, created: str | None = None) -> None:
        if created and created not in st.created:
            st.created.append(created)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(st), indent=1) + "\n")
        tmp.replace(self.state_file)

    def _load(self) -> EngineState | None:
        try:
            return EngineState(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _pid(self) -> int:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return 0


class SwarmPair:
    """The main Engine as Swarm manager (initialised here only if it was not in a Swarm) with `engine`
    joined as a worker. On exit: the worker leaves and its node entry is removed, and the docker_gwbridge
    joining made on it is removed; if this object initialised the Swarm, the manager leaves too and the
    docker_gwbridge the Swarm created there is removed.
    """

    def __init__(self, engine: SecondEngine, *, runner: Runner | None = None, main: Sequence[str] = ("docker",)):
        self.engine = engine
        self.runner = runner or engine.runner
        self.main = list(main)
        self.initialised = False
        self.gwbridge_before = True
        self.worker_gwbridge_before = True
        self.node_id = ""

    def _main(self, *args: str, check: bool = True, timeout: float = 60):
        return self.runner.run([*self.main, *args], check=check, timeout=timeout)

    def __enter__(self) -> "SwarmPair":
        state = self._main("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()
        self.gwbridge_before = "docker_gwbridge" in self._main("network", "ls", "--format", "{{.Name}}").stdout.split()
        self.worker_gwbridge_before = "docker_gwbridge" in self.engine.docker(
            "network", "ls", "--format", "{{.Name}}").stdout.split()
        if state == "inactive":
            self._main("swarm", "init", "--advertise-addr", self.engine.host_address)
            self.initialised = True
        elif state != "active":
            raise RuntimeFailure(f"main Engine's Swarm state is {state!r}")
        try:
            token = self._main("swarm", "join-token", "-q", "worker").stdout.strip()
            addr = self._main("info", "--format", "{{.Swarm.NodeAddr}}").stdout.strip()
            # as the backend joins (swarm.runtime.backends.multihost.joining): the token in the body of the Engine
            # API's POST /swarm/join on dial-stdio's stdin, never on a command line that `ps` shows
            res = self.runner.run(["docker", "-H", self.engine.host, "system", "dial-stdio"], check=False,
                                  timeout=120, input=join_request(token, f"{addr}:2377", self.engine.address),
                                  secrets=[token])
            why = join_refused(res.stdout) if res.ok else ((res.stderr or res.stdout).strip() or f"exit {res.returncode}")
            if why:
                raise RuntimeFailure(f"{self.engine.name}: joining the main Engine's Swarm failed: {why}")
            self.node_id = self.engine.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.engine.running():
            self.engine.docker("swarm", "leave", "--force", check=False, timeout=60)
            if not self.worker_gwbridge_before:  # the join made it; left behind, the next test's "before" differs
                deadline = time.monotonic() + 10  # retried while the ingress sandbox lets go of it (as release.py)
                while (not self.engine.docker("network", "rm", "docker_gwbridge", check=False, timeout=60).ok
                       and "docker_gwbridge" in self.engine.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
                       and time.monotonic() < deadline):
                    time.sleep(0.5)
        if self.node_id:
            self._main("node", "rm", "--force", self.node_id, check=False)
        if self.initialised:
            self._main("swarm", "leave", "--force", check=False)
            if not self.gwbridge_before:
                self._main("network", "rm", "docker_gwbridge", check=False)


# -- small helpers ------------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _terminate(pid: int, grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not _alive(pid):
                return
            time.sleep(0.1)


def _pids_in_netns(path: Path) -> list[int]:
    """Processes whose network namespace is the one bind-mounted at `path` (none if it is gone)."""
    try:
        target = os.stat(path).st_ino
    except OSError:
        return []
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino == target:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _mounts_under(*roots: Path) -> list[str]:
    """Mount points below any of `roots`, deepest first (so each unmount leaves its parent free)."""
    out = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    prefixes = [str(r).rstrip("/") + "/" for r in roots]
    for line in lines:
        parts = line.split()
        if len(parts) > 1:
            mnt = parts[1].replace("\\040", " ")
            if any(mnt.startswith(p) or mnt + "/" == p for p in prefixes):
                out.append(mnt)
    return sorted(set(out), key=lambda m: -m.count("/"))


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _listens(table: Path, port: int) -> bool:
    """Whether a /proc/<pid>/net/tcp{,6} table (that process's network namespace) holds a listener on `port`."""
    try:
        rows = table.read_text().splitlines()[1:]
    except OSError:
        return False
    for row in rows:
        cols = row.split()  # sl local_address rem_address st ...; ports in hex, state 0A = LISTEN
        if len(cols) > 3 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
            return True
    return False


def _link_exists(runner: Runner, name: str) -> bool:
    return runner.run(["ip", "link", "show", "dev", name], check=False, timeout=10).ok


def _cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a second Docker Engine in a network namespace (test host)")
    ap.add_argument("action", choices=["up", "down", "status"])
    ap.add_argument("--name", default=DEFAULT_NAME)
    ap.add_argument("--link", default=DEFAULT_LINK, help="a /30 (or larger): host .1, engine .2")
    args = ap.parse_args(argv)
    eng = SecondEngine(args.name, args.link, progress=lambda m: print(m, file=sys.stderr))
    try:
        if args.action == "up":
            eng.start()
            print(eng.host)
        elif args.action == "down":
            for line in eng.stop():
                print(line, file=sys.stderr)
        else:
            print(f"{eng.host} {'running' if eng.running() else 'not running'}")
    except (SpecError, RuntimeFailure, CommandError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(_cli())
