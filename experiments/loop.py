"""The one run loop of every experiment type: a run context and one loop over swarms and tests.

Every type runs the same way: its tests, in order, on swarms brought up for them (tests that share a swarm,
e.g. the sizes of a sweep, share one bring-up), each test's rows written to the run folder as it ends
(experiments/store.py), progress and messages to the caller; a SIGTERM tears the swarm down like Ctrl-C, and a
resumable type runs only the tests tests.csv does not hold yet. A type says what differs in a `Loop`
(its tests, the swarm of a test, how one test runs, what to say); its run.py builds that and calls `run_tests`.
"""
from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Sequence

from experiments.store import ResultsStore
from swarm.runtime.backends import no_progress
from swarm.runtime.runner import Runner
from swarm.runtime.swarm import Swarm, raise_keyboard_interrupt
from swarm.spec.model import SwarmSpec

Message = Callable[[str], None]
Progress = Callable[[float, float, str], None]


def _quiet(_message: str) -> None:
    return None


def _no_progress(_done: float, _total: float, _what: str) -> None:
    return None


@dataclass(frozen=True)
class RunContext:
    """What a run of any type receives: the experiment, its run folder, the backend asked for on the command line
    (else the experiment's), where messages and progress go, and --abort-on-error. `runner`, `swarm_progress`,
    `owner` (the run's folder, recorded in each swarm's state for `--resume`) and `before_down` (e.g. the run's
    captures closing their files) are handed to every Swarm (tests pass a recording runner; the sweep's callers a
    bring-up progress)."""

    exp: Any
    store: ResultsStore
    backend: str | None = None
    message: Message = _quiet
    progress: Progress = _no_progress
    abort_on_error: bool = False
    runner: Runner | None = None
    swarm_progress: Callable[..., None] | None = None
    owner: str = ""
    before_down: tuple[Callable[[str], None], ...] = ()

    def swarm(self, spec: SwarmSpec) -> Swarm:
        """A Swarm for `spec` on the run's backend."""
        return Swarm(spec, backend=self.backend or getattr(self.exp, "backend", None), runner=self.runner,
                     progress=self.swarm_progress or no_progress, message=self.message, owner=self.owner,
                     before_down=self.before_down)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A kill (SIGTERM) during the block raises KeyboardInterrupt, so the swarm is torn down like on Ctrl-C."""
    previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _nothing(*_args: Any) -> None:
    return None


@dataclass
class Loop:
    """What a type plugs into `run_tests`.

    - tests: every test of the experiment, in order; each has a `test_id`.
    - swarm_of: the SwarmSpec a test runs on; share: the key of the swarm a test shares with others (tests with
      one key run on one bring-up, in the order of their first test), or None for a swarm per test.
    - run_test(swarm, test): one test on the swarm that is up; returns its tests.csv row (already written).
    - resumable: run only the tests tests.csv does not hold; progress then counts tests (done, total, what).
      A type whose progress is in seconds (resumable False) reports it from its run_test and `starting`.
    - on_up(swarm, test): once per bring-up, with its first test (host facts, the mesh's convergence); starting(test, i, n): before each
      test's bring-up; done_line(test, row): the progress line after a test; after(test, row): notes, abort checks.
    - settle: seconds to wait after each test; up: keyword arguments of Swarm.up.
    """

    tests: Sequence[Any]
    swarm_of: Callable[[Any], SwarmSpec]
    run_test: Callable[[Swarm, Any], dict]
    share: Callable[[Any], Hashable] | None = None
    resumable: bool = True
    on_up: Callable[[Swarm, Any], None] = _nothing
    starting: Callable[[Any, int, int], None] = _nothing
    done_line: Callable[[Any, dict], str] = lambda test, row: test.test_id
    after: Callable[[Any, dict], None] = _nothing
    settle: float = 0.0
    up: dict = field(default_factory=dict)
    announce_up: bool = True  # "bringing up N nodes (backend)" before each bring-up


def _groups(tests: Sequence[Any], share: Callable[[Any], Hashable] | None) -> list[list[Any]]:
    """Tests grouped by the swarm they run on, each group in the order of its first test."""
    if share is None:
        return [[t] for t in tests]
    groups: dict[Hashable, list[Any]] = {}
    for t in tests:
        groups.setdefault(share(t), []).append(t)
    return list(groups.values())


def run_tests(ctx: RunContext, loop: Loop) -> list[dict]:
    """Run every test of `loop` (those missing from the run folder, if resumable); returns the rows written."""
    with sigterm_as_interrupt():
        done = ctx.store.completed_tests() if loop.resumable else set()
        todo = [t for t in loop.tests if t.test_id not in done]
        total, finished = len(loop.tests), len(loop.tests) - len(todo)
        if loop.resumable:
            ctx.progress(finished, total, f"{len(todo)} tests to run")
        written: list[dict] = []
        for group in _groups(todo, loop.share):
            if not loop.resumable:
                loop.starting(group[0], finished + 1, total)
            swarm = ctx.swarm(loop.swarm_of(group[0]))
            if loop.announce_up:
                ctx.message(f"bringing up {len(swarm.nodes)} nodes ({swarm.backend.name})")
            swarm.up(**loop.up)
            try:
                loop.on_up(swarm, group[0])
                for test in group:
                    if loop.resumable:
                        ctx.progress(finished, total, test.test_id)
                    elif test is not group[0]:
                        loop.starting(test, finished + 1, total)
                    row = loop.run_test(swarm, test)
                    written.append(row)
                    finished += 1
                    if loop.resumable:
                        ctx.progress(finished, total, loop.done_line(test, row))
                    loop.after(test, row)
                    if loop.settle:
                        time.sleep(loop.settle)
            finally:
                swarm.down()
        return written
