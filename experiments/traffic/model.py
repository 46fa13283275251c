"""Experiment spec (YAML, validated) and the pure planners of a sweep: tests and flows.

A sweep runs every combination of swarm size x protocol x offered UDP rate x repeat. For each test the
traffic pattern gives the directed flows; every flow gets its own server port on its destination (as in the
thesis: one server per directed connection), port = base_port + source index - 1. Which traffic tool carries
the flows (`engine:`) is an entry of experiments/traffic/tools/; its own commands are planned there.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from swarm.units import parse_rate, rate_label
from swarm.errors import SpecError
from swarm.units import parse_duration
from experiments.timeline import FaultEvent, check_timeline
from netem.spec.links import LinksSpec
from experiments.base import ExperimentModel
from experiments.traffic.tools import DEFAULT_TOOL, get_tool
from swarm.spec.documents import read_yaml, unique, validate_document
from swarm.spec.model import MAX_NODES, NodePlan, SwarmSpec, swarm_from_template
from swarm.spec.validation import Strict

PATTERNS = ("full-mesh", "ring", "pairs", "one-to-all")
class IperfOptions(Strict):
    """iperf3 client options applied to every flow."""

    length: Optional[str] = None  # -l, e.g. 1400 or 128K
    window: Optional[str] = None  # -w, socket buffer
    parallel: int = Field(1, ge=1, le=128)  # -P
    interval: float = Field(1.0, ge=0.1, le=60)  # -i, seconds between interval reports
    # --pacing-timer, microseconds: iperf3 wakes every 1000 us per flow by default, which alone can
    # saturate a small host running hundreds of flows; a larger value sends in larger bursts.
    pacing_timer_us: Optional[int] = Field(None, ge=1, le=10_000_000)

    @field_validator("length", "window")
    @classmethod
    def _size(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.fullmatch(r"[1-9][0-9]*[KMG]?", str(v)):
            raise ValueError(f"{v!r}: expected a size like 1400, 128K or 4M")
        return None if v is None else str(v)


class ExperimentSpec(ExperimentModel):
    """A bandwidth/loss sweep."""

    type: Literal["traffic"] = "traffic"  # bandwidth/loss sweep; `ddsperf` and `app` are experiments.ddsperf / experiments.app
    name: str
    sizes: list[int]
    protocols: list[Literal["tcp", "udp"]]
    rates: list[str] = Field(default_factory=list)
    duration: float = 10.0
    repeats: int = Field(1, ge=1, le=1000)
    pattern: Literal["full-mesh", "ring", "pairs", "one-to-all"] = "full-mesh"
    network: Literal["isl", "ground"] = "isl"
    # the traffic tool, an entry of experiments/traffic/tools/ (TOOLS): iperf3 (one server and client process
    # per directed flow, as in the thesis) or mux (one multiplexing traffic process per node, for big swarms)
    engine: str = DEFAULT_TOOL
    base_port: int = Field(5201, ge=1024, le=60000)
    settle: float = Field(1.0, ge=0, le=600)  # pause between tests, seconds
    iperf3: IperfOptions = IperfOptions()
    backend: Optional[Literal["compose", "netns", "swarm"]] = None
    swarm: dict[str, Any] = Field(default_factory=dict)  # swarm spec fields (networks, defaults, ...)
    links: Optional[LinksSpec] = None  # link conditions of every test's swarm (netem.spec.links)
    faults: list[FaultEvent] = Field(default_factory=list)  # timeline per test, from the traffic's release

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        return get_tool(v).name

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("sizes: give at least one swarm size")
        for n in v:
            if not 2 <= n <= MAX_NODES:
                raise ValueError(f"size {n}: a swarm has 2 to {MAX_NODES} nodes")
        return unique("sizes", v)  # a repeated size would run its tests twice into one run folder

    @field_validator("protocols")
    @classmethod
    def _protocols(cls, v: list[str]) -> list[str]:
        return unique("protocols", v)

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: list[str]) -> list[str]:
        for r in v:
            try:
                bps = parse_rate(r)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
            if bps <= 0:
                raise ValueError(f"rate {r!r}: must be positive")
        return unique("rates", v, key=parse_rate)  # 1M and 1000k are one rate, one test id

    @model_validator(mode="after")
    def _consistent(self) -> "ExperimentSpec":
        if not self.protocols:
            raise ValueError("protocols: give tcp, udp or both")
        if "udp" in self.protocols and not self.rates:
            raise ValueError("rates: udp needs at least one offered rate (e.g. [1M, 10M])")
        for key in ("name", "nodes", "node_list", "groups"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the sweep (the swarm is sized per test)")
        top = max(self.sizes)
        if self.base_port + top > 65535:
            raise ValueError(f"base_port {self.base_port}: ports for {top} nodes would pass 65535")
        self._options_the_tool_uses()
        if self.links is not None and "links" in self.swarm:
            raise ValueError("links: given both at the top level and in swarm:; keep one")
        self.swarm_spec(top)  # the template must be valid for the largest size
        if self.links is not None or self.faults:  # node names must exist at every size
            for size in sorted(self.sizes, reverse=True):
                nodes = [n.name for n in self.swarm_spec(size).resolved_nodes()]
                check_timeline(self.faults, nodes, self.duration, note=f" at size {size}" if size != top else "")
        return self

    def _options_the_tool_uses(self) -> None:
        """An `iperf3:` option set that the tool has no equivalent for is refused, not silently dropped."""
        tool = get_tool(self.engine)
        if tool.uses_options is None:
            return
        for key, spec in IperfOptions.model_fields.items():
            value = getattr(self.iperf3, key)
            if key not in tool.uses_options and value != spec.default:
                raise ValueError(f"iperf3.{key} {value!r}: not used by engine {tool.name} "
                                 f"(only {' and '.join(tool.uses_options)} are)")

    @property
    def rates_bps(self) -> list[int]:
        return [parse_rate(r) for r in self.rates]

    def swarm_spec(self, size: int) -> SwarmSpec:
        """The swarm of `size` nodes a test runs on (validated; a bad template is a SpecError)."""
        links = {} if self.links is None else {"links": self.links.model_dump(mode="json", exclude_none=True)}
        return swarm_from_template(self.swarm, self.name, f"{self.name}-n{size}", size, self.backend, **links)


def load_experiment(path: str | Path) -> ExperimentSpec:
    """Read and validate an experiment file; errors are one-line SpecErrors."""
    return experiment_from_dict(read_yaml(path, "experiment"), str(path))


def experiment_from_dict(data: Any, source: str = "") -> ExperimentSpec:
    """Validate a parsed experiment document, raising SpecError with one line."""
    return validate_document(ExperimentSpec, data, source, "experiment")


# --------------------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class TestCase:
    """One test of a sweep."""

    test_id: str
    size: int
    protocol: str
    rate_bps: Optional[int]
    repeat: int


@dataclass(frozen=True)
class Flow:
    """One directed connection: src's client sends to dst's server on `port`."""

    src: NodePlan
    dst: NodePlan
    port: int

    @property
    def flow_id(self) -> str:
        return f"{self.src.name}__{self.dst.name}"


def plan_tests(exp: ExperimentSpec) -> list[TestCase]:
    """Every test, size-major (one bring-up per size), then protocol, rate, repeat."""
    tests = []
    for size in exp.sizes:
        for proto in exp.protocols:
            rates: list[Optional[int]] = [*exp.rates_bps] if proto == "udp" else [None]
            for rate in rates:
                for rep in range(1, exp.repeats + 1):
                    label = f"-{rate_label(rate)}" if rate else ""
                    tests.append(TestCase(f"n{size:03d}-{proto}{label}-r{rep}", size, proto, rate, rep))
    return tests


def plan_pairs(count: int, pattern: str) -> list[tuple[int, int]]:
    """Directed (src, dst) index pairs (0-based) for `count` nodes under `pattern`."""
    if pattern == "full-mesh":
        return [(s, d) for s in range(count) for d in range(count) if s != d]
    if pattern == "ring":
        return [(s, (s + 1) % count) for s in range(count)] if count > 2 else [(0, 1), (1, 0)]
    if pattern == "pairs":
        return [p for s in range(0, count - 1, 2) for p in ((s, s + 1), (s + 1, s))]
    if pattern == "one-to-all":
        return [(0, d) for d in range(1, count)]
    raise SpecError(f"pattern {pattern!r}: expected one of {', '.join(PATTERNS)}")


def plan_flows(nodes: list[NodePlan], pattern: str, base_port: int) -> list[Flow]:
    """The directed flows of one test, each with its own server port on its destination."""
    return [Flow(nodes[s], nodes[d], base_port + nodes[s].index - 1) for s, d in plan_pairs(len(nodes), pattern)]


def flow_ips(flow: Flow, network: str) -> tuple[str, str]:
    """(source, destination) address of a flow on the experiment's network."""
    if network == "ground":
        return flow.src.ground_ip, flow.dst.ground_ip
    return flow.src.isl_ip, flow.dst.isl_ip


def server_ip(node: NodePlan, network: str) -> str:
    return node.ground_ip if network == "ground" else node.isl_ip
