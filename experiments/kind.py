"""What an experiment type is made of (see experiments/registry.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from experiments.loop import Message, Progress, RunContext
from swarm.spec.model import SwarmSpec

__all__ = ["ExperimentType", "Message", "Progress", "RunContext"]


@dataclass(frozen=True)
class ExperimentType:
    """One experiment type. `command` is the CLI command that runs it (`sweep` or `run`); `resumable`
    says whether `sweep --resume` can finish an interrupted run; `unit` labels its progress counts. `swarms` lists
every distinct swarm the experiment brings up, first one first, so `--check` and the preflight validate each of
them before a run folder is made (each type says it: their models differ in what a swarm is made from)."""

    name: str
    summary: str
    command: str
    from_dict: Callable[[Any, str], Any]
    swarms: Callable[[Any], list[SwarmSpec]]
    run: Callable[[RunContext], Path]  # the run (experiments/loop.py: one loop for every type) -> run folder
    report: Callable[[Path], dict[str, Path]]
    resumable: bool = True
    unit: str = ""
    count_tests: Callable[[Any], int] | None = None  # how many tests (for `sweep --check`); None: not counted
    plan_check: Callable[[Any, bool], str] | None = None  # what `--check` adds about planning (e.g. a timeline's
    # time), given whether the swarm's link engine takes schedules; a SpecError when the engine could not run it
