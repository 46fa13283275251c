"""An experiment's `capture:` section: packet captures of named links or nodes, taken while the experiment's
swarms run and kept in the run folder (capture/<swarm>-<what>.pcapng), for any experiment type.

```yaml
capture:
  links: [[sat01, sat10]]        # directed links, each at the sender's egress and the receiver's ingress
  nodes: [gs01, {node: sat03, iface: ground}]
  snaplen: 128                   # bytes kept per packet (default: all)
  ring: {size: 10MB, files: 4}   # a bound: each end keeps at most `files` files of `size` (default: none)
```

Why beside the experiment types rather than in each: the section is the same for all of them, so the run
command strips it before the type validates the rest (experiments.registry) and starts one watcher per run,
which follows each swarm's event log for its `up` and then runs swarm.observe.capture on it. The captures end
when the swarm goes down (its interfaces go with it) or the run ends, and are then merged like `swarm capture`.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swarm.errors import SpecError
from swarm.observe.capture import IFACES, Capture, link_ends, node_end
from swarm.observe.events import EVENTS_FILE, follow
from swarm.runtime.backends import swarm_dir
from swarm.spec.dtn import parse_size
from swarm.spec.model import read_yaml, validate_document


class NodeCapture(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str
    iface: str = "isl"

    @field_validator("iface")
    @classmethod
    def _iface(cls, v: str) -> str:
        if v not in IFACES:
            raise ValueError(f"{v!r}: expected one of {', '.join(IFACES)}")
        return v


class Ring(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(description="bytes per file (e.g. 10MB)")
    files: int = Field(ge=2, le=1000)

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        size = parse_size(v, "ring.size")
        if size < 1024:
            raise ValueError("at least 1kB")
        return size


class CaptureSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    links: list[tuple[str, str]] = []
    nodes: list[NodeCapture] = []
    snaplen: int = Field(0, ge=0)
    ring: Optional[Ring] = None

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> Any:
        return [{"node": n} if isinstance(n, str) else n for n in v] if isinstance(v, list) else v


def take_section(data: Any, source: str) -> Optional[CaptureSection]:
    """Remove and validate the `capture:` section of a parsed experiment document (one-line SpecError)."""
    if not isinstance(data, dict) or "capture" not in data:
        return None
    section = validate_document(CaptureSection, data.pop("capture") or {}, f"{source}: capture", "capture")
    if not section.links and not section.nodes:
        raise SpecError(f"{source}: capture: name at least one link ([A, B]) or node")
    return section


def section_of(path: str | Path) -> Optional[CaptureSection]:
    """The `capture:` section of an experiment file (None without one, or when the file cannot be read: the
    experiment's own loading says why)."""
    try:
        data = read_yaml(path, "experiment")
    except SpecError:
        return None
    return take_section(data, str(path))


def check_names(section: CaptureSection, nodes: list[str], source: str) -> None:
    """Every node the section names is a node of one of the experiment's swarms (one-line SpecError)."""
    known = set(nodes)
    for name in [x for pair in section.links for x in pair] + [n.node for n in section.nodes]:
        if name not in known:
            raise SpecError(f"{source}: capture: node {name!r} is not a node of the experiment's swarms")
    for a, b in section.links:
        if a == b:
            raise SpecError(f"{source}: capture: link [{a}, {b}]: give two different nodes")


class RunCaptures:
    """Captures of one experiment run: for each swarm of the run, once it is up, every link and node of the
    section that is one of its nodes; stopped and merged just before the swarm goes down (`finish`, which the
    run hands to each swarm it brings up as a `before_down` hook) or when the run ends."""

    def __init__(self, section: CaptureSection, swarm_names: list[str], out_dir: Path, workdir: Path, *,
                 attach: Callable[[str], Any], message: Callable[[str], None] = lambda m: None):
        """`attach(name)`: the running swarm (Swarm.attach), handed in so this module needs no import of the
        facade."""
        self.section, self.out, self.workdir, self.message = section, out_dir, workdir, message
        self.attach = attach
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.active: dict[str, list[Capture]] = {}
        self.threads = [threading.Thread(target=self._watch, args=(n,), daemon=True) for n in dict.fromkeys(swarm_names)]
        self.written: list[Path] = []

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> list[Path]:
        """End every capture still running (the run ended with its swarm up); returns the files written."""
        self.stop_event.set()
        for t in self.threads:
            t.join(30)
        for name in list(self.active):
            self.finish(name)
        return self.written

    def _watch(self, name: str) -> None:
        state = swarm_dir(self.workdir, name)
        while not self.stop_event.is_set():  # each time the swarm comes up (a sweep brings each size up once)
            if not (state / EVENTS_FILE).exists():
                self.stop_event.wait(0.2)
                continue
            for ev in follow(state, history=True, poll=0.2, alive=lambda: not self.stop_event.is_set()):
                if ev.get("type") == "swarm" and ev.get("state") == "up":
                    self._start(name)
                    break
            for _ev in follow(state, history=False, poll=0.2, alive=lambda: not self.stop_event.is_set()):
                pass  # until this swarm goes down (its state directory goes) or the run ends

    def _start(self, name: str) -> None:
        try:
            swarm = self.attach(name)
        except SpecError:
            return
        nodes = {n.name for n in swarm.nodes}
        self.out.mkdir(parents=True, exist_ok=True)
        ring = (self.section.ring.size // 1024, self.section.ring.files) if self.section.ring else None
        selections = [(f"{a}-{b}", link_ends(swarm.node(a), swarm.node(b))) for a, b in self.section.links
                      if a in nodes and b in nodes]
        selections += [(f"{n.node}-{n.iface}", [node_end(swarm.node(n.node), n.iface)]) for n in self.section.nodes
                       if n.node in nodes]
        with self.lock:
            for what, ends in selections:
                cap = Capture(swarm, ends, self.out / f"{name}-{what}.pcapng", snaplen=self.section.snaplen, ring=ring,
                              force=True)  # the run's own folder: a swarm up again replaces its capture, as before
                try:
                    cap.start()
                    self.active.setdefault(name, []).append(cap)
                except Exception as exc:  # noqa: BLE001 - a capture that cannot start is said, the run goes on
                    self.message(f"capture {what}: not started: {exc}")

    def finish(self, name: str) -> None:
        """Stop and merge the captures of swarm `name` (before its interfaces go); never raises."""
        with self.lock:
            caps = self.active.pop(name, [])
        for cap in caps:
            try:
                cap.stop()
                counts = cap.finish()
                self.written.append(cap.output)
                self.message(f"capture: {cap.output} (" + "; ".join(f"{label}: {n} packets" for label, n in counts) + ")")
            except Exception as exc:  # noqa: BLE001
                self.message(f"capture {cap.output.name}: not written: {exc}")
