"""Running the live tests side by side (pytest-xdist) without two of them ever sharing what they must not.

- A test file is one unit of work (`--dist loadfile`): it runs whole on one worker, so its module-scoped
  bring-ups are made once and its tests, which share the file's subnets and swarm names (tests/alloc.py), run
  one after another. (An `xdist_group` marker added at collection does not reach xdist's own collection hook,
  which runs first: seen as one file's tests on three workers at once.)
- Two run-wide locks, each a writer-preferring reader-writer lock made of two flock(2)s (a gate in front keeps
  a waiting writer from being starved by a stream of readers; the kernel releases both if a worker dies):
  - `host`: a file marked `serial` (host-wide state: the second Docker Engine and the Docker Swarm, the host's
    iptables mangle table, the 32-node engine scale test) holds it exclusively, every other live file shared;
  - `quiet`: the kernel lab (tests/kernel_lab) holds it exclusively, every other live file shared. Its guests
    run under software emulation and its tests judge timing inside them (RTT spread, goodput within 5 %): a
    descheduled emulated CPU is a stall, and with the parallel files beside them (load 8-10) a jitter test saw
    44 ms of stdev for 5 ms, and beside the serial files (multi-host, host engine) its goodput test saw 0.943
    for [0.95, 1.05]; so it holds `host` exclusively too and runs alone.
  Unit test files hold `host` shared too: some `--check` specs against the host, whose subnets a serial file
  (multi-host, host engine) may hold; the subnets they and the examples name are never handed to a live file
  (tests/alloc.py reserves them).
  So a run is a first phase (the kernel lab's files and the serial files, each alone, one after another) and
  a parallel phase (every other file side by side).
- Work is handed out longest first (tests/durations.json: seconds per file from a measured run), the kernel lab
  and the serial files before the rest, so the longest does not start last and leave the other workers idle at
  the end. Unit tests need none of this and fill the workers' gaps.
Without xdist (`-p no:xdist`, `-n 0`) nothing changes: one process runs everything in collection order.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

import pytest

TESTS = Path(__file__).resolve().parent
LIVE = ("integration", "kernel_lab")
KERNEL_LAB = "kernel_lab"  # the folder that runs as one group
DURATIONS = TESTS / "durations.json"


def test_file(path: Path) -> str | None:
    """The file's path relative to tests/; None outside tests/."""
    try:
        return str(Path(path).resolve().relative_to(TESTS))
    except ValueError:
        return None


def live_file(path: Path) -> str | None:
    """The file's path relative to tests/ when it is a live test file, else None."""
    try:
        rel = Path(path).resolve().relative_to(TESTS)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in LIVE else None


def expected_seconds() -> dict[str, float]:
    """Seconds per live test file from the last measured run (tests/durations.json); {} when absent."""
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text())["files"].items()}
    except (OSError, ValueError, KeyError):
        return {}


def group_of(rel: str) -> str:
    """The group a live file is ordered and locked with: the kernel lab's files share one, every other file has
    its own."""
    return KERNEL_LAB if rel.startswith(KERNEL_LAB + "/") else rel


def order_key(item: pytest.Item, seconds: dict[str, float]) -> tuple:
    """The kernel lab and the serial files first, then live files longest first (unknown ones count as a minute),
    then unit tests; within a group the collection order is kept (the sort is stable)."""
    rel = live_file(item.path)
    if rel is None:
        return (2, 0.0, "", "")
    group = group_of(rel)
    first = group == KERNEL_LAB or item.get_closest_marker("serial") is not None
    total = sum(s for f, s in seconds.items() if group_of(f) == group) if group == KERNEL_LAB else seconds.get(rel, 60.0)
    return (0 if first else 1, -total, group, rel)


def pytest_collection_modifyitems(config, items):
    """Order the work: xdist (`--no-loadscope-reorder`) hands files out in this order."""
    seconds = expected_seconds()
    items.sort(key=lambda it: order_key(it, seconds))


def _run_dir() -> Path | None:
    """The folder of this run's lock, shared by its workers; None outside an xdist worker."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not uid:
        return None
    path = Path(tempfile.gettempdir()) / f"swarm-emu-tests-{uid}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def locks_for(rel: str, serial: bool) -> list[tuple[str, bool]]:
    """The run-wide locks a live file holds for its whole run, as (lock, exclusive), in the one order every file
    takes them (so no two files can wait on each other in a cycle)."""
    if group_of(rel) == KERNEL_LAB:  # alone: beside the serial files its goodput test saw 0.943 for [0.95, 1.05]
        return [("host", True), ("quiet", True)]
    if serial:
        return [("host", True)]
    if rel.startswith("unit/"):  # `--check`s specs against the host, whose subnets a serial file may hold
        return [("host", False)]
    return [("host", False), ("quiet", False)]


@contextmanager
def run_lock(folder: Path, name: str, exclusive: bool) -> Iterator[None]:
    """Hold the run-wide lock `name`, shared or exclusive (writer-preferring: see the module docstring)."""
    gate = os.open(folder / f"{name}.gate", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    main = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(main)
        os.close(gate)


@pytest.fixture(scope="module", autouse=True)
def _live_file_lock(request) -> Iterator[None]:
    """A live file holds its run-wide locks (locks_for) for its whole run. Module-scoped and autouse, so they are
    taken before the file's own module-scoped bring-ups (and the kernel lab's guest boot)."""
    folder = _run_dir()
    rel = test_file(request.node.path)
    if folder is None or rel is None:
        yield
        return
    with ExitStack() as stack:
        for name, exclusive in locks_for(rel, request.node.get_closest_marker("serial") is not None):
            stack.enter_context(run_lock(folder, name, exclusive))
        yield
