"""The ddsperf sweep (`type: ddsperf` experiments): DDS throughput and latency by sample size, rate and swarm size.

Debian's `ddsperf` (cyclonedds-tools 0.10.x, on the host and in the node image) runs in the nodes, bound to
the ISL interface (CYCLONEDDS_URI), on its own DDS domain (`domain_id`, default 1, so a reference app on
domain 0 is not disturbed). Each test is one measure on one swarm size, sample size, rate and repeat:
- throughput: the first node publishes (`pub RATE size S`, best effort unless `reliable`), every other node
  subscribes (`sub`); one row per subscriber: samples/s, Mb/s and samples lost, over the whole seconds the
  publisher ran (ddsperf's first and last per-second lines are partial and left out);
- latency: the first node pings (`ping RATE size S`, `inf`: the next ping when every pong came back), every
  other node answers (`pong`); one row per answering node: round-trip mean and percentiles.
ddsperf's output is kept verbatim under raw/<test>/<node>.txt as it is written; rows go to ddsperf.csv and
tests.csv of the results store (experiments.store.ResultsStore) when each test ends, so `--resume` runs only the
rest. Both ends are ddsperf (C, Cyclone 0.10); the Python binding of the reference app (Cyclone 11.0.1) is
never a party, so the two need not interoperate on the wire, and that was not tested. Checked here: a ddsperf
`sub` started in the app's domain next to running app nodes listed no app participant (ddsperf reports only
ddsperf peers), and the sweep uses its own domain anyway.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from experiments.store import host_facts
from experiments.traffic.model import ExperimentSpec
from swarm.caps import BackendTraits
from swarm.runtime.backends import swarm_dir
from swarm.runtime.swarm import Swarm, raise_keyboard_interrupt
from swarm.spec.apps import check_domain_id
from swarm.units import parse_duration, rate_hz
from swarm.spec.model import NodePlan, SwarmSpec, _check_name, read_yaml, swarm_from_template, unique, validate_document

SIZE_RE = re.compile(r"^(\d+)(k|kB|KiB|M|MB|MiB)?\Z")
RATE_RE = re.compile(r"^(inf|\d+(?:\.\d+)?(?:Hz|kHz)?)\Z")
MEASURES = ("throughput", "latency")


def parse_sample_size(value: Any) -> int:
    """ddsperf's size syntax ('64', '1k', '8KiB', '1MB') -> bytes; ValueError naming the value."""
    m = SIZE_RE.match(str(value).strip())
    if not m:
        raise ValueError(f"sample size {value!r}: expected bytes, e.g. 64, 1k, 8KiB or 1MB")
    mult = {None: 1, "k": 1024, "kB": 1000, "KiB": 1024, "M": 1048576, "MB": 1000000, "MiB": 1048576}[m.group(2)]
    size = int(m.group(1)) * mult
    if size != 0 and size < 12:
        raise ValueError(f"sample size {value!r}: ddsperf's KS topic needs 0 or at least 12 bytes")
    return size





class DdsperfExperiment(BaseModel):
    """A ddsperf sweep."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["ddsperf"]
    name: str
    sizes: list[int]  # swarm sizes
    sample_sizes: list[str] = Field(default_factory=lambda: ["1k"])
    rates: list[str] = Field(default_factory=lambda: ["1kHz"])
    measures: list[Literal["throughput", "latency"]] = Field(default_factory=lambda: list(MEASURES))
    duration: float = Field(5.0, ge=3, le=3600)  # seconds the publisher / pinger runs
    repeats: int = Field(1, ge=1, le=100)
    reliable: bool = False
    domain_id: int = 1
    settle: float = Field(0.5, ge=0, le=600)
    backend: Optional[Literal["compose", "netns", "swarm"]] = None
    swarm: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name("experiment", v)

    @field_validator("domain_id", mode="before")
    @classmethod
    def _domain(cls, v):
        return check_domain_id(v)

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: list[int]) -> list[int]:
        return ExperimentSpec._sizes(v)  # the iperf3 sweep's rule for swarm sizes

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)  # `5s`, `2min` or plain seconds, like every other experiment's duration

    @field_validator("sample_sizes", mode="before")
    @classmethod
    def _samples(cls, v: Any) -> list[str]:
        if not isinstance(v, list):
            raise ValueError(f"sample_sizes {v!r}: expected a list, e.g. [64, 1k, 8KiB]")
        v = [str(s) if isinstance(s, int) and not isinstance(s, bool) else s for s in v]  # YAML reads 64 as int
        if not all(isinstance(s, str) for s in v):
            raise ValueError("sample_sizes: each is bytes, e.g. 64, 1k, 8KiB or 1MB")
        if not v:
            raise ValueError("sample_sizes: give at least one")
        for s in v:
            parse_sample_size(s)
        return unique("sample_sizes", [str(s) for s in v], key=parse_sample_size)

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("rates: give at least one, e.g. [100Hz, 1kHz, inf]")
        for r in v:
            if not RATE_RE.match(str(r)) or rate_hz(r) <= 0:
                raise ValueError(f"rate {r!r}: expected a positive rate like 100Hz, 2kHz or inf")
        return unique("rates", [str(r) for r in v], key=rate_hz)

    @model_validator(mode="after")
    def _consistent(self) -> "DdsperfExperiment":
        if not self.measures:
            raise ValueError("measures: give throughput, latency or both")
        for key in ("name", "nodes", "node_list", "groups", "apps"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the sweep")
        self.swarm_spec(max(self.sizes))
        return self

    def swarm_spec(self, size: int) -> SwarmSpec:
        """The swarm of `size` nodes the tests of that size run on."""
        return swarm_from_template(self.swarm, self.name, f"{self.name}-n{size}", size, self.backend)


def experiment_from_dict(data: Any, source: str = "") -> DdsperfExperiment:
    return validate_document(DdsperfExperiment, data, source, "experiment")


# --------------------------------------------------------------------------------------------- planning
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
_LINE = r"^\[(?P<pid>\d+)\]\s+(?P<t>[\d.]+)\s+"
SUB_RE = re.compile(_LINE + r"size (?P<size>\d+) total (?P<total>\d+) lost (?P<lost_total>\d+) delta (?P<delta>\d+) "
                    r"lost (?P<lost>\d+) rate (?P<ksps>[\d.]+) kS/s (?P<mbps>[\d.]+) Mb/s")
PING_RE = re.compile(_LINE + r"(?P<peer>\S+) size (?P<size>\d+) mean (?P<mean>[\d.]+)us min (?P<min>[\d.]+)us "
                     r"50% (?P<p50>[\d.]+)us 90% (?P<p90>[\d.]+)us 99% (?P<p99>[\d.]+)us max (?P<max>[\d.]+)us "
                     r"cnt (?P<cnt>\d+)")


def parse_sub(text: str) -> dict[str, float]:
    """A subscriber's per-second lines -> samples_per_s, mbps (mean over whole seconds), received, lost,
    lost_percent, seconds (whole seconds used). The first and last lines with data are partial seconds and
    are left out when there are at least three. NaN figures when there was no data."""
    lines = [m.groupdict() for m in map(SUB_RE.match, text.splitlines()) if m]
    lines = [ln for ln in lines if int(ln["delta"]) or int(ln["lost"])]
    received = sum(int(ln["delta"]) for ln in lines)
    lost = sum(int(ln["lost"]) for ln in lines)
    whole = lines[1:-1] if len(lines) >= 3 else lines
    n = len(whole)
    return {"samples_per_s": sum(float(ln["ksps"]) * 1000 for ln in whole) / n if n else math.nan,
            "mbps": sum(float(ln["mbps"]) for ln in whole) / n if n else math.nan,
            "received": received, "lost": lost,
            "lost_percent": 100 * lost / (received + lost) if received + lost else math.nan, "seconds": n}


def parse_ping(text: str) -> dict[str, dict[str, float]]:
    """A pinger's per-second lines -> per answering peer: count, mean/min/max round trip (us) and p50/p90/p99
    (the per-second percentiles averaged, weighted by count; the first second, with discovery, left out
    when there are more)."""
    by_peer: dict[str, list[dict]] = {}
    for m in map(PING_RE.match, text.splitlines()):
        if m:
            by_peer.setdefault(m["peer"], []).append(m.groupdict())
    out = {}
    for peer, lines in by_peer.items():
        use = lines[1:] if len(lines) > 1 else lines
        cnt = sum(int(ln["cnt"]) for ln in use)
        if not cnt:
            continue
        avg = {k: sum(float(ln[k]) * int(ln["cnt"]) for ln in use) / cnt for k in ("mean", "p50", "p90", "p99")}
        out[peer] = {"count": cnt, "mean_us": avg["mean"], "min_us": min(float(ln["min"]) for ln in use),
                     "p50_us": avg["p50"], "p90_us": avg["p90"], "p99_us": avg["p99"],
                     "max_us": max(float(ln["max"]) for ln in use)}
    return out


PARTICIPANT_RE = re.compile(r"^\[(\d+)\] participant (\S+): new \(self\)", re.M)


def participant_name(text: str) -> str | None:
    """The name ddsperf gave its own participant (host:pid), which pingers use to name the pong."""
    m = PARTICIPANT_RE.search(text)
    return m.group(2) if m else None


# -------------------------------------------------------------------------------------------- executing
ROW_COLUMNS = ["run_id", "test_id", "size", "measure", "sample_size", "sample_bytes", "rate", "repeat", "sender", "node",
               "ok", "error", "samples_per_s", "mbps", "received", "lost", "lost_percent", "seconds",
               "count", "mean_us", "min_us", "p50_us", "p90_us", "p99_us", "max_us"]
TEST_COLUMNS = ["run_id", "test_id", "size", "measure", "sample_size", "rate", "repeat", "nodes_ok", "receivers",
                "sender_rc", "wall_s"]


def run_test(swarm, exp: DdsperfExperiment, test: DdsTest, raw_dir: Path, run_id: str) -> tuple[list[dict], dict]:
    """Run one test on a swarm that is up; returns (rows per receiver, the test row)."""
    started = time.monotonic()
    raw_dir.mkdir(parents=True, exist_ok=True)
    sender, receivers = swarm.nodes[0], swarm.nodes[1:test.size]
    prefix = lambda n: swarm.backend.exec_prefix(swarm.name, n.name)  # noqa: E731
    unicast = [n.isl_ip for n in swarm.nodes[:test.size]] if not swarm.backend.traits.isl_multicast else None
    pidfile = lambda n: pid_file(swarm.backend.traits, swarm.workdir, swarm.name, n.name)  # noqa: E731
    procs = {n.name: swarm.runner.start(prefix(n) + remembering_pid(pidfile(n), ddsperf_argv(exp, test, n, False, unicast)),
                                        stdout_path=str(raw_dir / f"{n.name}.txt")) for n in receivers}
    timeout = initwait(test.size) + exp.duration + 30
    res = swarm.runner.run(prefix(sender) + ddsperf_argv(exp, test, sender, True, unicast), check=False,
                           timeout=timeout)
    (raw_dir / f"{sender.name}.txt").write_text(res.stdout + res.stderr)
    time.sleep(1.5)  # the subscribers' last per-second line
    # Stop the receivers inside their nodes (ddsperf ends cleanly on SIGTERM and flushes): signalling the local
    # `docker exec` would leave them running in the container, where the next test would find them as peers.
    for n in receivers:
        swarm.runner.run(prefix(n) + stop_remembered(pidfile(n)), check=False, timeout=30)
    for proc in procs.values():
        try:
            proc.wait(timeout=15)
        except Exception:
            proc.kill()
            proc.wait()
    base = {"run_id": run_id, "test_id": test.test_id, "size": test.size, "measure": test.measure,
            "sample_size": test.sample_size, "sample_bytes": parse_sample_size(test.sample_size), "rate": test.rate,
            "repeat": test.repeat, "sender": sender.name}
    sender_error = "" if res.ok else f"sender ddsperf exited {res.returncode}: {(res.stdout + res.stderr).strip()[-200:]}"
    pings = parse_ping(res.stdout) if test.measure == "latency" else {}
    rows = []
    for n in receivers:
        text = (raw_dir / f"{n.name}.txt").read_text(errors="replace")
        if test.measure == "throughput":
            fig = parse_sub(text)
            ok = fig["received"] > 0
        else:
            fig = pings.get(participant_name(text) or "?", {})
            ok = bool(fig)
        error = "" if ok else (sender_error or f"no {'samples' if test.measure == 'throughput' else 'pongs'} measured")
        rows.append({**base, "node": n.name, "ok": ok, "error": error, **fig})
    test_row = {**base, "nodes_ok": sum(r["ok"] for r in rows), "receivers": len(rows), "sender_rc": res.returncode,
                "wall_s": round(time.monotonic() - started, 3)}
    return rows, test_row


def run_ddsperf_sweep(exp: DdsperfExperiment, store, *, backend: str | None = None,
                      progress: Callable[[int, int, str], None] = lambda d, t, w: None,
                      message: Callable[[str], None] = lambda m: None) -> list[dict]:
    """Run every test of `exp` missing from `store` (experiments.store.ResultsStore); returns the test rows written."""

    previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    try:
        done = store.completed_tests()
        tests = plan_tests(exp)
        todo = [t for t in tests if t.test_id not in done]
        finished = len(tests) - len(todo)
        written = []
        progress(finished, len(tests), f"{len(todo)} tests to run")
        for size in sorted({t.size for t in todo}, key=exp.sizes.index):
            swarm = Swarm(exp.swarm_spec(size), backend=backend or exp.backend, message=message)
            message(f"bringing up {size} nodes ({swarm.backend.name})")
            swarm.up()
            try:
                if "backend" not in json.loads((store.dir / "host.json").read_text() or "{}"):
                    (store.dir / "host.json").write_text(json.dumps(host_facts(swarm), indent=1))
                for test in [t for t in todo if t.size == size]:
                    progress(finished, len(tests), test.test_id)
                    rows, test_row = run_test(swarm, exp, test, store.dir / "raw" / test.test_id, store.run_id)
                    store.append("ddsperf.csv", ROW_COLUMNS, rows)
                    store.append("tests.csv", TEST_COLUMNS, [test_row])
                    written.append(test_row)
                    finished += 1
                    progress(finished, len(tests), f"{test.test_id}: {test_row['nodes_ok']}/{test_row['receivers']} "
                                                   f"receivers measured")
                    if exp.settle:
                        time.sleep(exp.settle)
            finally:
                swarm.down()
        return written
    finally:
        signal.signal(signal.SIGTERM, previous)


def load_ddsperf(path: str | Path) -> DdsperfExperiment:
    """Read and validate a ddsperf experiment file."""
    return experiment_from_dict(read_yaml(path, "experiment"), str(path))
