"""The iperf3 tool (the thesis's method): one iperf3 server and client process per directed flow, clients parked
on stopped servers and released at one instant; each flow's data start is inferred from its exit. Its parser is
parse.py, its client command plan.py, its runner runner.py."""
from __future__ import annotations

from typing import Any, Optional

from experiments.traffic.tools.base import Tool
from experiments.traffic.tools.iperf3.parse import parse_client_json
from experiments.traffic.tools.result import FlowResult


class Iperf3(Tool):
    name = "iperf3"
    summary = "one iperf3 server and client process per directed flow (the thesis's method)"
    uses_options = None
    stamps_start = False
    no_window_advice = "engine mux holds the start together on a loaded host"

    def owns_raw(self, doc: Any) -> bool:
        """iperf3's JSON verbatim, or whatever a failed client printed: every record no other tool marks."""
        return not (isinstance(doc, dict) and "engine" in doc)

    def read_raw(self, text: str, doc: Any, protocol: str, start: Optional[float], duration: float,
                 interval: float) -> FlowResult:
        return parse_client_json(text, start)
