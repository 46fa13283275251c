"""Contact plans in ION's ionadmin syntax, and the link schedule they mean (pure).

Accepted lines (ION's `ionadmin` commands, https://ion-dtn.sourceforge.io: ionadmin(1)):

    a contact <from> <until> <node A> <node B> <rate bytes/s> [<confidence>]
    a range   <from> <until> <node A> <node B> <one-way light time s>
    # comments and blank lines
    1 ... / s / m ... / @ ...     ionadmin's other commands: accepted and ignored (they set up an ION node)

Times are `+<seconds>` (relative to the start of the run) or absolute `yyyy/mm/dd-hh:mm:ss[.fff]` (UTC; then
relative to the earliest absolute time in the plan). Nodes are swarm node names or ION node numbers (ipn
node N: the node whose `dtn.number` / LTP engine ID is N, else the swarm's N-th node; swarm.spec.dtn.node_numbers).
A line that does not parse is a ValueError naming its line number.

What the emulator does with a plan (`link_schedule`): a pair of nodes is connected while a contact in either
direction is open (the emulated ISL is bidirectional: TCP-based CLAs need their acknowledgements to flow
back) and cut otherwise, from time 0; pairs named in no contact stay as they are unless `others="down"`.
A contact's rate becomes that direction's link rate and a range's light time that pair's one-way delay,
where the experiment asks for them.

This module is the project's one ION parser and one ION writer (`write_ion`; the orbit planner's exporter
calls it), `ion_load` says what a real ionadmin keeps of a plan (ION's rules, checked against ionadmin's own
output in tests/data/ion/), and `write_hdtn` / `parse_hdtn` do the same for HDTN's JSON contact plan.
"""
from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Optional, Sequence, Union

_ABS_RE = re.compile(r"^(\d{4})/(\d{2})/(\d{2})-(\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)\Z")
_REL_RE = re.compile(r"^\+(\d+(?:\.\d+)?)\Z")
_NUM_RE = re.compile(r"^\d+(?:\.\d+)?\Z")
#: ionadmin commands that set up an ION node rather than describe contacts: accepted, ignored.
_IGNORED = {"1", "s", "m", "@", "x", "e", "w", "h", "q", "l", "i"}


@dataclass(frozen=True)
class Contact:
    """A directed contact A -> B open in [start, end) s, at `rate` bytes/s."""

    start: float
    end: float
    a: str
    b: str
    rate: float
    line: int


@dataclass(frozen=True)
class Range:
    """One-way light time between A and B (both directions) in [start, end) s."""

    start: float
    end: float
    a: str
    b: str
    owlt: float
    line: int


@dataclass(frozen=True)
class ContactPlan:
    contacts: tuple[Contact, ...]
    ranges: tuple[Range, ...]
    #: Unix time of time 0: the `@` line's instant, else the earliest absolute time; None: relative only
    epoch: Optional[float] = None

    def nodes(self) -> list[str]:
        seen: dict[str, None] = {}
        items: tuple[Union[Contact, Range], ...] = (*self.contacts, *self.ranges)
        for item in items:
            seen.setdefault(item.a)
            seen.setdefault(item.b)
        return list(seen)

    def among(self, nodes: "set[str] | frozenset[str]") -> "ContactPlan":
        """The contacts and ranges between `nodes` only (pure): what agents on those nodes alone can use."""
        return ContactPlan(tuple(c for c in self.contacts if c.a in nodes and c.b in nodes),
                           tuple(r for r in self.ranges if r.a in nodes and r.b in nodes), self.epoch)

    def horizon(self) -> float:
        """The end of the last contact or range (s)."""
        items: tuple[Union[Contact, Range], ...] = (*self.contacts, *self.ranges)
        return max((x.end for x in items), default=0.0)


def _time(token: str) -> tuple[str, float]:
    rel = _REL_RE.match(token)
    if rel:
        return "rel", float(rel.group(1))
    ab = _ABS_RE.match(token)
    if ab:
        y, mo, d, h, mi = (int(ab.group(i)) for i in range(1, 6))
        sec = float(ab.group(6))
        try:
            stamp = datetime(y, mo, d, h, mi, int(sec), tzinfo=timezone.utc).timestamp() + (sec - int(sec))
        except ValueError as exc:
            raise ValueError(f"time {token!r}: {exc}") from None
        return "abs", stamp
    raise ValueError(f"time {token!r}: expected +<seconds> or yyyy/mm/dd-hh:mm:ss")


def _number(token: str, what: str) -> float:
    if not _NUM_RE.match(token):
        raise ValueError(f"{what} {token!r}: expected a non-negative number")
    return float(token)


def parse_contact_plan(text: str, source: str = "contact plan") -> ContactPlan:
    """Parse ION `a contact` / `a range` lines. Raises ValueError('<source> line N: ...') on the first bad line."""
    raw: list[tuple[str, int, tuple, tuple, str, str, float]] = []
    reference: Optional[float] = None
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            if words[0] == "@" and len(words) == 2 and _ABS_RE.match(words[1]):
                at = _time(words[1])[1]  # ionadmin's reference time: `+N` counts from it
                if reference is not None and at != reference:
                    raise ValueError(f"a second '@' reference time ({words[1]})")
                reference = at
            elif words[0] != "a":
                _other_command(words[0])
            else:
                kind, t0, t1, a, b, value = _contact_line(words)
                raw.append((kind, number, t0, t1, a, b, value))
        except ValueError as exc:
            raise ValueError(f"{source} line {number}: {exc}") from None
    return _plan(raw, reference)


def _plan(raw: list[tuple[str, int, tuple, tuple, str, str, float]], reference: Optional[float]) -> ContactPlan:
    """The parsed lines as a plan, times relative: absolute ones from the `@` reference, else from the earliest."""
    absolute = [t[1] for r in raw for t in (r[2], r[3]) if t[0] == "abs"]
    epoch = reference if reference is not None else (min(absolute) if absolute else 0.0)
    contacts, ranges = [], []
    for kind, number, t0, t1, a, b, value in raw:
        start = t0[1] - (epoch if t0[0] == "abs" else 0.0)
        end = t1[1] - (epoch if t1[0] == "abs" else 0.0)
        if kind == "contact":
            contacts.append(Contact(start, end, a, b, value, number))
        else:
            ranges.append(Range(start, end, a, b, value, number))
    return ContactPlan(tuple(contacts), tuple(ranges), epoch if (absolute or reference is not None) else None)


def _other_command(word: str) -> None:
    """An ionadmin command other than `a`: ignored if it sets up an ION node, else a ValueError."""
    if word in _IGNORED:
        return
    if re.fullmatch(r"[a-z_]{1,16}", word):  # a command-like word: named
        raise ValueError(f"unknown command {word!r} (expected 'a contact' or 'a range')")
    # anything else is not echoed: a file that is not a contact plan (/etc/shadow given by mistake)
    raise ValueError("not a contact plan line (expected 'a contact' or 'a range')")


def _contact_line(words: list[str]) -> tuple[str, tuple, tuple, str, str, float]:
    """The fields of one `a contact` / `a range` line, checked: (kind, from, until, node A, node B, rate or owlt)."""
    if len(words) < 2 or words[1] not in ("contact", "range"):
        got = words[1] if len(words) > 1 else "nothing"
        raise ValueError(f"'a {got}': only 'a contact' and 'a range' describe contacts")
    kind = words[1]
    want = (7, 8) if kind == "contact" else (7,)
    if len(words) not in want:
        raise ValueError(f"'a {kind}' takes {' or '.join(str(w - 2) for w in want)} fields "
                         f"(from until nodeA nodeB {'rate [confidence]' if kind == 'contact' else 'owlt'}), "
                         f"got {len(words) - 2}")
    t0, t1 = _time(words[2]), _time(words[3])
    if t0[0] != t1[0]:
        raise ValueError("mixes a relative and an absolute time")
    if t1[1] <= t0[1]:
        raise ValueError(f"until {words[3]!r} is not after from {words[2]!r}")
    a, b = words[4], words[5]
    if a == b:
        raise ValueError(f"node {a!r} to itself")
    value = _number(words[6], "rate (bytes/s)" if kind == "contact" else "owlt (s)")
    if kind == "contact" and value <= 0:
        raise ValueError(f"rate {words[6]!r}: must be positive")
    if kind == "contact" and len(words) == 8 and _number(words[7], "confidence") > 1:
        raise ValueError(f"confidence {words[7]!r}: must be between 0 and 1")
    return kind, t0, t1, a, b, value


def resolve_nodes(plan: ContactPlan, swarm_nodes: Sequence[str], source: str = "contact plan",
                  numbers: Optional[dict[str, int]] = None) -> ContactPlan:
    """Map ION node numbers to swarm node names and check every name exists. `numbers`: node name -> its ipn
    node number (swarm.spec.dtn.node_numbers: `dtn.number`, the LTP engine ID, else the index), so a plan names
    the nodes `ipn:N.0` names; default N -> the N-th node."""
    by_number = {str(v): k for k, v in numbers.items()} if numbers else {
        str(i): n for i, n in enumerate(swarm_nodes, start=1)}

    def name(token: str, line: int) -> str:
        if token in swarm_nodes:
            return token
        if token.isdigit() and token.lstrip("0") in by_number:
            return by_number[token.lstrip("0")]
        span = ", ".join(swarm_nodes) if len(swarm_nodes) <= 5 else f"{swarm_nodes[0]}..{swarm_nodes[-1]}"
        known = (f"1..{len(swarm_nodes)}" if not numbers else ", ".join(sorted(by_number, key=int))
                 if len(by_number) <= 5 else f"{len(by_number)} node numbers")
        raise ValueError(f"{source} line {line}: node {token!r}: no such node (nodes: {span}, or {known})")

    contacts = tuple(Contact(c.start, c.end, name(c.a, c.line), name(c.b, c.line), c.rate, c.line)
                     for c in plan.contacts)
    ranges = tuple(Range(r.start, r.end, name(r.a, r.line), name(r.b, r.line), r.owlt, r.line) for r in plan.ranges)
    return ContactPlan(contacts, ranges, plan.epoch)


def renamed(plan: ContactPlan, names: dict[str, str], shift: float = 0.0) -> ContactPlan:
    """The plan with node tokens renamed (`names`: token -> name; others kept) and every time moved by
    `shift` s (e.g. ION's `@` instant minus a run's release: times then count from the release)."""
    def n(token: str) -> str:
        return names.get(token, token)

    return ContactPlan(tuple(Contact(c.start + shift, c.end + shift, n(c.a), n(c.b), c.rate, c.line)
                             for c in plan.contacts),
                       tuple(Range(r.start + shift, r.end + shift, n(r.a), n(r.b), r.owlt, r.line)
                             for r in plan.ranges),
                       None if plan.epoch is None else plan.epoch - shift)


# ------------------------------------------------------------------------------------------- writers
def _fmt(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}" if decimals else str(int(round(x)))


def write_ion(items: Iterable[Union[Contact, Range]], header: Sequence[str] = (), epoch: Optional[float] = None,
              decimals: int = 0, owlt_decimals: int = 0) -> str:
    """ionadmin text, in the order given: `# header` lines, `@ yyyy/mm/dd-hh:mm:ss` (UTC, whole seconds) when
    `epoch` (Unix s) is given, then `a contact +FROM +UNTIL A B BYTES_PER_S` / `a range +FROM +UNTIL A B
    OWLT_S`. `decimals`: digits of the times (0 = whole seconds, what ionadmin reads)."""
    lines = [f"# {h}" for h in header]
    if epoch is not None:
        lines.append(f"@ {datetime.fromtimestamp(math.floor(epoch), timezone.utc):%Y/%m/%d-%H:%M:%S}")
    for x in items:
        t = f"+{_fmt(x.start, decimals)} +{_fmt(x.end, decimals)} {x.a} {x.b}"
        if isinstance(x, Contact):
            lines.append(f"a contact {t} {int(x.rate)}")
        else:
            lines.append(f"a range {t} {_fmt(x.owlt, owlt_decimals)}")
    return "\n".join(lines) + "\n"


HDTN_KEYS = ("contact", "source", "dest", "startTime", "endTime", "rateBitsPerSec", "owlt")


def write_hdtn(rows: Iterable[tuple[int, int, int, int, int, int]]) -> dict:
    """HDTN's contact plan document from (source, dest, startTime, endTime, rateBitsPerSec, owlt) rows, in
    the order given: {"contacts": [{contact, source, dest, startTime, endTime, rateBitsPerSec, owlt}]}."""
    return {"contacts": [dict(zip(HDTN_KEYS, (i, *(int(v) for v in row)))) for i, row in enumerate(rows)]}


def parse_hdtn(doc: dict, source: str = "HDTN contact plan") -> ContactPlan:
    """Read HDTN's JSON contact plan back: one Contact (rate in bytes/s: rateBitsPerSec / 8; 0, HDTN's
    "unlimited", is infinite) and one Range (its owlt) per entry; `line` is the entry's index. Entries
    HDTN could not use (a missing or non-integer field, node 0, end not after start) are a ValueError."""
    contacts, ranges = [], []
    for i, c in enumerate(doc.get("contacts", [])):
        bad = [k for k in HDTN_KEYS if not isinstance(c.get(k), int) or isinstance(c.get(k), bool) or c[k] < 0]
        if bad:
            raise ValueError(f"{source} contact {i}: {bad[0]} {c.get(bad[0])!r}: expected a non-negative integer")
        if c["source"] == 0 or c["dest"] == 0 or c["source"] == c["dest"]:
            raise ValueError(f"{source} contact {i}: source {c['source']} dest {c['dest']}: "
                             "nodes must be > 0 and differ")
        if c["endTime"] <= c["startTime"]:
            raise ValueError(f"{source} contact {i}: endTime {c['endTime']} is not after startTime {c['startTime']}")
        a, b = str(c["source"]), str(c["dest"])
        rate = c["rateBitsPerSec"] / 8 if c["rateBitsPerSec"] else math.inf
        contacts.append(Contact(float(c["startTime"]), float(c["endTime"]), a, b, rate, i))
        ranges.append(Range(float(c["startTime"]), float(c["endTime"]), a, b, float(c["owlt"]), i))
    return ContactPlan(tuple(contacts), tuple(ranges))


# ------------------------------------------------------------------------------- what ionadmin keeps
ION_RATE_MAX = 2**32 - 1  # ION's xmitRate is an unsigned int (bytes/s): ~34.4 Gbit/s


@dataclass(frozen=True)
class IonLoad:
    """What ionadmin keeps of a plan (`kept`, times as in the plan) and what it refuses, with ION's reason."""

    kept: ContactPlan
    refused: tuple[tuple[Union[Contact, Range], str], ...]


def ion_load(plan: ContactPlan) -> IonLoad:
    """Load a plan under ION's rules, in file order (ici/library/rfx.c, checked against a real ionadmin in
    tests/unit/test_contact_export.py): nodes are integers > 0; times whole seconds; a contact's rate an
    integer in 1..2^32-1 bytes/s; a contact is the CLOSED interval [from, until], so one that shares even
    its first or last second with a kept contact of the same directed pair is refused ("Overlapping contact
    ignored"); ranges are compared with strict inequality (touching ranges are kept)."""
    kept_c: dict[tuple[str, str], list[Contact]] = {}
    kept_r: dict[tuple[str, str], list[Range]] = {}
    contacts: list[Contact] = []
    ranges: list[Range] = []
    refused: list[tuple[Union[Contact, Range], str]] = []

    def invalid(x: Union[Contact, Range]) -> Optional[str]:
        for node in (x.a, x.b):
            if not (node.isdigit() and int(node) > 0):
                return f"node {node!r} is not an ION node number (integer > 0)"
        if x.start != int(x.start) or x.end != int(x.end):
            return "times are not whole seconds"
        if isinstance(x, Contact) and not (x.rate == int(x.rate) and 1 <= x.rate <= ION_RATE_MAX):
            return f"rate {x.rate:g} bytes/s is not an unsigned 32-bit integer"
        return None

    for c in plan.contacts:
        why = invalid(c) or next(("Overlapping contact ignored" for k in kept_c.get((c.a, c.b), [])
                                  if c.start <= k.end and k.start <= c.end), None)
        if why:
            refused.append((c, why))
        else:
            kept_c.setdefault((c.a, c.b), []).append(c)
            contacts.append(c)
    for r in plan.ranges:
        why = invalid(r) or next(("Overlapping range ignored" for k in kept_r.get((r.a, r.b), [])
                                  if r.start < k.end and k.start < r.end), None)
        if why:
            refused.append((r, why))
        else:
            kept_r.setdefault((r.a, r.b), []).append(r)
            ranges.append(r)
    return IonLoad(ContactPlan(tuple(contacts), tuple(ranges), plan.epoch), tuple(refused))


# ------------------------------------------------------------------------------------------- schedule
@dataclass(frozen=True)
class LinkEvent:
    """At `at` s, the link between `a` and `b` (a < b by name order) goes `up` or `down`."""

    at: float
    action: str  # "up" | "down"
    a: str
    b: str


def _merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def open_intervals(plan: ContactPlan) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Per unordered pair, the merged intervals in which a contact in either direction is open."""
    per: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c in plan.contacts:
        per.setdefault(pair(c.a, c.b), []).append((c.start, c.end))
    return {k: _merge(v) for k, v in sorted(per.items())}


def link_schedule(plan: ContactPlan, nodes: Optional[Sequence[str]] = None, others: str = "keep") -> list[LinkEvent]:
    """Up/down events in time order. At 0 every pair of the plan not in contact is cut; then each pair goes
    up at the start and down at the end of each of its merged intervals (no event at the very end of the
    plan is dropped: the last `down` is kept so a run longer than the plan sees the link gone). With
    `others="down"`, every other pair of `nodes` is cut at 0 as well."""
    if others not in ("keep", "down"):
        raise ValueError(f"others {others!r}: expected 'keep' or 'down'")
    spans = open_intervals(plan)
    events: list[LinkEvent] = []
    for (a, b), intervals in spans.items():
        if intervals[0][0] > 0:
            events.append(LinkEvent(0.0, "down", a, b))
        for s, e in intervals:
            if s > 0:
                events.append(LinkEvent(s, "up", a, b))
            events.append(LinkEvent(e, "down", a, b))
    if others == "down" and nodes:
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                if pair(a, b) not in spans:
                    events.append(LinkEvent(0.0, "down", *pair(a, b)))
    order = {"down": 0, "up": 1}
    return sorted(events, key=lambda e: (e.at, order[e.action], e.a, e.b))


def down_windows(events: Sequence[LinkEvent], horizon: float) -> dict[str, list[tuple[str, float, float]]]:
    """Per node, when the link toward each peer is down: node -> [(peer, from s, until s)] (both directions),
    from a `link_schedule`. A link down at 0 is down from well before 0 (the run's lead-in); one still down at
    the end stays down to `horizon` and a day beyond (cue LTP's timers to stay suspended)."""
    since: dict[tuple[str, str], float] = {}
    out: dict[str, list[tuple[str, float, float]]] = {}

    def close(a: str, b: str, start: float, end: float) -> None:
        out.setdefault(a, []).append((b, start, end))
        out.setdefault(b, []).append((a, start, end))

    for e in sorted(events, key=lambda e: e.at):
        key = (e.a, e.b)
        if e.action == "down" and key not in since:
            since[key] = -3600.0 if e.at <= 0 else e.at
        elif e.action == "up" and key in since:
            close(e.a, e.b, since.pop(key), e.at)
    for (a, b), start in since.items():
        close(a, b, start, max(horizon, start) + 86_400.0)
    return out


def availability(plan: ContactPlan, a: str, b: str, horizon: Optional[float] = None) -> float:
    """Share of [0, horizon) in which the pair a-b is in contact."""
    end = plan.horizon() if horizon is None else horizon
    if end <= 0:
        return 0.0
    spans = open_intervals(plan).get(pair(a, b), [])
    return sum(max(0.0, min(e, end) - max(s, 0.0)) for s, e in spans) / end


def periodic_plan(nodes: Sequence[str], links: Sequence[tuple[str, str]], period: float, up: float,
                  duration: float, rate: float = 125_000_000, stagger: float = 0.0) -> str:
    """ION text for links that are up `up` s of every `period` s until `duration` (e.g. 50 % availability:
    up = period / 2); link k is shifted by k * stagger s. Both directions are written."""
    if not 0 < up <= period:
        raise ValueError(f"up {up} s: must be in (0, period {period} s]")
    lines = [f"# periodic contacts: {up:g} s of every {period:g} s, {len(links)} links, {duration:g} s"]
    del nodes  # the names are in `links`; kept in the signature for symmetry with link_schedule
    for k, (a, b) in enumerate(links):
        t = (k * stagger) % period
        while t < duration:
            end = min(t + up, duration)
            for x, y in ((a, b), (b, a)):
                lines.append(f"a contact +{t:g} +{end:g} {x} {y} {int(rate)}")
            t += period
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- earliest delivery
@dataclass(frozen=True)
class Hop:
    """One contact a bundle rides on its earliest path: it leaves `a` at `depart` and reaches `b` at `arrive`."""

    a: str
    b: str
    start: float  # the contact's window
    end: float
    depart: float
    arrive: float


def light_time(plan: ContactPlan, a: str, b: str, at: float) -> float:
    """One-way light time a<->b at `at` (s): the range open then (either order), else 0."""
    for r in plan.ranges:
        if {r.a, r.b} == {a, b} and r.start <= at < r.end:
            return r.owlt
    return 0.0


def earliest_arrival(plan: ContactPlan, src: str, dst: str, created: float,
                     horizon: Optional[float] = None) -> Optional[tuple[float, tuple[Hop, ...]]]:
    """The earliest moment a bundle created at `src` at `created` can reach `dst` on the plan's contacts, and
    the contacts it rides: contact-graph earliest arrival (Dijkstra on arrival time). A contact a->b open in
    [start, end) carries a bundle that is at `a` at time t if max(t, start) < end; it reaches `b` one light
    time (the range open at departure) later. Contact volume (rate x duration) is not a limit: bundles are
    small against it. None when no path opens before `horizon` (default: never)."""
    by_from: dict[str, list[Contact]] = {}
    for c in plan.contacts:
        by_from.setdefault(c.a, []).append(c)
    best: dict[str, float] = {src: created}
    via: dict[str, tuple[str, Hop]] = {}
    queue = [(created, src)]
    done: set[str] = set()
    while queue:
        t, node = heapq.heappop(queue)
        if node in done:
            continue
        done.add(node)
        if node == dst:
            hops: list[Hop] = []
            while node != src:
                prev, hop = via[node]
                hops.append(hop)
                node = prev
            return t, tuple(reversed(hops))
        for c in by_from.get(node, ()):
            depart = max(t, c.start)
            if depart >= c.end or (horizon is not None and depart >= horizon):
                continue
            arrive = depart + light_time(plan, c.a, c.b, depart)
            if arrive < best.get(c.b, float("inf")):
                best[c.b] = arrive
                via[c.b] = (node, Hop(c.a, c.b, c.start, c.end, depart, arrive))
                heapq.heappush(queue, (arrive, c.b))
    return None
