"""The multiplexing tool (`engine: mux`): one traffic process per node carries all of the node's flows
(flightsw/trafficd.py, or the Rust swarm-trafficd where it is built), released at one instant on the shared
clock, every flow's first send stamped. Its plans are plan.py, its records' reading result.py, its runner
runner.py."""
from __future__ import annotations

from typing import Any, Optional

from experiments.traffic.tools.base import Tool
from experiments.traffic.tools.mux.result import flow_result
from experiments.traffic.tools.result import FlowResult


class Mux(Tool):
    name = "mux"
    summary = "one multiplexing traffic process per node for all of its flows (swarms too big for iperf3)"
    uses_options = ("length", "interval")
    stamps_start = True

    def owns_raw(self, doc: Any) -> bool:
        """The record the runner writes per flow: the engines' send and receive records and the release."""
        return isinstance(doc, dict) and doc.get("engine") == self.name

    def read_raw(self, text: str, doc: Any, protocol: str, start: Optional[float], duration: float,
                 interval: float) -> FlowResult:
        return flow_result(protocol, doc.get("send"), doc.get("recv"), float(doc.get("release") or 0), duration,
                           interval)

    def raw_record(self, send: Optional[dict], recv: Optional[dict], release: float, sender_engine: str,
                   receiver_engine: str) -> dict:
        """What the runner writes under raw/ for one flow (read back by `read_raw`)."""
        return {"engine": self.name, "sender_engine": sender_engine, "receiver_engine": receiver_engine,
                "release": release, "send": send, "recv": recv}
