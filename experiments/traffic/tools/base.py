"""What every traffic tool gives the sweep: one interface for checking an experiment's options and reading a
flow's raw record back into the tool-neutral FlowResult (pure, so the report can use it too).

A tool is a package under experiments/traffic/tools/: its `Tool` here (pure: the experiment model and the report
import it), its planning and parsing beside it, and its runner (`runner.py`, a `ToolRunner` subclass that runs
one test on a swarm that is up) registered in tools/runners.py. Nothing outside the package compares a tool's
name: what differs is asked of the tool (tests/unit/test_layering.py holds the rule).
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Optional

from experiments.traffic.tools.result import FlowResult


class Tool(ABC):
    """One traffic tool: its name (the experiment's `engine:` value), what it applies and how its records read."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: the experiment's `iperf3:` options it applies; None: all of them (the model refuses the others when set)
    uses_options: ClassVar[Optional[tuple[str, ...]]] = None
    #: True when each flow's first send is stamped by its sender; False when its data start is inferred
    stamps_start: ClassVar[bool] = False
    #: said on the console after a test without a concurrent window ("" when the tool has nothing to suggest)
    no_window_advice: ClassVar[str] = ""

    @abstractmethod
    def owns_raw(self, doc: Any) -> bool:
        """Whether a flow's raw record (its JSON, or None where it is not JSON) is one this tool wrote."""

    @abstractmethod
    def read_raw(self, text: str, doc: Any, protocol: str, start: Optional[float], duration: float,
                 interval: float) -> FlowResult:
        """The flow of a raw record this tool owns, with its intervals; `start` is the flow's data start from
        flows.csv (release or inferred start), used where the record itself does not say it."""

    @staticmethod
    def load(text: str) -> Any:
        """A raw record's JSON, or None where it is not JSON (a killed client's empty output)."""
        try:
            return json.loads(text)
        except ValueError:
            return None
