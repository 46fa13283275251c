"""The `orbits` experiment (pure model): see experiments/orbits/run.py for the file format and the run."""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from netem.spec.orbits import parse_orbits
from swarm.spec.dtn import DtnSpec, parse_size
from experiments.base import ExperimentModel
from swarm.spec.model import SwarmSpec, spec_from_dict, validate_document
from swarm.units import parse_duration


class DtnFlow(BaseModel):
    """Bundles from every node of `from` to `to` at `rate` bundles per second of the run (wall time)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    src: Union[str, list[str]] = Field(alias="from")  # a node, a list, or `satellites` (every satellite)
    to: str
    rate: float = Field(gt=0, le=1000)
    size: int = 1000

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v, "size")


class OrbitsDtn(BaseModel):
    """A DTN agent in every node (or in `nodes`), bundles on the orbit's schedule (see experiments/orbits/run.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: dict[str, Any] = Field(default_factory=dict)  # swarm.spec.dtn.DtnSpec fields (cla, routing, ...)
    flows: list[DtnFlow]
    #: the nodes that run an agent (default: every node of the plan); the others are plain nodes whose links still
    #: follow the plan (a 1,000-satellite shell with an agent on a chain of relays, not 1,000 agents on 2 cores)
    nodes: Optional[list[str]] = None
    send_until: Optional[float] = None  # plan seconds: bundles are created in [0, send_until) (default: all)
    drain: float = 10.0  # wall seconds the receivers wait after the plan's end
    lifetime: float = 3600.0
    store_interval: float = 1.0

    @field_validator("send_until", "drain", "lifetime", "store_interval", mode="before")
    @classmethod
    def _seconds(cls, v: Any, info: Any) -> Optional[float]:
        if v is None or (info.field_name == "drain" and str(v).strip() in ("0", "0s")):
            return None if v is None else 0.0
        return parse_duration(v, info.field_name)

    @model_validator(mode="after")
    def _agent(self) -> "OrbitsDtn":
        for key in ("static_peers", "routes"):
            if key in self.agent:
                raise ValueError(f"agent.{key}: every agent peers with every other node (contacts decide who "
                                 "is reachable)")
        if self.agent.get("routing") == "static":
            raise ValueError("agent.routing 'static': fixed next hops cannot follow contacts "
                             "(epidemic, flooding, sprayandwait)")
        if not self.flows:
            raise ValueError("flows: give at least one flow")
        limit = self.piece().max_bundle()
        for i, f in enumerate(self.flows):
            if limit is not None and f.size > limit:
                raise ValueError(f"flows[{i}].size {f.size}: larger than the agent's largest bundle ({limit} bytes)")
        return self

    def piece(self) -> DtnSpec:
        try:
            return DtnSpec(**self.agent)
        except ValueError as exc:
            errors = getattr(exc, "errors", None)
            raise ValueError(str(errors()[0].get("msg")).removeprefix("Value error, ") if callable(errors)
                             else str(exc)) from None

    def agent_nodes(self, names: list[str]) -> list[str]:
        """The plan's nodes (`names`, in plan order) that run an agent."""
        return names if self.nodes is None else [n for n in names if n in set(self.nodes)]

    def flows_by_source(self, satellites: list[str]) -> list[tuple[str, str, DtnFlow]]:
        """(source, destination, flow) for every source node of every flow (`satellites`: the satellites with
        an agent)."""
        out = []
        for f in self.flows:
            srcs = satellites if f.src == "satellites" else [f.src] if isinstance(f.src, str) else f.src
            out += [(s, f.to, f) for s in srcs if s != f.to]
        return out


class OrbitsExperiment(ExperimentModel):
    """A swarm whose links follow an orbit plan live, with probes and DTN flows."""

    type: Literal["orbits"] = "orbits"
    name: str
    backend: Optional[Literal["compose", "netns"]] = None
    speedup: float = Field(1.0, gt=0, le=10_000)
    orbits: dict[str, Any]
    swarm: dict[str, Any] = Field(default_factory=dict)
    probes: list[list[str]] = Field(default_factory=list)
    probe_interval: float = 0.2
    contact_plan_numbers: Optional[dict[str, int]] = None
    workers: int = Field(16, ge=1, le=256)
    dtn: Optional[OrbitsDtn] = None

    @field_validator("probe_interval", mode="before")
    @classmethod
    def _interval(cls, v: Any) -> float:
        s = parse_duration(v, "probe_interval")
        if s < 0.002:
            raise ValueError(f"probe_interval {v!r}: at least 2ms")
        return s

    @model_validator(mode="after")
    def _consistent(self) -> "OrbitsExperiment":
        spec = self.orbits_spec()
        for key in ("name", "nodes", "node_list", "groups"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the experiment (the nodes are the orbit plan's)")
        names = spec.node_names()
        self._check_probes(names)
        if self.dtn is not None:
            self._check_dtn(spec, names)
        self.swarm_spec()
        return self

    def _check_probes(self, names: list[str]) -> None:
        """Probe pairs and contact-plan numbers name the plan's nodes."""
        for pair in self.probes:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"probes: {pair!r}: expected two different nodes [a, b]")
            for n in pair:
                if n not in names:
                    raise ValueError(f"probes: node {n!r} is not a node of the orbit plan")
        if self.contact_plan_numbers is not None:
            missing = [n for n in names if n not in self.contact_plan_numbers]
            if missing:
                raise ValueError(f"contact_plan_numbers: no number for node {missing[0]!r}")

    def _check_dtn(self, spec: Any, names: list[str]) -> None:
        """`dtn:`: the agent piece is the experiment's, flows name the plan's nodes and send within the plan."""
        dtn = self.dtn
        assert dtn is not None
        if "dtn" in self.swarm.get("defaults", {}):
            raise ValueError("swarm.defaults.dtn: set by the experiment (top-level dtn.agent)")
        if dtn.send_until is not None and dtn.send_until > spec.duration:
            raise ValueError(f"dtn.send_until {dtn.send_until:g} s: after the plan's end ({spec.duration:g} s)")
        for n in dtn.nodes or []:
            if n not in names:
                raise ValueError(f"dtn.nodes: node {n!r} is not a node of the orbit plan")
        if dtn.nodes is not None and len(set(dtn.nodes)) < 2:
            raise ValueError(f"dtn.nodes: {len(set(dtn.nodes))} node(s): give at least two (a sender and a receiver)")
        agents = dtn.agent_nodes(names)
        for i, f in enumerate(dtn.flows):
            srcs = [] if f.src == "satellites" else [f.src] if isinstance(f.src, str) else f.src
            for n in [*srcs, f.to]:
                if n not in names:
                    raise ValueError(f"dtn.flows[{i}]: node {n!r} is not a node of the orbit plan")
                if n not in agents:
                    raise ValueError(f"dtn.flows[{i}]: node {n!r} runs no agent (not in dtn.nodes)")
            if not [s for s in (self.agent_satellites() if f.src == "satellites" else srcs) if s != f.to]:
                raise ValueError(f"dtn.flows[{i}]: no source other than the destination {f.to!r}")

    def satellites(self) -> list[str]:
        return self.orbits_spec().satellite_names()

    def agent_satellites(self) -> list[str]:
        """The satellites that run a DTN agent (every one without `dtn.nodes`)."""
        sats = self.satellites()
        return sats if self.dtn is None else self.dtn.agent_nodes(sats)

    def orbits_spec(self):
        return parse_orbits(self.orbits, f"{self.name}: orbits")

    def swarm_spec(self) -> SwarmSpec:
        names = self.orbits_spec().node_names()
        data = {**self.swarm, "name": self.name, "node_list": [{"name": n} for n in names]}
        if self.dtn is not None and self.dtn.nodes is None:
            data["defaults"] = {**self.swarm.get("defaults", {}), "dtn": self.dtn.piece().model_dump(exclude_defaults=True)}
        elif self.dtn is not None:  # the agent on the nodes named only
            piece = self.dtn.piece().model_dump(exclude_defaults=True)
            agents = set(self.dtn.nodes or [])
            data["node_list"] = [{"name": n, "dtn": piece} if n in agents else {"name": n} for n in names]
        if self.backend:
            data["backend"] = self.backend
        return spec_from_dict(data, f"{self.name}: swarm")


def experiment_from_dict(data: Any, source: str = "") -> OrbitsExperiment:
    return validate_document(OrbitsExperiment, data, source, "experiment")
