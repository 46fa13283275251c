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
  log     {"message"}: a follower's own note about the log (a bad line skipped, the log truncated); never written
The cause is "command: swarm fault ..." (the process's own command line) unless the writer names another:
`emit(..., cause="fault timeline")`, or a link controller made with `LinkController.caused_by("orbit schedule")`.
"""
from __future__ import annotations

import heapq
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

EVENTS_FILE = "events.jsonl"


def default_cause() -> str:
    """Who runs this process: `command: swarm <args>` for the CLI, else the program's name."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    prog = argv0.parent.name if argv0.name == "__main__.py" else argv0.name  # `python -m pkg`: the package
    if prog == "swarm":
        return "command: swarm " + " ".join(sys.argv[1:])
    return f"program: {prog}"


def event(type_: str, **fields) -> dict:
    """One event (pure but for the clock and the process's command line): `cause`, when given and not None,
    says who made it happen; else the process's command (default_cause)."""
    return {"t": round(time.time(), 6), "type": type_, "cause": fields.pop("cause", None) or default_cause(), **fields}


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


def emit_many(state_dir: Path, type_: str, many: list[dict], cause: str | None = None) -> None:
    """Append events of one type in one write (a swarm's links at `up`: thousands at once), each with `cause`
    (see event); never fails."""
    lines = "".join(json.dumps(event(type_, **{"cause": cause, **fields}), separators=(",", ":")) + "\n" for fields in many)
    try:
        if lines and state_dir.is_dir():
            fd = os.open(state_dir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
    except OSError:
        pass


#: one change shared by more directed links than this is logged as one `links` event (how many, a few examples)
#: rather than one `link` event per link: a 1,000-node swarm's default delay is 999,000 links
BULK_LINKS = 256


def grouped_view_changes(before: dict, after: dict, bulk: int = BULK_LINKS) -> tuple[list[dict], list[dict]]:
    """grouped_link_changes(link_changes(before, after)) without sorting every changed pair (pure): a change many
    links share is counted and its four first pairs found in one pass; only the others are sorted."""
    plain = ("up", "")
    groups: dict[tuple, list] = {}
    for pair, new in after.items():
        old = before.get(pair, plain)
        if old != new:
            groups.setdefault((new, old), []).append(pair)
    for pair, old in before.items():
        if pair not in after and old != plain:
            groups.setdefault((plain, old), []).append(pair)
    single: list[tuple] = []
    bulked = []
    for (new, old), pairs in groups.items():
        if len(pairs) > bulk:
            bulked.append({"state": new[0], "conditions": new[1], "links": len(pairs),
                           "examples": [f"{s}->{d}" for s, d in heapq.nsmallest(4, pairs)],
                           "was": {"state": old[0], "conditions": old[1]}})
        else:
            single += [(pair, new, old) for pair in pairs]
    return ([{"src": pair[0], "dst": pair[1], "state": new[0], "conditions": new[1],
              "was": {"state": old[0], "conditions": old[1]}} for pair, new, old in sorted(single)], bulked)


def grouped_link_changes(changes: list[dict], bulk: int = BULK_LINKS) -> tuple[list[dict], list[dict]]:
    """(`link` events, `links` events) of a list of link_changes (pure): a change (state, conditions, was) that
    more than `bulk` links share becomes one `links` event with their count and the first four as examples."""
    groups: dict[tuple, list[dict]] = {}
    for c in changes:
        groups.setdefault((c["state"], c["conditions"], c["was"]["state"], c["was"]["conditions"]), []).append(c)
    single, bulked = [], []
    for (state, conditions, was_state, was_conditions), group in groups.items():
        if len(group) > bulk:
            bulked.append({"state": state, "conditions": conditions, "links": len(group),
                           "examples": [f"{c['src']}->{c['dst']}" for c in group[:4]],
                           "was": {"state": was_state, "conditions": was_conditions}})
        else:
            single += group
    order = {id(c): i for i, c in enumerate(changes)}
    return sorted(single, key=lambda c: order[id(c)]), bulked


def link_changes(before: dict, after: dict) -> list[dict]:
    """The per-directed-link changes between two {(src, dst): (state, conditions)} views (pure), in order."""
    plain = ("up", "")
    pairs = [p for p, new in after.items() if before.get(p, plain) != new]
    pairs += [p for p in before if p not in after and before[p] != plain]
    out = []
    for pair in sorted(pairs):  # only the pairs that changed (a swarm's links at `up`: up to 10^6 of them)
        old, new = before.get(pair, plain), after.get(pair, plain)
        out.append({"src": pair[0], "dst": pair[1], "state": new[0], "conditions": new[1],
                    "was": {"state": old[0], "conditions": old[1]}})
    return out


#: Fields an event of each type must carry as strings (what `format_event` and the view read by key).
REQUIRED = {"link": ("src", "dst", "state"), "fault": ("kind",), "node": ("node", "state"), "engine": ("node",)}
READ_CHUNK = 1 << 20  # a follower reads the log this much at a time, never the whole file
MAX_LINE = 1 << 20  # a longer line is no event of ours: skipped unread past this


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_event(line: bytes) -> tuple[dict | None, str]:
    """(event, "") for a line of the log, (None, problem) for one that is no event (pure): a JSON object with
    a finite number `t`, a string `type` and, for the types that need them, their fields as strings."""
    try:
        ev = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({str(exc).splitlines()[0][:80]})"
    if not isinstance(ev, dict):
        return None, "not a JSON object"
    t = ev.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or abs(t) > 1e11:
        return None, "no time (t) in unix seconds"
    if not isinstance(ev.get("type"), str):
        return None, "no type"
    missing = [k for k in REQUIRED.get(ev["type"], ()) if not isinstance(ev.get(k), str)]
    if missing:
        return None, f"a {ev['type']} event without {', '.join(missing)}"
    return ev, ""


def format_event(ev: dict) -> str:
    """One readable line for the table of `swarm events` (pure); a field of an unexpected kind shows as the
    event's fields rather than failing the table."""
    t = ev.get("t", 0)
    t = t if isinstance(t, (int, float)) and math.isfinite(t) and abs(t) < 1e11 else 0
    when = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
    kind = ev.get("type", "?")
    try:
        what = _describe(ev, kind)
    except (KeyError, TypeError, ValueError):
        what = " ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "type", "cause"))
    return f"{when}  {kind!s:<6}  {what:<44}  {ev.get('cause', '')}"


def _describe(ev: dict, kind: str) -> str:
    if kind == "link":
        return f"{ev['src']} -> {ev['dst']}: {ev['state']}" + (f" ({ev['conditions']})" if ev.get("conditions") else "")
    if kind == "links":
        return f"{ev['links']} links, e.g. {', '.join(ev.get('examples', []))}: {ev['state']}" + \
            (f" ({ev['conditions']})" if ev.get("conditions") else "")
    if kind == "fault":
        return f"{ev['kind']} {' '.join(map(str, ev.get('args', [])))}".strip()
    if kind == "node":
        return f"{ev['node']}: " + (f"{ev['action']} (now {ev['state']})" if ev.get("action") else
                                    f"{ev.get('was', '?')} -> {ev['state']}")
    if kind == "engine":
        return f"{ev['node']}: {ev.get('what', '')} {ev.get('line', '')}".strip()
    if kind == "swarm":
        return f"{ev.get('state', '')}" + (f" ({ev['nodes']} nodes)" if "nodes" in ev else "")
    if kind == "mesh":
        return f"mesh {ev.get('state', '')}" + (f" in {ev['converge_s']} s" if ev.get("converge_s") != "" else "") \
            + (f": {ev['problem']}" if ev.get("problem") else "")
    if kind == "run":
        return ev.get("message") or f"{ev.get('what', '')} ({ev.get('done', 0):.0f}/{ev.get('total', 0):.0f})"
    if kind == "log":
        return str(ev.get("message", ""))
    return " ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "type", "cause"))


def _notice(message: str) -> dict:
    """An event about the log itself (a bad line, a truncation), from the follower, never written to the log."""
    return {"t": round(time.time(), 6), "type": "log", "message": message, "cause": "observed"}


class _LogReader:
    """The log's complete lines from where it last stopped, at most READ_CHUNK bytes a call: a bad line is
    counted and skipped (the first one said), a log that shrank (truncated, or replaced by a shorter one)
    is read again from the start (said)."""

    def __init__(self, path: Path, pos: int):
        self.path, self.pos, self.buf = path, pos, b""
        self.line_no = 0 if pos == 0 else None  # unknown when following from the end
        self.bad = 0

    def read(self) -> tuple[list[dict], bool]:
        """(events and notices, whether more is waiting)."""
        out: list[dict] = []
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.pos:
                    out.append(_notice(f"{self.path}: the log shrank from {self.pos} to {size} bytes (truncated); "
                                       "reading it again from the start"))
                    self.pos, self.buf, self.line_no = 0, b"", 0
                f.seek(self.pos)
                chunk = f.read(READ_CHUNK)
        except OSError:
            return out, False
        self.pos += len(chunk)
        *lines, self.buf = (self.buf + chunk).split(b"\n")
        if len(self.buf) > MAX_LINE:
            lines.append(self.buf)  # no newline in sight: no event of ours either
            self.buf = b""
        for line in lines:
            if self.line_no is not None:
                self.line_no += 1
            if not line.strip():
                continue
            ev, problem = parse_event(line)
            if ev is not None:
                out.append(ev)
                continue
            self.bad += 1
            if self.bad == 1:
                where = f"line {self.line_no}" if self.line_no is not None else "a line"
                out.append(_notice(f"{self.path}: {where}: {problem}; skipped (later bad lines are counted)"))
        return out, len(chunk) == READ_CHUNK

    def summary(self) -> list[dict]:
        return [_notice(f"{self.path}: {self.bad} bad lines skipped")] if self.bad > 1 else []


def follow(state_dir: Path, *, history: bool = True, poll: float = 0.1, alive: Callable[[], bool] | None = None,
           extra: Callable[[], list[dict]] | None = None, once: bool = False) -> Iterator[dict]:
    """The swarm's events as they are appended (like `tail -f`), from the start with `history`; ends when the
    state directory goes (`swarm down`) with a final {"type": "swarm", "state": "down"}. `extra()` is
    polled about once a second for events the follower itself notices (e.g. an engine's restart). `once`:
    what the log holds now, then stop. The log is read in chunks (a large one streams; memory stays flat),
    and what goes wrong with it comes as `log` events (swarm.observe.events._LogReader)."""
    path = state_dir / EVENTS_FILE
    reader = _LogReader(path, 0 if history or not path.exists() else path.stat().st_size)
    last_extra = 0.0
    while True:
        more = True
        while more:
            events, more = reader.read()
            yield from events
        if once:
            yield from reader.summary()
            return
        if extra and time.monotonic() - last_extra > 1.0:
            last_extra = time.monotonic()
            yield from extra()
        if not state_dir.is_dir() or (alive is not None and not alive()):
            yield from reader.summary()
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
            start = max(start, size - READ_CHUNK)  # a log that grew by more than this is read from its last MiB
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
    seen: dict[int, tuple[str, str]] = {}  # per distinct condition object (a default is one on every pair)

    def view(imp) -> tuple[str, str]:
        if id(imp) not in seen:
            conditions = "" if imp is None else imp.describe().replace("down", "").strip(" ,")
            seen[id(imp)] = ("down" if imp is not None and imp.up is False else "up",
                             "" if conditions == "-" else conditions)
        return seen[id(imp)]

    for pair, imp in base.items():
        state, conditions = view(imp)
        if pair in cuts:
            state = "cut"
        if state != "up" or conditions:
            out[pair] = (state, conditions)
    for pair in cuts:
        if pair not in base:
            out[pair] = ("cut", "")
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
        for d in self.dirs:
            emit(d, "run", experiment=self.experiment, cause=f"experiment {self.experiment}", **fields)

    def message(self, text: str) -> None:
        self._emit(message=str(text)[:500])

    def progress(self, done: float, total: float, what: str) -> None:
        phase = what.split(" ", 1)[0] if what else ""
        now = time.monotonic()
        if phase == self.last[1] and now - self.last[0] < self.every:
            return
        self.last = (now, phase)
        self._emit(done=round(float(done), 3), total=round(float(total or 0), 3), what=what)
