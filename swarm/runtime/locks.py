"""Host-wide locks: one for "check the subnets, then claim them", one per swarm name for its lifecycle.

Why: two `up`s started at the same moment both passed the overlap check before either had written its state,
so two swarms with the same subnets came up; a `down` during a compose `up` raced the
`up`'s own container creation and both failed, leaving containers. flock(2) locks are released by
the kernel when their holder dies, so a crashed `up` never leaves a lock behind. The lock files live in one
host-wide directory (not the workdir): namespaces and bridges are host-wide, whatever workdir made them. That
directory is checked before use and its files opened without following links (swarm.runtime.private): root
writes there, often under the world-writable /run/lock.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from swarm.errors import RuntimeFailure, SpecError
from swarm.runtime.private import open_private, private_dir

#: How long `down` waits for a cancelled `up` to roll back (a 100-node compose rollback takes about a minute).
CANCEL_WAIT_S = 600.0
RUN_LOCK = Path("/run/lock")  # world-writable (1777) on most hosts: where root keeps its swarm-emu folder
_held: dict[str, int] = {}  # lock path -> depth, so the same process may nest (an `up` rolling back calls down)


def lock_dir() -> Path:
    """$SWARM_LOCK_DIR, else /run/lock/swarm-emu (root), else a per-user directory under the temp directory;
    made 0700, and refused unless it is ours and private (swarm.runtime.private.private_dir)."""
    if os.environ.get("SWARM_LOCK_DIR"):
        d = Path(os.environ["SWARM_LOCK_DIR"])
    elif os.access(RUN_LOCK, os.W_OK):
        d = RUN_LOCK / "swarm-emu"
    else:
        d = Path(tempfile.gettempdir()) / f"swarm-emu-locks-{os.getuid()}"
    return private_dir(d, "lock folder")


@contextmanager
def _flock(path: Path, *, blocking: bool) -> Iterator[int | None]:
    """Yield the open fd holding an exclusive flock on `path`, or None when `blocking` is False and another
    process holds it. Nested use by the holder's own process yields at once (depth-counted)."""
    key = str(path)
    if _held.get(key):
        _held[key] += 1
        try:
            yield -1
        finally:
            _held[key] -= 1
        return
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield None
            return
        _held[key] = 1
        try:
            yield fd
        finally:
            _held.pop(key, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def host_lock() -> Iterator[None]:
    """Held while an `up` checks its subnets against the host and the other swarms and records its state: the
    check and the claim are one step for every `up` on this host."""
    with _flock(lock_dir() / "host.lock", blocking=True):
        yield


@contextmanager
def build_lock(what: str) -> Iterator[None]:
    """Held while this process builds `what` (the node image): `up`s started at once on a cold host (or a test
    suite's parallel workers) build it once, the others wait for it and then find it built."""
    with _flock(lock_dir() / f"build-{what}.lock", blocking=True):
        yield


def _holder(path: Path) -> tuple[str, int]:
    """(operation, pid) written by the lock's current holder; ("", 0) when unknown."""
    try:
        op, pid = path.read_text().split()[:2]
        return op, int(pid)
    except (OSError, ValueError):
        return "", 0


@contextmanager
def swarm_operation(name: str, operation: str, *, cancel_up: bool = False,
                    message: Callable[[str], None] = lambda _m: None, wait_s: float = CANCEL_WAIT_S) -> Iterator[None]:
    """One lifecycle operation (`up`, `down`) on swarm `name` at a time on this host.

    An `up` finding another operation in progress is refused (SpecError, nothing started). A `down`
    (`cancel_up`) finding an `up` in progress sends that process SIGTERM, which it turns into a rollback,
    then waits for the lock; finding another `down` it waits for it. The name was checked by the caller."""
    path = lock_dir() / f"swarm-{name}.lock"
    deadline = time.monotonic() + wait_s
    signalled = False
    while True:
        with _flock(path, blocking=False) as fd:
            if fd is not None:
                if fd >= 0:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{operation} {os.getpid()}\n".encode(), 0)
                yield
                return
            op, pid = _holder(path)
            if not cancel_up:
                raise SpecError(f"swarm {name!r}: `{op or 'another operation'}` in progress"
                                f"{f' (pid {pid})' if pid else ''}; wait for it, or run `swarm down {name}`")
            if op == "up" and pid and not signalled:
                message(f"swarm {name!r}: cancelling the `up` in progress (pid {pid}); it rolls back first")
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                signalled = True
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"swarm {name!r}: `{op or 'another operation'}` (pid {pid}) still holds "
                                 f"{path} after {wait_s:g} s")
        time.sleep(0.2)


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Held by the process running (or resuming) the experiment in `run_dir` for as long as it runs: a second
    process finding it held is refused (SpecError, nothing touched), so `--resume` never takes over the
    swarm of a run that is still alive. A crashed run's lock is gone with its process."""
    path = lock_dir() / f"run-{hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:20]}.lock"
    with _flock(path, blocking=False) as fd:
        if fd is None:
            _op, pid = _holder(path)
            raise SpecError(f"{run_dir}: a run is in progress in this folder{f' (pid {pid})' if pid else ''}; "
                            "wait for it to end or stop it first")
        if fd >= 0:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"run {os.getpid()}\n".encode(), 0)
        yield
