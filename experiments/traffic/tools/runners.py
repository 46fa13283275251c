"""Each traffic tool's runner, by the tool's name (the runtime half of the registry in tools/__init__.py, as
netem/engines/drivers/ is to netem/engines/: the report imports the tools, never their runners)."""
from __future__ import annotations

from experiments.traffic.tools.iperf3.runner import Iperf3Runner
from experiments.traffic.tools.mux.runner import MuxRunner
from experiments.traffic.tools.runner import ToolRunner

RUNNERS: dict[str, type[ToolRunner]] = {r.tool.name: r for r in (Iperf3Runner, MuxRunner)}
