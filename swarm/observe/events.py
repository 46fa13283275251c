"""The swarm's event log: one append-only JSON-lines file per swarm (`<state dir>/events.jsonl`), written
through `emit` by each source (the link controller: condition changes, faults, node actions; the fault
timeline and the orbit driver through it or beside it; `up`), and followed by `swarm events` and the view.

Why a file and not a socket or a daemon: a swarm nobody watches pays one small O_APPEND write per change
(no process, no port), every writer (the CLI, a sweep, the orbit driver, in other processes) appends without
a lock (O_APPEND writes of one line land whole), and a follower started late still sees the history.

Each line: {"t": unix seconds, "type": ..., "cause": who made it happen, ...}. Types:
  swarm   {"state": "up", "nodes": n}
  link    {"src", "dst", "state": "up"|"cut"|"down", "conditions": "delay 10ms loss 1%" | ""}
  fault   {"kind": "cut"|"heal"|"partition"|"node", "args": [...]}
  node    {"node", "state": "stopped"|"killed"|"paused"|"running"...}
  engine  {"node", "what": "restart", "line": the engine's log line}   (seen by the follower in the log)
  mesh    {"state": "converged"|"not converged", "converge_s", "problem"}: a wait for the mesh (up, faults)
  run     {"experiment", "message"} or {"experiment", "done", "total", "what"}: an experiment's progress
The cause is a ContextVar: "command: swarm fault ..." by default, "fault timeline" or "orbit schedule" inside
`caused_by(...)`.
"""
from __future__ import annotations

import contextvars
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

EVENTS_FILE = "events.jsonl"
_CAUSE: contextvars.ContextVar[str | None] = contextvars.ContextVar("swarm_event_cause", default=None)


def default_cause() -> str:
    """Who runs this process: `command: swarm <args>` for the CLI, else the program's name."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    prog = argv0.parent.name if argv0.name == "__main__.py" else argv0.name  # `python -m pkg`: the package
    if prog == "swarm":
        return "command: swarm " + " ".join(sys.argv[1:])
    return f"program: {prog}"


@contextmanager
def caused_by(cause: str) -> Iterator[None]:
    """Events emitted inside are attributed to `cause` (e.g. "fault timeline", "orbit schedule")."""
    token = _CAUSE.set(cause)
    try:
        yield
    finally:
        _CAUSE.reset(token)


def current_cause() -> str:
    return _CAUSE.get() or default_cause()


def event(type_: str, **fields) -> dict:
    """One event (pure but for the clock and the cause)."""
    return {"t": round(time.time(), 6), "type": type_, "cause": fields.pop("cause", None) or current_cause(), **fields}


def emit(state_dir: Path, type_: str, **fields) -> dict:
    """Append one event to the swarm's log; never fails the caller (an event log is no reason to stop a run)."""
    ev = event(type_, **fields)
    try:
        if state_dir.is_dir():
            fd = os.open(state_dir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (json.dumps(ev, separators=(",", ":")) + "\n").encode())
            finally:
                os.close(fd)
    except OSError:
        pass
    return ev


def link_changes(before: dict, after: dict) -> list[dict]:
    """The per-directed-link changes between two {(src, dst): (state, conditions)} views (pure), in order."""
    out = []
    for pair in sorted(set(before) | set(after)):
        old, new = before.get(pair, ("up", "")), after.get(pair, ("up", ""))
        if old != new:
            out.append({"src": pair[0], "dst": pair[1], "state": new[0], "conditions": new[1],
                        "was": {"state": old[0], "conditions": old[1]}})
    return out


def format_event(ev: dict) -> str:
    """One readable line for the table of `swarm events` (pure)."""
    when = time.strftime("%H:%M:%S", time.localtime(ev.get("t", 0))) + f".{int(ev.get('t', 0) * 1000) % 1000:03d}"
    kind = ev.get("type", "?")
    if kind == "link":
        what = f"{ev['src']} -> {ev['dst']}: {ev['state']}" + (f" ({ev['conditions']})" if ev.get("conditions") else "")
    elif kind == "fault":
        what = f"{ev['kind']} {' '.join(map(str, ev.get('args', [])))}".strip()
    elif kind == "node":
        what = f"{ev['node']}: " + (f"{ev['action']} (now {ev['state']})" if ev.get("action") else
                                    f"{ev.get('was', '?')} -> {ev['state']}")
    elif kind == "engine":
        what = f"{ev['node']}: {ev.get('what', '')} {ev.get('line', '')}".strip()
    elif kind == "swarm":
        what = f"{ev.get('state', '')}" + (f" ({ev['nodes']} nodes)" if "nodes" in ev else "")
    elif kind == "mesh":
        what = f"mesh {ev.get('state', '')}" + (f" in {ev['converge_s']} s" if ev.get("converge_s") != "" else "") \
            + (f": {ev['problem']}" if ev.get("problem") else "")
    elif kind == "run":
        what = ev.get("message") or f"{ev.get('what', '')} ({ev.get('done', 0):.0f}/{ev.get('total', 0):.0f})"
    else:
        what = " ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "type", "cause"))
    return f"{when}  {kind:<6}  {what:<44}  {ev.get('cause', '')}"


def follow(state_dir: Path, *, history: bool = True, poll: float = 0.1, alive: Callable[[], bool] | None = None,
           extra: Callable[[], list[dict]] | None = None, once: bool = False) -> Iterator[dict]:
    """The swarm's events as they are appended (like `tail -f`), from the start with `history`; ends when the
    state directory goes (`swarm down`) with a final {"type": "swarm", "state": "down"}. `extra()` is
    polled about once a second for events the follower itself notices (e.g. an engine's restart). `once`:
    what the log holds now, then stop."""
    path = state_dir / EVENTS_FILE
    pos = 0 if history or not path.exists() else path.stat().st_size
    buf = b""
    last_extra = 0.0
    while True:
        if path.exists():
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            pos += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
        if once:
            return
        if extra and time.monotonic() - last_extra > 1.0:
            last_extra = time.monotonic()
            yield from extra()
        if not state_dir.is_dir() or (alive is not None and not alive()):
            yield {"t": round(time.time(), 6), "type": "swarm", "state": "down", "cause": "observed"}
            return
        time.sleep(poll)


class LogWatch:
    """Notices engine restarts in the userspace engines' logs (`logs/<node>.linkd.log`): the restart loop in
    the node writes one line per restart, which no framework process sees happen. Only a follower reads them."""

    MARK = "restarting"

    def __init__(self, state_dir: Path):
        self.dir = state_dir / "logs"
        self.pos: dict[Path, int] = {}
        for p in self.dir.glob("*.linkd.log") if self.dir.is_dir() else []:
            self.pos[p] = p.stat().st_size  # what happened before we watched is in the log itself

    def __call__(self) -> list[dict]:
        out = []
        for p in sorted(self.dir.glob("*.linkd.log")) if self.dir.is_dir() else []:
            start = self.pos.get(p, 0)
            size = p.stat().st_size
            if size <= start:
                self.pos[p] = size
                continue
            with open(p, "rb") as f:
                f.seek(start)
                text = f.read(size - start).decode(errors="replace")
            self.pos[p] = size
            for line in text.splitlines():
                if self.MARK in line:
                    out.append({"t": round(time.time(), 6), "type": "engine", "node": p.name.split(".")[0],
                                "what": "restart", "line": line.strip()[:200], "cause": "observed"})
        return out


def link_view(base: dict, cuts: set) -> dict:
    """{(src, dst): (state, conditions)} of a link state's configured conditions and cuts (pure); links
    without either are "up" with no conditions and left out."""
    out = {}
    for pair in set(base) | set(cuts):
        imp = base.get(pair)
        conditions = "" if imp is None else imp.describe().replace("down", "").strip(" ,")
        conditions = "" if conditions == "-" else conditions
        if pair in cuts:
            state = "cut"
        elif imp is not None and imp.up is False:
            state = "down"
        else:
            state = "up"
        if state != "up" or conditions:
            out[pair] = (state, conditions)
    return out


class NodeWatch:
    """Notices node state changes nobody commanded (a node's process ended, a container died): the backend's
    node states every `every` seconds, only while a follower runs."""

    def __init__(self, states: Callable[[], dict], every: float = 2.0):
        self.states = states
        self.every = every
        self.last: dict | None = None
        self.at = 0.0

    def __call__(self) -> list[dict]:
        if time.monotonic() - self.at < self.every:
            return []
        self.at = time.monotonic()
        try:
            now = self.states()
        except Exception:  # noqa: BLE001 - a backend hiccup while watching is no event
            return []
        old, self.last = self.last, now
        if old is None:
            return []
        return [{"t": round(time.time(), 6), "type": "node", "node": n, "state": now.get(n, "missing"),
                 "was": old.get(n, "missing"), "cause": "observed"}
                for n in sorted(set(old) | set(now)) if old.get(n) != now.get(n)]


class RunEvents:
    """An experiment run's progress into the event log of each swarm it runs (`run` events): its messages
    (the run folder, warnings, results) and its progress, at most one progress event per `every` seconds
    unless the phase changes (the first word of what it is doing). A swarm not up has no state directory,
    and emit() writes nothing there: only a running swarm's watchers see its experiment."""

    def __init__(self, state_dirs: list[Path], experiment: str, every: float = 2.0):
        self.dirs, self.experiment, self.every = state_dirs, experiment, every
        self.last = (0.0, "")

    def _emit(self, **fields) -> None:
        with caused_by(f"experiment {self.experiment}"):
            for d in self.dirs:
                emit(d, "run", experiment=self.experiment, **fields)

    def message(self, text: str) -> None:
        self._emit(message=str(text)[:500])

    def progress(self, done: float, total: float, what: str) -> None:
        phase = what.split(" ", 1)[0] if what else ""
        now = time.monotonic()
        if phase == self.last[1] and now - self.last[0] < self.every:
            return
        self.last = (now, phase)
        self._emit(done=round(float(done), 3), total=round(float(total or 0), 3), what=what)
