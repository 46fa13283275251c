"""The `dtn` experiment type's model and its pure test plan.

```yaml
type: dtn                   # experiments/dtn-chain.yaml, experiments/dtn-contacts.yaml
name: dtn-chain
backend: netns
pattern: chain              # chain (sat01 -> ... -> satN -> ground) | all-to-ground | all-to-all
sizes: [2]                  # spacecraft per test; a node `ground` is always added (the ground station)
bundle_sizes: [100kB]
rates: [10, max]            # bundles/s per flow; max = as fast as the sending agent accepts
clas: [tcp]                 # tcp | mtcp | udp | http
routings: [epidemic]        # epidemic | sprayandwait | flooding | static
profiles: [none, {delay: 1.3s}]   # link conditions on every ISL link: none, a netem profile name, or values
ltp_segments: [576, 1360, 64000]  # optional sweeps: cla ltp's segment size (seed 004) and the ISL network's MTU
isl_mtus: [1500, 9000]
duration: 10s               # bundles are created in [0, duration)
drain: 30s                  # then the receivers wait this long for late bundles
lifetime: 1h                # bundle lifetime
repeats: 1
dtn: {peers: static, janitor: 1s, storage: {limit: 256m}}   # any other `dtn:` field (swarm.spec.dtn.DtnSpec)
contacts:                   # optional: a contact plan drives the link cuts (ION syntax, swarm.dtn.contacts)
  plan: contacts/lunar.txt  # a file (relative to the experiment file), or `text: |` inline,
  others: down              #   or periodic: {period: 20s, up: 10s}; pairs outside the plan: down | keep
faults: []                  # the ordinary fault timeline, too (experiments.timeline)
ip_probe: true              # a UDP probe beside every bundle flow: the IP traffic lost, for comparison
swarm: {networks: {isl: {subnet: 10.210.0.0/24}, ground: {subnet: 10.211.0.0/24}}}
agents: [dtn7, hardy]       # optional: an interop matrix (experiments/dtn/interop-matrix.yaml), see below
```

With `agents`, every test runs once per ordered pair of those agents (the registry's names, swarm.dtn.agents) and
per CLA both carry (the registry says which: `clas` narrows them; without `clas`, every CLA): the flows' source
nodes run the pair's first agent, every other node (relays, the ground station) its second. A bundle size a CLA
cannot carry (the udp CLA: one datagram) is left out of that CLA's tests and listed as such (`matrix_gaps`).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from experiments.timeline import FaultEvent, check_timeline
from swarm.dtn.contacts import ContactPlan, LinkEvent, link_schedule, parse_contact_plan, periodic_plan, resolve_nodes
from swarm.dtn.agents import check_agent, get_agent, REGISTRY
from swarm.dtn.plan import plan_agents, spec_link_view
from swarm.spec.dtn import CLAS, ROUTINGS, DtnSpec, parse_seconds, parse_size
from swarm.errors import SpecError
from experiments.base import ExperimentModel
from swarm.spec.safe_yaml import PLAN_LIMIT, read_text
from swarm.spec.model import read_yaml, spec_from_dict, validate_document
from swarm.spec.model import SwarmSpec, plan_nodes

PATTERNS = ("chain", "all-to-ground", "all-to-all")
GROUND = "ground"
MAX_RATE = 0.0  # "max": the sender posts the next bundle as soon as the agent answered


def satellite_names(count: int) -> list[str]:
    width = max(2, len(str(count)))
    return [f"sat{i:0{width}d}" for i in range(1, count + 1)]


def swarm_nodes(size: int) -> list[str]:
    """The nodes of a test with `size` spacecraft: sat01..satN, then the ground station."""
    return satellite_names(size) + [GROUND]


def flows(pattern: str, nodes: list[str]) -> list[tuple[str, str]]:
    """(source, destination) of every bundle flow. chain: the first spacecraft to the ground station, relayed
    by every other node in order; all-to-ground: every spacecraft to the ground station; all-to-all: every
    ordered pair."""
    sats = [n for n in nodes if n != GROUND]
    if pattern == "chain":
        return [(sats[0], GROUND)]
    if pattern == "all-to-ground":
        return [(s, GROUND) for s in sats]
    return [(a, b) for a in nodes for b in nodes if a != b]


def chain_neighbours(nodes: list[str]) -> dict[str, list[str]]:
    """In a chain, each node's peers are the nodes before and after it."""
    return {n: [m for m in (nodes[i - 1] if i else None, nodes[i + 1] if i + 1 < len(nodes) else None) if m]
            for i, n in enumerate(nodes)}


class ContactsSpec(BaseModel):
    """Where the contact plan comes from: a file, inline text, or a periodic schedule of every link."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: Optional[str] = None  # a file; from_dict reads it into `text` (the run folder keeps the plan itself)
    text: Optional[str] = None
    source: Optional[str] = None  # the file `text` was read from
    periodic: Optional[dict[str, Any]] = None  # {period: 20s, up: 10s, rate: 125000000}
    others: Literal["down", "keep"] = "down"

    @model_validator(mode="after")
    def _one(self) -> "ContactsSpec":
        given = [k for k in ("plan", "text", "periodic") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"contacts: give exactly one of plan, text, periodic (got {', '.join(given) or 'none'})")
        if self.periodic is not None:
            unknown = set(self.periodic) - {"period", "up", "rate", "stagger"}
            if unknown:
                raise ValueError(f"contacts.periodic: unknown field {sorted(unknown)[0]!r} (period, up, rate, stagger)")
            for key in ("period", "up"):
                if key not in self.periodic:
                    raise ValueError(f"contacts.periodic.{key}: missing")
                parse_seconds(self.periodic[key], f"contacts.periodic.{key}")
        return self


@dataclass(frozen=True)
class DtnTest:
    """One test of the sweep."""

    test_id: str
    size: int
    cla: str
    routing: str
    profile: str  # label
    links: Optional[dict]  # the `links:` spec piece of this test, or None
    bundle_size: int
    rate: float  # bundles/s per flow; 0 = max
    repeat: int
    segment: Optional[int] = None  # cla: ltp segment size of this test (`ltp_segments`), None: dtn.ltp's
    mtu: Optional[int] = None  # the ISL network's MTU of this test (`isl_mtus`), None: the swarm's
    src_agent: Optional[str] = None  # `agents`: the agent of the flows' sources ...
    dst_agent: Optional[str] = None  # ... and of every other node (None: the `dtn:` piece's)


def _no_profile() -> list[Union[str, dict[str, Any]]]:
    """`profiles:` unset: one test without a link profile."""
    return ["none"]


class DtnExperiment(ExperimentModel):
    """A DTN sweep (see the module text)."""

    type: Literal["dtn"] = "dtn"
    name: str
    backend: Optional[Literal["compose", "netns"]] = None
    pattern: str = "chain"
    sizes: list[int] = Field(default_factory=lambda: [2], min_length=1)
    bundle_sizes: list[int] = Field(default_factory=lambda: [100_000], min_length=1)
    rates: list[float] = Field(default_factory=lambda: [10.0], min_length=1)
    clas: list[str] = Field(default_factory=lambda: ["tcp"], min_length=1)
    routings: list[str] = Field(default_factory=lambda: ["epidemic"], min_length=1)
    profiles: list[Union[str, dict[str, Any]]] = Field(default_factory=_no_profile, min_length=1)
    ltp_segments: list[int] = Field(default_factory=list)  # a sweep of dtn.ltp.segment (seed 004), bytes
    isl_mtus: list[int] = Field(default_factory=list)  # a sweep of swarm.networks.isl.mtu, bytes
    duration: float = 10.0
    drain: float = 30.0
    lifetime: float = 3600.0
    repeats: int = Field(1, ge=1, le=100)
    store_interval: float = 0.5
    dtn: dict[str, Any] = Field(default_factory=dict)
    contacts: Optional[ContactsSpec] = None
    faults: list[FaultEvent] = Field(default_factory=list)
    ip_probe: Optional[bool] = None
    ip_probe_rate: float = Field(10.0, gt=0, le=10_000)
    swarm: dict[str, Any] = Field(default_factory=dict)
    agents: list[str] = Field(default_factory=list)  # an interop matrix: every ordered pair x every CLA both carry

    @field_validator("agents")
    @classmethod
    def _agents(cls, v: list[str]) -> list[str]:
        for i, name in enumerate(v):
            if name not in REGISTRY:
                raise ValueError(f"agents {name!r}: unknown agent (known: {', '.join(REGISTRY)})")
            if name in v[:i]:
                raise ValueError(f"agents {name!r}: named twice")
        return v

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        if v not in PATTERNS:
            raise ValueError(f"pattern {v!r}: unknown pattern (known: {', '.join(PATTERNS)})")
        return v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("sizes: give at least one swarm size")
        for s in v:
            if not 1 <= s <= 999:
                raise ValueError(f"sizes {s}: spacecraft per test must be 1..999 (a ground node is added)")
        return v

    @field_validator("bundle_sizes", mode="before")
    @classmethod
    def _bundle_sizes(cls, v: Any) -> list[int]:
        items = v if isinstance(v, list) else [v]
        return [parse_size(x, "bundle_sizes") for x in items]

    @field_validator("rates", mode="before")
    @classmethod
    def _rates(cls, v: Any) -> list[float]:
        out = []
        for x in v if isinstance(v, list) else [v]:
            if str(x).strip().lower() == "max":
                out.append(MAX_RATE)
                continue
            try:
                rate = float(str(x).strip().removesuffix("/s"))
            except ValueError:
                raise ValueError(f"rates {x!r}: expected bundles per second (e.g. 10 or 0.5) or max") from None
            if not 0 < rate <= 100_000:
                raise ValueError(f"rates {x!r}: must be in (0, 100000] bundles/s, or max")
            out.append(rate)
        return out

    @field_validator("ltp_segments")
    @classmethod
    def _segments(cls, v: list[int]) -> list[int]:
        for seg in v:
            if not 64 <= seg <= 65_507:
                raise ValueError(f"ltp_segments {seg}: must be 64..65507 bytes (one UDP datagram)")
        return v

    @field_validator("isl_mtus")
    @classmethod
    def _mtus(cls, v: list[int]) -> list[int]:
        for mtu in v:
            if not 576 <= mtu <= 9000:
                raise ValueError(f"isl_mtus {mtu}: must be 576..9000 bytes")
        return v

    @field_validator("clas")
    @classmethod
    def _clas(cls, v: list[str]) -> list[str]:
        for c in v:
            if c not in CLAS:
                raise ValueError(f"clas {c!r}: unknown convergence layer (known: {', '.join(CLAS)})")
        return v

    @field_validator("routings")
    @classmethod
    def _routings(cls, v: list[str]) -> list[str]:
        for r in v:
            if r not in ROUTINGS:
                raise ValueError(f"routings {r!r}: unknown routing (known: {', '.join(ROUTINGS)})")
        return v

    @field_validator("duration", "drain", "lifetime", "store_interval", mode="before")
    @classmethod
    def _seconds(cls, v: Any, info: Any) -> float:
        return parse_seconds(v, info.field_name)

    @model_validator(mode="after")
    def _consistent(self) -> "DtnExperiment":
        self._check_pieces()
        self._check_clas()
        self._check_sizes()
        self._check_ltp_peers()
        return self

    def _check_pieces(self) -> None:
        """What the experiment sets itself may not come in `swarm:` or `dtn:` too."""
        for key in ("name", "nodes", "node_list", "groups", "backend"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the experiment")
        if "defaults" in self.swarm and "dtn" in self.swarm["defaults"]:
            raise ValueError("swarm.defaults.dtn: set by the experiment (top-level `dtn`, `clas`, `routings`)")
        for key in ("cla", "routing", "static_peers"):
            if key in self.dtn:
                which = "clas" if key == "cla" else "routings" if key == "routing" else "pattern"
                raise ValueError(f"dtn.{key}: set by the experiment ({which})")
        if self.agents and "agent" in self.dtn:
            raise ValueError("dtn.agent: set by the experiment (agents)")
        if self.ltp_segments and self.clas != ["ltp"]:
            raise ValueError(f"ltp_segments: sweeps the ltp CLA's segment size; clas must be [ltp], not {self.clas}")

    def _check_clas(self) -> None:
        """Every DtnSpec field checked once per CLA, and the largest bundle against that CLA's limits (a matrix
        leaves such bundles out instead: matrix_gaps)."""
        if self.agents and not self.tests():
            raise ValueError(f"agents {self.agents}: no pair of them carries any of clas {self.matrix_clas()}")
        for cla in self.clas if not self.agents else sorted({t.cla for t in self.tests()}):
            try:
                piece = DtnSpec(**self.dtn_piece(cla, self.routings[0]))
                if not self.agents:
                    check_agent(piece)  # every CLA of the run carried by the agent, not only the first test's
            except ValueError as exc:
                raise ValueError(_first_error(exc)) from None
            if self.agents:
                continue
            limit = piece.max_bundle()
            if limit is not None and max(self.bundle_sizes) > limit:
                why = (f"the storage limit ({limit} bytes)" if limit == piece.storage.limit
                       else f"what the ltp CLA hands dtnd in one WebSocket frame ({limit} bytes)" if cla == "ltp"
                       else f"one UDP datagram ({limit} bytes), the udp CLA's unit")
                raise ValueError(f"bundle_sizes {max(self.bundle_sizes)}: larger than {why}")

    def _check_sizes(self) -> None:
        """The contact plan and the fault timeline against the nodes of every size."""
        for size in self.sizes:
            nodes = swarm_nodes(size)
            plan = self.contact_plan(nodes)
            if plan is not None and self.contacts is not None:
                link_schedule(plan, nodes, self.contacts.others)
            try:
                check_timeline(list(self.faults), nodes, self.duration + self.drain, note=f" at size {size}")
            except SpecError as exc:
                raise ValueError(str(exc)) from None

    def _check_ltp_peers(self) -> None:
        """cla: ltp: every LTP peer has a delay and a rate to pace at."""
        for test in self.tests():
            if test.cla == "ltp" and test.repeat == 1:
                try:
                    spec = self.swarm_spec(test)
                except SpecError as exc:
                    raise ValueError(str(exc)) from None
                nodes = plan_nodes(spec)
                plan_agents([(n.name, n.isl_ip, n.spec.dtn) for n in nodes], spec.networks.isl.subnet,
                            lambda n: "/", link_of=spec_link_view(spec.links, [n.name for n in nodes]))

    # ---------------------------------------------------------------------------------- contacts
    def contact_text(self) -> Optional[tuple[str, str]]:
        """(source label, ION text) of the contact plan, or None."""
        c = self.contacts
        if c is None or c.periodic is not None:
            return None
        if c.text is not None:
            return c.source or "contacts.text", c.text
        assert c.plan is not None  # one of text, plan, periodic (validated)
        try:
            return str(c.plan), read_text(c.plan, "contact plan", PLAN_LIMIT)
        except SpecError as exc:
            raise ValueError(f"contacts.plan: {exc}") from None

    def contact_plan(self, nodes: list[str]) -> Optional[ContactPlan]:
        """The contact plan for a test on `nodes` (names checked), or None without `contacts`."""
        if self.contacts is None:
            return None
        if self.contacts.periodic is not None:
            p = self.contacts.periodic
            links = [(a, b) for a, b in _pattern_links(self.pattern, nodes)]
            text = periodic_plan(nodes, links, parse_seconds(p["period"], "contacts.periodic.period"),
                                 parse_seconds(p["up"], "contacts.periodic.up"), self.duration + self.drain,
                                 float(p.get("rate", 125_000_000)),
                                 parse_seconds(p.get("stagger", 0), "contacts.periodic.stagger", allow_zero=True))
            source = "contacts.periodic"
        else:
            given = self.contact_text()
            assert given is not None  # contacts with text or a plan file (periodic is above)
            source, text = given
        return resolve_nodes(parse_contact_plan(text, source), nodes, source)

    def probe_ip(self) -> bool:
        return self.ip_probe if self.ip_probe is not None else (self.contacts is not None or bool(self.faults))

    # -------------------------------------------------------------------------------------- tests
    def profile_label(self, profile: Union[str, dict[str, Any]]) -> str:
        if isinstance(profile, str):
            return profile
        return ",".join(f"{k}={v}" for k, v in profile.items())

    def links_of(self, profile: Union[str, dict[str, Any]]) -> Optional[dict]:
        """The `links:` piece of a profile: none -> None; a name -> {default: {profile: name}}; values ->
        {default: values}."""
        if profile == "none":
            return None
        if isinstance(profile, str):
            return {"default": {"profile": profile}}
        return {"default": dict(profile)}

    # ------------------------------------------------------------------------------- interop matrix
    def matrix_clas(self) -> list[str]:
        """The CLAs a matrix tries: `clas` when given, else every CLA."""
        return list(self.clas) if "clas" in self.model_fields_set else list(CLAS)

    def pairs(self) -> list[tuple[Optional[str], Optional[str]]]:
        """Every ordered pair of `agents` (source's, others'); [(None, None)] without `agents`."""
        return [(a, b) for a in self.agents for b in self.agents] if self.agents else [(None, None)]

    def pair_clas(self, src: Optional[str], dst: Optional[str]) -> list[str]:
        """The CLAs a test pair runs: those both agents carry (asked of the registry), else `clas`."""
        if src is None or dst is None:
            return list(self.clas)
        return [c for c in self.matrix_clas() if c in get_agent(src).clas and c in get_agent(dst).clas]

    def _too_large(self, cla: str, bundle_size: int) -> Optional[str]:
        """Why a CLA cannot carry bundles of `bundle_size` (None when it can)."""
        piece = DtnSpec(**{k: v for k, v in self.dtn_piece(cla, self.routings[0]).items() if k != "tcpcl"})
        limit = piece.max_bundle()
        if limit is not None and bundle_size > limit:
            return f"bundle {bundle_size} B larger than the {cla} CLA carries ({limit} B)"
        return None

    def matrix_gaps(self) -> list[dict[str, Any]]:
        """The cells of a matrix that are not run, and why: a pair without a common CLA of `matrix_clas`, a bundle
        size the CLA cannot carry."""
        gaps: list[dict[str, Any]] = []
        for src, dst in self.pairs() if self.agents else []:
            clas = self.pair_clas(src, dst)
            if not clas:
                carried = lambda a: ",".join(get_agent(a).clas)  # noqa: E731
                gaps.append({"src_agent": src, "dst_agent": dst, "cla": "", "bundle_size": "",
                             "reason": f"no common CLA ({src}: {carried(src)}; {dst}: {carried(dst)})"})
            for cla in clas:
                for bsize in self.bundle_sizes:
                    why = self._too_large(cla, bsize)
                    if why:
                        gaps.append({"src_agent": src, "dst_agent": dst, "cla": cla, "bundle_size": bsize,
                                     "reason": why})
        return gaps

    def tests(self) -> list[DtnTest]:
        """The sweep: every combination, in order; `isl_mtus` and `ltp_segments` (when given) vary fastest last,
        so one MTU's segment sizes run back to back. With `agents`, every ordered pair first, then its CLAs."""
        out = []
        for src, dst in self.pairs():
            for size, cla, routing, profile, bsize, rate, rep, mtu, seg in itertools.product(
                    self.sizes, self.pair_clas(src, dst), self.routings, self.profiles, self.bundle_sizes, self.rates,
                    range(1, self.repeats + 1), _or_unset(self.isl_mtus), _or_unset(self.ltp_segments)):
                if src is not None and self._too_large(cla, bsize):
                    continue  # matrix_gaps lists it
                label = self.profile_label(profile)
                rate_label = "max" if rate == MAX_RATE else f"{rate:g}"
                extra = (f"-mtu{mtu}" if mtu else "") + (f"-seg{seg}" if seg else "")
                pair = f"{src}-{dst}-" if src is not None else ""
                test_id = f"{pair}n{size}-{cla}-{routing}-{_slug(label)}-{bsize}B-{rate_label}ps{extra}-r{rep}"
                out.append(DtnTest(test_id, size, cla, routing, label, self.links_of(profile), bsize, rate, rep, seg,
                                   mtu, src, dst))
        return out

    def dtn_piece(self, cla: str, routing: str, segment: Optional[int] = None,
                  bundle_size: Optional[int] = None) -> dict[str, Any]:
        """The tests' `dtn:` piece; `cla: tcp` sizes its TCPCL window for the test's bundles (unless `dtn.tcpcl`
        says otherwise), and `dtn.tcpcl` is dropped for the other CLAs of the run."""
        piece = {**self.dtn, "cla": cla, "routing": routing}
        if segment is not None:
            piece["ltp"] = {**piece.get("ltp", {}), "segment": segment}
        if cla != "tcp":
            piece.pop("tcpcl", None)
        elif bundle_size is not None:
            piece["tcpcl"] = {"bundle": bundle_size, **piece.get("tcpcl", {})}
        return piece

    def swarm_data(self, test: DtnTest) -> dict[str, Any]:
        """The swarm spec document of `test` (validated by the caller with swarm_from_template)."""
        nodes = swarm_nodes(test.size)
        piece = self.dtn_piece(test.cla, test.routing, test.segment, test.bundle_size)
        node_list = self._node_list(test, nodes, piece)
        defaults = dict(self.swarm.get("defaults", {}))
        defaults["dtn"] = piece
        data = {k: v for k, v in self.swarm.items() if k != "defaults"}
        data.update(name=self.name, node_list=node_list, defaults=defaults)
        if test.mtu is not None:
            networks = dict(data.get("networks", {}))
            networks["isl"] = {**networks.get("isl", {}), "mtu": test.mtu}
            data["networks"] = networks
        if self.backend:
            data["backend"] = self.backend
        links = dict(self.swarm.get("links", {}))
        if test.links is not None:
            links.update(test.links)
        plan = self.contact_plan(nodes)
        if plan is not None and plan.ranges:  # one-way light time per pair (the first range of each pair)
            seen: dict[tuple[str, str], float] = {}
            for r in plan.ranges:
                a, b = sorted((r.a, r.b))
                seen.setdefault((a, b), r.owlt)
            links["overrides"] = list(links.get("overrides", [])) + [
                {"between": list(pair), "delay": f"{owlt:g}s"} for pair, owlt in seen.items() if owlt > 0]
        if links:
            data["links"] = links
        return data

    def _node_list(self, test: DtnTest, nodes: list[str], piece: dict[str, Any]) -> list[dict[str, Any]]:
        """The test's nodes with their `dtn:` pieces: the pair's agents (a matrix), the chain's static peers and
        routes."""
        peers = chain_neighbours(nodes) if self.pattern == "chain" else {}
        sources = {s for s, _ in flows(self.pattern, nodes)}
        node_list = []
        for n in nodes:
            entry: dict[str, Any] = {"name": n}
            if n == GROUND:
                entry["role"] = "ground"
            if test.src_agent is not None:  # a matrix test: the pair's agents
                entry["dtn"] = {**piece, "agent": test.src_agent if n in sources else test.dst_agent}
            if n in peers and piece.get("peers", "static") == "static":
                entry["dtn"] = {**entry.get("dtn", piece), "static_peers": peers[n]}
            if self.pattern == "chain" and test.routing == "static" and n != GROUND:
                nxt = nodes[nodes.index(n) + 1]  # static routing down the chain: everything else via the next hop
                entry["dtn"] = {**entry.get("dtn", piece), "routes": [{"to": "*", "via": nxt}]}
            node_list.append(entry)
        return node_list

    def swarm_spec(self, test: DtnTest) -> SwarmSpec:
        return spec_from_dict(self.swarm_data(test), f"{self.name}: swarm")

    def contact_events(self, nodes: list[str]) -> list[LinkEvent]:
        plan = self.contact_plan(nodes)
        return [] if plan is None or self.contacts is None else link_schedule(plan, nodes, self.contacts.others)

    def flow_counts(self, test: DtnTest) -> Optional[int]:
        """Bundles each flow sends at a fixed rate (None for max)."""
        return None if test.rate == MAX_RATE else max(1, math.ceil(test.rate * self.duration - 1e-9))


def experiment_from_dict(data: Any, source: str = "") -> DtnExperiment:
    """Validate a `type: dtn` document; a contact plan file is read now (relative to the experiment file) and
    kept inline, so the run folder's experiment.yaml holds the plan that ran."""
    if isinstance(data, dict) and isinstance(data.get("contacts"), dict) and data["contacts"].get("plan"):
        contacts = dict(data["contacts"])
        base = Path(source).parent if source else Path(".")
        plan = contacts.pop("plan")
        if not isinstance(plan, str):  # `plan: [a.txt]` (found by the experiment fuzzer): not a path
            raise SpecError(f"{source or 'experiment'}: contacts.plan: {plan!r:.80}: not a file name")
        path = Path(plan)
        path = path if path.is_absolute() else base / path
        try:
            contacts["text"] = read_text(path, "contact plan", PLAN_LIMIT)  # bounded; errors never echo its text
        except SpecError as exc:
            raise SpecError(f"{source or 'experiment'}: contacts.plan: {exc}") from None
        contacts["source"] = str(path)
        data = {**data, "contacts": contacts}
    exp = validate_document(DtnExperiment, data, source, "experiment")
    for test in exp.tests()[:1]:  # the swarm of a test validates (names, subnets, links); one is enough
        try:
            exp.swarm_spec(test)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}" if source else str(exc)) from None
    return exp


def load_experiment(path: str | Path) -> DtnExperiment:
    return experiment_from_dict(read_yaml(path, "experiment"), str(path))


def _pattern_links(pattern: str, nodes: list[str]) -> list[tuple[str, str]]:
    """The links the periodic contacts switch: the chain's hops, or every spacecraft's link to ground
    (all-to-ground), or every pair (all-to-all)."""
    if pattern == "chain":
        return list(zip(nodes, nodes[1:]))
    if pattern == "all-to-ground":
        return [(n, GROUND) for n in nodes if n != GROUND]
    return [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:]]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in text).strip("-") or "none"


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        err = errors()[0]
        return str(err.get("msg", exc)).removeprefix("Value error, ")
    return str(exc)


def offered_bundles(exp: DtnExperiment, test: DtnTest) -> float:
    """Bundles the test offers (inf for `max`)."""
    n = len(flows(exp.pattern, swarm_nodes(test.size)))
    return math.inf if test.rate == MAX_RATE else n * test.rate * exp.duration


def _or_unset(sweep: list[int]) -> list[Optional[int]]:
    """A sweep's values, or one "not set" (None) when it sweeps nothing."""
    return list(sweep) if sweep else [None]
