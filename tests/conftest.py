"""Shared fixtures: capability probes that skip integration tests with a reason, or fail under CI.

Under CI (CI=true) a missing capability the CI machine is known to have (Docker, root, iperf3, nftables,
netns) fails the test instead of skipping it, so a broken install step cannot hide behind skips.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from swarm.runtime.probe import capabilities

# tests/parallel.py: live files grouped per worker, ordered longest first, serial files alone
from parallel import _live_file_lock, pytest_collection_modifyitems  # noqa: F401

CI = os.environ.get("CI", "").lower() == "true"


def pytest_configure(config):
    """Ctrl-C (SIGINT) handled by Python in this process, and so at its default in every child a test starts: a
    shell that starts the run in the background without job control (`make test &` in a script, as a CI runner
    may) hands it down ignored, and children inherit that, so a test's SIGINT to `swarm events`, `capture` or
    `view` would be ignored and the test would time out (seen: three observe tests in a backgrounded run)."""
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
REPO = Path(__file__).resolve().parents[1]
KNOWN_ON_CI = {"docker", "root", "netns", "iperf3", "nftables", "kernel_lab"}


def require(feature: str, present: bool, reason: str) -> None:
    """Skip (or under CI fail, for features CI has) when `present` is false."""
    if present:
        return
    if CI and feature in KNOWN_ON_CI:
        pytest.fail(f"CI machine lacks {feature}: {reason}")
    pytest.skip(f"{feature} unavailable: {reason}")


@pytest.fixture(scope="session")
def caps():
    return capabilities()


@pytest.fixture
def need_docker(caps):
    require("docker", caps.docker and bool(caps.compose), "no Docker daemon or Compose CLI answered")


@pytest.fixture
def need_netns(caps):
    require("root", caps.root, "not running as root")
    require("netns", caps.netns, "cannot create network namespaces")


@pytest.fixture
def need_iperf3(caps):
    require("iperf3", bool(caps.iperf3_version), "iperf3 not installed")


@pytest.fixture
def need_dtn7(need_netns):
    """dtn7-rs built by `make setup`; on CI its absence is a failure, not a skip."""
    require_dtn7()


@pytest.fixture(scope="module")
def need_hardy():
    """The Hardy node program (swarm-hardy) built by `make setup`; on CI its absence is a failure, not a skip."""
    from swarm.dtn.agents.hardy import Hardy
    from swarm.runtime.dtn_image import _cache_root

    if not (_cache_root(Hardy.install) / "bin" / "swarm-hardy").is_file():
        reason = "swarm-hardy not built (make setup builds it into ~/.cache/swarm-emu/hardy-target)"
        if CI:
            pytest.fail(f"CI machine lacks swarm-hardy: {reason}")
        pytest.skip(reason)


def require_dtn7() -> None:
    """Skip (fail under CI) unless dtn7-rs is built (`make setup`); for module-scoped fixtures, which cannot use
    the function-scoped `need_dtn7`."""
    from swarm.dtn.agents.dtn7 import Dtn7
    from swarm.runtime.dtn_image import _cache_root
    if not any(_cache_root(Dtn7.install).glob("dtn7-*/.complete")):
        reason = "dtn7-rs not built (make setup builds it with cargo into ~/.cache/swarm-emu/dtn7)"
        if CI:
            pytest.fail(f"CI machine lacks dtn7: {reason}")
        pytest.skip(reason)


def swarm_namespaces(prefix: str) -> list[str]:
    """The host's network namespaces of swarms whose name starts with `prefix`."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"swarm-emu_{prefix}")]


def csv_rows(path: Path) -> list[dict]:
    """The rows of a results CSV as dicts."""
    import csv
    with path.open() as f:
        return list(csv.DictReader(f))


def run_dtn_doc(doc: dict, tmp_path: Path) -> Path:
    """Run a `type: dtn` experiment document into tmp_path/results; its run folder. Asserts that the swarm's
    namespaces are gone afterwards (the run tears its swarms down)."""
    from experiments.dtn.model import experiment_from_dict
    from experiments.dtn.run import run_dtn_experiment
    from experiments.store import ResultsStore, host_facts
    exp = experiment_from_dict(doc, str(tmp_path / "exp.yaml"))
    store = ResultsStore.create(tmp_path / "results", exp, host_facts())
    run_dtn_experiment(exp, store, message=print)
    assert not swarm_namespaces(doc["name"]), "the test's namespaces outlived it"
    return store.dir


def assert_run_refused(exp: dict, tmp_path: Path, message: str) -> None:
    """`swarm run` of the experiment document `exp` exits 2 with one line containing `message`, and creates
    neither a results folder nor a namespace of the experiment's swarm."""
    import json
    import os
    import sys
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(exp))
    res = subprocess.run([sys.executable, "-m", "swarm", "run", str(path), "--results", str(tmp_path / "results")],
                         capture_output=True, text=True, env={**os.environ, "SWARM_WORKDIR": str(REPO)}, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not (tmp_path / "results").exists() and not swarm_namespaces(exp["name"])


def interruptible() -> None:
    """Popen preexec_fn for a child the test will interrupt as Ctrl-C does: SIGINT back to its default. A shell
    that starts a job in the background without job control (`cmd &` in a script, as a CI runner may) has it
    ignored, the child inherits that, and Python then never raises KeyboardInterrupt."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def golden(name: str, text: str) -> str:
    """The golden file's text; with UPDATE_GOLDEN=1 it is (re)written from `text` first."""
    path = REPO / "tests" / "golden" / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    return path.read_text()


@pytest.fixture(scope="module")
def kernel_lab(request):
    """A guest running Debian's generic kernel under qemu (tests/kernel_lab/klab.py): real sch_netem and
    batman-adv on hosts whose kernel lacks them. One boot per test module; the host's root filesystem is the
    guest's (read-only, under a tmpfs overlay), so the project and its venv run inside as they are. Skipped with
    the reason where qemu, kmod or the Debian archive are missing; under CI=true that fails instead."""
    sys.path.insert(0, str(REPO / "tests" / "kernel_lab"))
    import klab

    require("kernel_lab", os.geteuid() == 0, "not root (the guest's root is the host's, shared over 9p)")
    require("kernel_lab", shutil.which(klab.QEMU) is not None,
            f"{klab.QEMU} not installed (make setup installs Debian's qemu-system-x86)")
    try:
        image = klab.build()
    except klab.LabUnavailable as exc:
        require("kernel_lab", False, str(exc))
    # the guest imports the project from the host's tree: compile it here, not under emulation in every guest
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(REPO / p) for p in
                    ("swarm", "netem", "compose", "experiments", "analysis", "flightsw", "tests/kernel_lab"))],
                   capture_output=True, check=False)
    started = time.monotonic()
    lab = klab.KernelLab(image).boot()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line(f"kernel-lab: {lab.describe()}")
    try:
        yield lab
    finally:
        lab.close()
        if reporter:
            reporter.write_line(f"kernel-lab: {request.module.__name__}: guest up {time.monotonic() - started:.0f} s "
                                f"in all (boot {lab.boot_s:.1f} s)")


def require_netns_engine():
    """Skip (fail under CI) unless the userspace link engine can run on netns here: root, namespaces, NFQUEUE and
    a built swarm-linkd; returns the host's capabilities."""
    from swarm.runtime.probe import capabilities

    caps = capabilities()
    require("root", caps.root, "not running as root")
    require("netns", caps.netns, "cannot create network namespaces")
    require("nfqueue", caps.nfqueue, "iptables NFQUEUE target refused")
    require("swarm-linkd", bool(caps.linkd), "swarm-linkd not built (make setup)")
    return caps


def wait_until(check, timeout: float, what: str, every: float = 0.2):
    """Poll `check()` until it returns something truthy (returned) or `timeout` s pass (then fail naming `what`
    and the last value): a wait for a state, never a fixed sleep that a loaded host can outrun."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s (last: {got!r})"
        time.sleep(every)


def listening(swarm, node: str, port: int) -> bool:
    """Whether a TCP socket listens on `port` in `node` (e.g. an iperf3 server started with -D)."""
    out = swarm.exec(node, ["ss", "-Hltn", f"sport = :{port}"], check=False).stdout
    return bool(out.strip())


def isl_rtts(swarm, a: str, b: str) -> list[float]:
    """Round-trip times (ms) of 3 pings, 0.2 s apart, from netns node `a` to `b`'s ISL address; [] when cut."""
    from swarm.runtime.backends.netns.backend import node_ns

    res = subprocess.run(["ip", "netns", "exec", node_ns(swarm.name, a), "ping", "-n", "-c", "3", "-i", "0.2",
                          "-W", "1", swarm.node(b).isl_ip], capture_output=True, text=True, timeout=60)
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", res.stdout)]


def reachable(swarm, a: str, b: str) -> bool:
    """Whether node `a` reaches `b`'s ISL address (2 pings, 0.2 s apart)."""
    return swarm.exec(a, ["ping", "-c", "2", "-i", "0.2", "-W", "1", "-q", swarm.node(b).isl_ip], check=False).ok


def assert_links_in_plans_last_state(swarm, plan) -> list[tuple[str, str]]:
    """Pings agree with an orbit plan's last state: its up pairs reach each other, its down pairs (and three
    pairs never up) do not; returns the down pairs checked."""
    end = plan.timeline[plan.timeline["t_end"] == plan.duration]
    up_pairs = [(r.a, r.b) for r in end.itertuples() if r.up]
    down_pairs = [(r.a, r.b) for r in end.itertuples() if not r.up] + plan.never_up()[:3]
    assert up_pairs and down_pairs
    for a, b in up_pairs:
        assert reachable(swarm, a, b), f"{a}-{b} is up in the plan's last state"
    for a, b in down_pairs:
        assert not reachable(swarm, a, b), f"{a}-{b} is down in the plan's last state"
    return down_pairs


@contextmanager
def swarm_up(doc: dict) -> Iterator:
    """The swarm of spec `doc` up (after a `down` of any leftover of the same name); down again on exit."""
    from swarm.runtime.swarm import Swarm
    from swarm.spec.model import spec_from_dict

    swarm = Swarm(spec_from_dict(doc), workdir=REPO)
    swarm.down()
    swarm.up()
    try:
        yield swarm
    finally:
        swarm.down()


def user_build(variable: str, program: str, skip_reason: str) -> str:
    """The install prefix a test of a stack the user builds (ION, µD3TN) runs on: skipped with `skip_reason` when
    `variable` is unset, failed when the prefix lacks `program` (a wrong path is no reason to skip)."""
    prefix = os.environ.get(variable, "")
    if not prefix:
        pytest.skip(skip_reason)
    if not (Path(prefix) / program).is_file():
        pytest.fail(f"{variable}={prefix!r} has no {program}")
    return prefix


def swarm_containers(name: str) -> list[str]:
    """Ids of every container (running or not) that carries swarm `name`'s label."""
    res = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=io.swarm-emu.swarm={name}"],
                         capture_output=True, text=True)
    return res.stdout.split()
