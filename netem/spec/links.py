"""Link impairments (pure): one model of a link's conditions, profiles, and the resolution of a swarm's
`links:` section to conditions per directed link.

A directed link is (sender, receiver). Its conditions are applied once, on the sender's ISL egress, so a
link's `delay` is one-way: a symmetric 100 ms link gives a 200 ms round trip. Every parameter is optional
(None: "not set"); `merge` lays one Impairment over another parameter by parameter, so changing one
parameter keeps the others. A parameter is switched off by setting it to its neutral value
(`loss: 0`, `delay: 0`, `rate: 0` = unlimited, `up: true`).

Units (strings as in the spec and CLI; bare numbers are the unit in brackets):
- delay, jitter: "250ms", "1.3s", "500us" [milliseconds]
- loss, loss_correlation, jitter_correlation, corrupt, duplicate, reorder: "1%", "0.5%" [percent]
- loss_gemodel: Gilbert-Elliott loss as NetEm's `loss gemodel p r 1-h 1-k`: "1%,10%,50%,0%" (or a list);
  missing values take NetEm's defaults (r = 100 - p, 1-h = 100 %, 1-k = 0 %). Replaces `loss`.
- rate: "10Mbit", "10M", "10Mbps", "500kbit", "1.5G", "0" (unlimited) [bit/s]. Decimal units, bits: unlike
  `tc`, "Mbps" means megabits per second here (as in iperf3 and the thesis).

`links:` (in a swarm spec or an experiment):

    links:
      default: {profile: iss-ku}            # every directed link; a profile from netem/profiles/ and/or inline values
      overrides:                            # applied in order over the default, parameter by parameter
        - {between: [sat01, sat02], delay: 250ms, loss: 1%}          # both directions
        - {between: [sat01, sat03], direction: a->b, rate: 2Mbit}    # sat01 -> sat03 only
        - {node: sat04, loss: 5%}                                    # all of sat04's ISL traffic (in and out)
        - {node: sat04, direction: out, rate: 1Mbit}                 # only what sat04 sends
      engine: nft                           # optional: pin an engine (default: picked by the capability probe)
      tcp_buffers: bdp                      # optional: TCP buffers of each node sized from its links' BDP
                                            # (netem.engines.base.tcp_buffer_sysctls), for TCP over seconds of delay
"""
from __future__ import annotations

from functools import lru_cache

import os
from pathlib import Path
from typing import Any, Iterable, Literal, Optional

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from swarm.errors import SpecError
from swarm.spec.validation import Strict
from swarm.units import format_rate, format_time, parse_link_rate, parse_percent, parse_time_ms

PARAMS = ("delay", "jitter", "jitter_distribution", "jitter_correlation", "loss", "loss_correlation", "loss_gemodel",
          "rate", "corrupt", "duplicate", "reorder", "up")
DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
# The engines of the registry in netem/engines/ (which plans from this model, so the model names them
# instead of importing it); a unit test checks that the two agree.
ENGINE_NAMES = ("netem", "userspace", "nft")
_PERCENT_FIELDS = ("jitter_correlation", "loss", "loss_correlation", "corrupt", "duplicate", "reorder")



# ------------------------------------------------------------------------------------------- model
class Impairment(Strict):
    """Conditions of one directed link (or a change to them). None: not set."""

    delay: Optional[float] = None  # ms, one-way
    jitter: Optional[float] = None  # ms
    jitter_distribution: Optional[Literal["uniform", "normal", "pareto", "paretonormal"]] = None
    jitter_correlation: Optional[float] = None  # %
    loss: Optional[float] = None  # %
    loss_correlation: Optional[float] = None  # %
    loss_gemodel: Optional[tuple[float, float, float, float]] = None  # % p, r, 1-h, 1-k
    rate: Optional[int] = None  # bit/s; 0 = unlimited
    corrupt: Optional[float] = None  # %
    duplicate: Optional[float] = None  # %
    reorder: Optional[float] = None  # %
    up: Optional[bool] = None

    @field_validator("delay", "jitter", mode="before")
    @classmethod
    def _time(cls, v: Any, info) -> Optional[float]:
        return None if v is None else parse_time_ms(v, info.field_name)

    @field_validator(*_PERCENT_FIELDS, mode="before")
    @classmethod
    def _pct(cls, v: Any, info) -> Optional[float]:
        return None if v is None else parse_percent(v, info.field_name)

    @field_validator("loss_gemodel", mode="before")
    @classmethod
    def _gemodel(cls, v: Any) -> Optional[tuple[float, float, float, float]]:
        if v is None:
            return None
        parts = [x.strip() for x in v.split(",")] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else [v]
        if not 1 <= len(parts) <= 4:
            raise ValueError(f"loss_gemodel {v!r}: expected p[,r[,1-h[,1-k]]] percentages, e.g. 1%,10%,50%,0%")
        vals = [parse_percent(x, "loss_gemodel") for x in parts]
        p = vals[0]
        defaults = [p, 100.0 - p, 100.0, 0.0]
        full = vals + defaults[len(vals):]
        return (full[0], full[1], full[2], full[3])

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Optional[int]:
        return None if v is None else parse_link_rate(v)

    @field_validator("up", mode="before")
    @classmethod
    def _up(cls, v: Any) -> Optional[bool]:
        if v is None or isinstance(v, bool):
            return v
        if str(v).lower() in ("up", "true", "yes", "on"):
            return True
        if str(v).lower() in ("down", "false", "no", "off"):
            return False
        raise ValueError(f"up {v!r}: expected true (link up) or false (link down)")

    def merge(self, other: "Impairment") -> "Impairment":
        """This impairment with every parameter `other` sets replaced (the others kept)."""
        return Impairment.model_validate({**self.values(), **other.values()})

    def values(self) -> dict[str, Any]:
        """The parameters that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def effective(self) -> "Impairment":
        """Neutral values (0 %, 0 ms, unlimited rate, link up) dropped: what an engine must apply."""
        return _effective(self)

    def _effective(self) -> "Impairment":
        vals = self.values()
        for key in ("delay", "jitter", "jitter_correlation", "loss", "loss_correlation", "rate", "corrupt", "duplicate",
                    "reorder"):
            if vals.get(key) == 0:
                vals.pop(key)
        if vals.get("loss_gemodel") is not None and vals["loss_gemodel"][0] == 0 and vals["loss_gemodel"][3] == 0:
            vals.pop("loss_gemodel")  # never leaves the good state, never loses there: no loss
        if vals.get("up") is True:
            vals.pop("up")
        if "jitter" not in vals:
            vals.pop("jitter_distribution", None)
            vals.pop("jitter_correlation", None)
        if "loss" not in vals:
            vals.pop("loss_correlation", None)
        if vals.get("jitter_distribution") == "uniform":
            vals.pop("jitter_distribution")
        return Impairment.model_validate(vals)

    @property
    def empty(self) -> bool:
        return _empty(self)

    @property
    def down(self) -> bool:
        return self.up is False

    def check_consistent(self, where: str) -> None:
        """Raise SpecError when the effective parameters contradict each other."""
        eff = self.effective()
        if eff.jitter is not None and eff.delay is None:
            raise SpecError(f"{where}: jitter {format_time(eff.jitter)} needs a delay (jitter varies the delay)")
        if eff.jitter is not None and eff.delay is not None and eff.jitter > eff.delay:
            raise SpecError(f"{where}: jitter {format_time(eff.jitter)} is larger than the delay "
                            f"{format_time(eff.delay)} (a packet cannot arrive before it was sent)")
        if eff.loss is not None and eff.loss_gemodel is not None:
            raise SpecError(f"{where}: loss {eff.loss:g}% and loss_gemodel: give one loss model (set loss: 0 to use "
                            "loss_gemodel)")
        if eff.reorder is not None and eff.delay is None:
            raise SpecError(f"{where}: reorder {eff.reorder:g}% needs a delay (reordered packets skip the delay)")

    def describe(self) -> str:
        """'delay 250ms jitter 10ms loss 1% rate 10Mbit' / 'down' / '-' (nothing)."""
        return _describe(self)

    def _describe(self) -> str:
        eff = self.effective()
        if eff.down:
            return "down"
        parts = []
        if eff.delay is not None:
            parts.append(f"delay {format_time(eff.delay)}")
        if eff.jitter is not None:
            dist = f" ({eff.jitter_distribution})" if eff.jitter_distribution else ""
            corr = f" (corr {eff.jitter_correlation:g}%)" if eff.jitter_correlation is not None else ""
            parts.append(f"jitter {format_time(eff.jitter)}{dist}{corr}")
        if eff.loss is not None:
            corr = f" (corr {eff.loss_correlation:g}%)" if eff.loss_correlation is not None else ""
            parts.append(f"loss {eff.loss:g}%{corr}")
        if eff.loss_gemodel is not None:
            parts.append("loss gemodel " + "/".join(f"{x:g}%" for x in eff.loss_gemodel))
        if eff.rate is not None:
            parts.append(f"rate {format_rate(eff.rate)}")
        for key in ("corrupt", "duplicate", "reorder"):
            if getattr(eff, key) is not None:
                parts.append(f"{key} {getattr(eff, key):g}%")
        return " ".join(parts) or "-"


NONE = Impairment()


def impairment(**values: Any) -> Impairment:
    """Impairment from keyword values with units, raising SpecError (one line) on bad input."""
    return _validate(Impairment, values, "impairment")


def _validate(model: type[BaseModel], data: Any, where: str):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown parameter {err['loc'][-1]!r} (known: {', '.join(PARAMS)})"
            loc = ""
        elif err["type"] == "literal_error":
            msg = f"{msg} (got {err.get('input')!r})"
        raise SpecError(f"{where}{'.' + loc if loc else ''}: {msg}") from None


# ------------------------------------------------------------------------------------------ the spec
class LinkValues(Impairment):
    """Inline values, optionally on top of a named profile."""

    profile: Optional[str] = None

    def impairment(self, profiles: dict[str, "Profile"] | None = None) -> Impairment:
        """The profile's values (if any) with the inline values laid over them."""
        base = NONE
        if self.profile is not None:
            profiles = load_profiles() if profiles is None else profiles
            if self.profile not in profiles:
                raise SpecError(f"profile {self.profile!r}: unknown profile (known: {', '.join(sorted(profiles)) or 'none'};"
                                f" see netem/profiles/)")
            base = profiles[self.profile].impairment
        own = Impairment.model_validate(self.model_dump(include=set(PARAMS)))
        return base.merge(own)


class LinkOverride(LinkValues):
    """Values for one link (`between`) or for all of one node's links (`node`)."""

    between: Optional[list[str]] = None
    node: Optional[str] = None
    direction: str = "both"

    @model_validator(mode="after")
    def _target(self) -> "LinkOverride":
        if (self.between is None) == (self.node is None):
            raise ValueError("give exactly one of between: [a, b] or node: name")
        if self.between is not None:
            if len(self.between) != 2 or self.between[0] == self.between[1]:
                raise ValueError(f"between {self.between!r}: expected two different nodes [a, b]")
            if self.direction not in ("both", "a->b", "b->a"):
                raise ValueError(f"direction {self.direction!r}: expected both, a->b or b->a")
        elif self.direction not in ("both", "out", "in"):
            raise ValueError(f"direction {self.direction!r}: expected both, out or in (for node:)")
        return self

    def targets(self, nodes: list[str]) -> list[tuple[str, str]]:
        """The directed links (src, dst) this override covers."""
        if self.between is not None:
            a, b = self.between
            return {"both": [(a, b), (b, a)], "a->b": [(a, b)], "b->a": [(b, a)]}[self.direction]
        n = self.node
        assert n is not None  # an override names `between` or `node` (validated)
        out = [(n, d) for d in nodes if d != n] if self.direction in ("both", "out") else []
        inn = [(s, n) for s in nodes if s != n] if self.direction in ("both", "in") else []
        return out + inn

    def named_nodes(self) -> list[str]:
        if self.between is not None:
            return list(self.between)
        assert self.node is not None  # an override names `between` or `node` (validated)
        return [self.node]


class LinksSpec(Strict):
    """The `links:` section: conditions of every directed ISL link."""

    default: Optional[LinkValues] = None
    overrides: list[LinkOverride] = Field(default_factory=list)
    engine: Optional[str] = None
    tcp_buffers: Optional[Literal["bdp"]] = None  # size each node's TCP buffers from its links' bandwidth-delay product

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in ENGINE_NAMES:
            raise ValueError(f"engine {v!r}: unknown impairment engine (known: {', '.join(ENGINE_NAMES)})")
        return v


DirectedLinks = dict[tuple[str, str], Impairment]


def links_with_engine(links: Optional[LinksSpec], engine: str) -> LinksSpec:
    """`links` (or none) with its engine pinned to `engine` (validated: an unknown name is a SpecError)."""
    doc = links.model_dump(exclude_none=True) if links is not None else {}
    return _validate(LinksSpec, {**doc, "engine": engine}, "--engine")


def check_nodes(links: LinksSpec, nodes: list[str], where: str = "links") -> None:
    """Raise SpecError if an override names a node the swarm does not have."""
    known = set(nodes)
    for i, ov in enumerate(links.overrides):
        for name in ov.named_nodes():
            if name not in known:
                field = "between" if ov.between is not None else "node"
                raise SpecError(f"{where}.overrides[{i}].{field}: node {name!r}: no such node "
                                f"(nodes: {_span(nodes)})")


def _span(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 4 else f"{nodes[0]}..{nodes[-1]}"


def resolve_links(links: Optional[LinksSpec], nodes: list[str], profiles: dict[str, "Profile"] | None = None,
                  where: str = "links") -> DirectedLinks:
    """Conditions per directed link (only links with something set), default first, then overrides in order."""
    if links is None:
        return {}
    check_nodes(links, nodes, where)
    needs_profiles = (links.default and links.default.profile) or any(o.profile for o in links.overrides)
    if needs_profiles and profiles is None:
        profiles = load_profiles()
    out: DirectedLinks = {}
    if links.default is not None:
        base = _with_where(lambda: links.default.impairment(profiles), f"{where}.default")
        if base.values():
            out = {(s, d): base for s in nodes for d in nodes if s != d}
    for i, ov in enumerate(links.overrides):
        imp = _with_where(lambda ov=ov: ov.impairment(profiles), f"{where}.overrides[{i}]")
        for pair in ov.targets(nodes):
            out[pair] = out.get(pair, NONE).merge(imp)
    checked: dict[int, bool] = {}  # each distinct condition checked once (a default is one object on every pair)
    for (s, d), imp in out.items():
        if id(imp) not in checked:
            imp.check_consistent(f"{where}: link {s}->{d}")
            checked[id(imp)] = bool(imp.values())
    if all(checked.values()):
        return out
    return {pair: imp for pair, imp in out.items() if checked[id(imp)]}


def _with_where(fn, where: str):
    try:
        return fn()
    except SpecError as exc:
        raise SpecError(f"{where}.{exc}" if str(exc).startswith("profile ") else f"{where}: {exc}") from None


# ------------------------------------------------------------------------------------------ profiles
class Profile(Strict):
    """A named set of link conditions from netem/profiles/<file>.yaml, with the source it was taken from."""

    name: str
    description: str
    source: str
    impairment: Impairment
    file: str = ""


def profile_dirs() -> list[Path]:
    """Where profiles are looked for: $SWARM_NETEM_DIR, $SWARM_WORKDIR/netem/profiles, netem/profiles/ here."""
    dirs = []
    if os.environ.get("SWARM_NETEM_DIR"):
        dirs.append(Path(os.environ["SWARM_NETEM_DIR"]))
    if os.environ.get("SWARM_WORKDIR"):
        dirs.append(Path(os.environ["SWARM_WORKDIR"]) / "netem" / "profiles")
    dirs.append(Path(__file__).resolve().parents[1] / "profiles")
    return dirs


def parse_profile_file(text: str, source: str) -> dict[str, Profile]:
    """Profiles of one file: `source:` (required, the citation) and `profiles: {name: {description, ...values}}`."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: malformed YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), dict) or not doc.get("source"):
        raise SpecError(f"{source}: a profile file needs `source:` (where the values come from) and `profiles:`")
    out = {}
    for name, body in doc["profiles"].items():
        if not isinstance(body, dict) or not body.get("description"):
            raise SpecError(f"{source}: profiles.{name}: needs a description")
        values = {k: v for k, v in body.items() if k not in ("description", "source")}
        imp = _validate(Impairment, values, f"{source}: profiles.{name}")
        imp.check_consistent(f"{source}: profiles.{name}")
        out[name] = Profile(name=name, description=str(body["description"]).strip(),
                            source=str(body.get("source") or doc["source"]).strip(), impairment=imp, file=source)
    return out


def load_profiles(dirs: Iterable[Path] | None = None) -> dict[str, Profile]:
    """Every profile in the first existing profile directory (names must be unique)."""
    for d in (profile_dirs() if dirs is None else dirs):
        if d.is_dir():
            found: dict[str, Profile] = {}
            for path in sorted(d.glob("*.yaml")):
                for name, prof in parse_profile_file(path.read_text(), str(path)).items():
                    if name in found:
                        raise SpecError(f"{path}: profile {name!r} is also defined in {found[name].file}")
                    found[name] = prof
            return found
    return {}


def round_trip_ms(links: DirectedLinks, a: str, b: str) -> float:
    """Added round-trip delay between a and b: one-way delay a->b plus b->a (for docs and checks)."""
    return sum((links.get(p, NONE).effective().delay or 0.0) for p in ((a, b), (b, a)))


# An orbit step re-plans every link of the nodes it touches (thousands of impairments at 100 nodes); the model is
# frozen and hashable, so what is derived from its fields alone is computed once per distinct value.
@lru_cache(maxsize=8192)
def _effective(imp: Impairment) -> Impairment:
    return imp._effective()


@lru_cache(maxsize=8192)
def _describe(imp: Impairment) -> str:
    return imp._describe()


@lru_cache(maxsize=8192)
def _empty(imp: Impairment) -> bool:
    return not imp.effective().values()
