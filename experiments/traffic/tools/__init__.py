"""Traffic tools behind one interface (experiments.traffic.tools.base.Tool), in an explicit registry.

The experiment's `engine:` names an entry (the model takes its choices from TOOLS); the sweep runs a test with the
tool's runner (tools/runners.py, RUNNERS); every tool's flows come to the same FlowResult (tools/result.py), so
skew, concurrent window, tables and plots are computed once for all tools, and the report reads a flow's raw
record through `read_flow` without knowing which tool wrote it. Nothing outside this package compares a tool's
name (tests/unit/test_layering.py holds the rule).
"""
from __future__ import annotations

from typing import Optional

from experiments.traffic.tools.base import Tool
from experiments.traffic.tools.iperf3 import Iperf3
from experiments.traffic.tools.mux import Mux
from experiments.traffic.tools.result import FlowResult, Interval

TOOLS: dict[str, Tool] = {t.name: t for t in (Iperf3(), Mux())}
DEFAULT_TOOL = Iperf3.name


def get_tool(name: str) -> Tool:
    """The tool called `name`; ValueError naming the value and the known tools for an unknown one (the model
    puts the field, `engine`, in front)."""
    try:
        return TOOLS[name]
    except KeyError:
        raise ValueError(f"unknown traffic tool {name!r} (known: {', '.join(TOOLS)})") from None


def read_flow(text: str, protocol: str, start: Optional[float], duration: float, interval: float) -> FlowResult:
    """One flow's FlowResult, with intervals, from its raw record under raw/ (whichever tool wrote it)."""
    doc = Tool.load(text)
    tool = next((t for t in TOOLS.values() if t.owns_raw(doc)), None)
    if tool is None:
        return FlowResult(protocol=protocol, error=f"raw record of no known traffic tool (known: {', '.join(TOOLS)})")
    return tool.read_raw(text, doc, protocol, start, duration, interval)


__all__ = ["DEFAULT_TOOL", "FlowResult", "Interval", "TOOLS", "Tool", "get_tool", "read_flow"]
