"""The ddsperf sweep's pure plan: the tests, each node's ddsperf argv and Cyclone configuration, where pids are kept."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


from swarm.caps import BackendTraits
from swarm.runtime.backends import swarm_dir
from swarm.spec.model import NodePlan

from experiments.ddsperf.model import DdsperfExperiment


@dataclass(frozen=True)
class DdsTest:
    """One test: a measure on one swarm size, sample size, rate and repeat."""

    test_id: str
    size: int
    measure: str
    sample_size: str
    rate: str
    repeat: int


def plan_tests(exp: DdsperfExperiment) -> list[DdsTest]:
    """Every test, size-major (one bring-up per size), then measure, sample size, rate, repeat."""
    return [DdsTest(f"n{n:03d}-{m}-{s}-{r}-r{k}", n, m, s, r, k)
            for n in exp.sizes for m in exp.measures for s in exp.sample_sizes for r in exp.rates
            for k in range(1, exp.repeats + 1)]


def cyclone_uri(isl_ip: str, unicast_peers: list[str] | None = None) -> str:
    """Cyclone DDS configuration binding it to the interface holding `isl_ip`; with `unicast_peers`, multicast is
    off and participants are discovered by unicast to those addresses (the node software, which runs without
    this package, has its own copy in flightsw/swarm_app.py)."""
    general = f"<Interfaces><NetworkInterface address=\"{isl_ip}\"/></Interfaces>"
    discovery = ""
    if unicast_peers is not None:
        general += "<AllowMulticast>false</AllowMulticast>"
        peers = "".join(f"<Peer address=\"{ip}\"/>" for ip in unicast_peers)
        discovery = f"<Discovery><ParticipantIndex>auto</ParticipantIndex><Peers>{peers}</Peers></Discovery>"
    return f"<CycloneDDS><Domain id=\"any\"><General>{general}</General>{discovery}</Domain></CycloneDDS>"


def initwait(size: int) -> float:
    """Seconds the sender waits for every other node's ddsperf to be discovered."""
    return 10 + 0.2 * size


def ddsperf_argv(exp: DdsperfExperiment, test: DdsTest, node: NodePlan, sender: bool,
                 unicast_peers: list[str] | None = None) -> list[str]:
    """The ddsperf command one node runs in `test` (pure). Receivers run until stopped (bounded by -D).
    `unicast_peers`: discover these addresses by unicast, multicast off (the compose backend's internal
    Docker network drops multicast)."""
    uri = cyclone_uri(node.isl_ip, unicast_peers)
    argv = ["env", f"CYCLONEDDS_URI={uri}", "ddsperf", "-i", str(exp.domain_id)]
    if not exp.reliable and test.measure == "throughput":
        argv.append("-u")
    if not sender:
        limit = initwait(test.size) + exp.duration + 10
        return argv + ["-D", f"{limit:g}", "sub" if test.measure == "throughput" else "pong"]
    argv += ["-D", f"{exp.duration:g}", f"-Qminmatch:{test.size - 1}", f"-Qinitwait:{initwait(test.size):g}"]
    mode = "pub" if test.measure == "throughput" else "ping"
    rate = [] if test.rate == "inf" and mode == "ping" else [test.rate]
    return argv + [mode, *rate, "size", test.sample_size]


def remembering_pid(pidfile: str, argv: list[str]) -> list[str]:
    """`argv` run through a shell that first writes its pid (then exec's it) to `pidfile` inside the node."""
    return ["sh", "-c", 'mkdir -p "$(dirname "$0")" && echo $$ > "$0"; exec "$@"', pidfile, *argv]


def pid_file(backend: BackendTraits, workdir: Path, swarm: str, node: str) -> str:
    """Where a receiver's pid is kept, never in a world-writable place (whose file anyone could replace
    before we `kill "$(cat file)"` as root): a namespace shares the host's file system, so the node's
    directory under the swarm's own 0700 state directory; a container, its own /run."""
    if backend.containers:
        return "/run/swarm-emu-ddsperf.pid"
    root = swarm_dir(workdir, swarm)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    return str(root / "nodes" / node / "ddsperf.pid")


def stop_remembered(pidfile: str) -> list[str]:
    """SIGTERM the process `remembering_pid` started (if it still runs) and remove its pid file."""
    return ["sh", "-c", 'kill -TERM "$(cat "$0")" 2>/dev/null; rm -f "$0"', pidfile]


# ---------------------------------------------------------------------------------------------- parsing
