"""What an experiment type is made of (see experiments/registry.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from swarm.spec.model import SwarmSpec

Message = Callable[[str], None]
Progress = Callable[[float, float, str], None]


@dataclass(frozen=True)
class ExperimentType:
    """One experiment type. `command` is the CLI command that runs it (`sweep` or `run`); `resumable`
    says whether `sweep --resume` can finish an interrupted run; `unit` labels its progress counts. Every swarm
an experiment needs is `first_swarm`, or, for an experiment with `sizes` and `swarm_spec(size)`, one per size."""

    name: str
    summary: str
    command: str
    from_dict: Callable[[Any, str], Any]
    first_swarm: Callable[[Any], SwarmSpec]
    run: Callable[..., Path]  # (exp, store, *, backend, message, progress, abort_on_error) -> run folder
    report: Callable[[Path], dict[str, Path]]
    resumable: bool = True
    unit: str = ""
    count_tests: Callable[[Any], int] | None = None  # how many tests (for `sweep --check`); None: not counted
