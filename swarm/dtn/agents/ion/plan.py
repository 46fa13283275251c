"""ION's configuration for one node, from the swarm spec (pure, golden-tested): the files `ionstart` would read.

    ion.config   ionconfig(5): a node-specific shared-memory key and SDR name (ION_NODE_LIST_DIR is set, so
                 several nodes may share one IPC namespace), the heap from `dtn.storage.limit`
    node.ionrc   ionadmin: node number, then a contact and a range per direction between this node and each peer
                 (and itself), from the links the swarm starts with: rate = link rate (bytes/s), range = one-way
                 delay rounded up to whole seconds (ION's unit); the contacts last HORIZON_S
    node.ltprc   ltpadmin (cla: ltp): one span per peer engine, sized from that link's rate x round trip; the
                 seat on the node's ISL address, UDP port 1113
    node.bprc    bpadmin: the ipn and dtn schemes, endpoints ipn:N.1 / dtn://<node>/in (applications) and
                 dtn://<node>/src (ION's senders), the CLA's induct and one outduct per peer, and one egress plan
                 per peer: `ipn:P.0` owns the peer's outduct, `dtn://<peer>` is routed through it as a gateway
                 (bpadmin refuses a second plan on a duct already attached); `dtn.routes` become gateways too
    node.ipnrc   ipnadmin: `routes: [{to: '*', via: X}]` as an exit for every node number
    node.dtn2rc  dtn2admin: empty unless the user adds lines
    start.sh     runs the admin programs on those files in ionstart's order, then the user's lines one at a time
                 (ION's complaint about one of them stops the start with the file and line), then waits; TERM
                 runs ionstop

Node numbers and LTP engine IDs are the node's `dtn.ltp.engine` or its index in the swarm (node i = ipn:i.0), as
for swarm-ltpcla, so ION and dtn7 + swarm-ltpcla nodes reach each other by engine ID. ION's admin endpoint for the
dtn scheme is dtn://<UTS host name>/, which the container backends set to the node's name.

The user's file (`dtn.config`) is in ionstart's combined form: lines between `## begin <admin>` and
`## end <admin>` (ionadmin, ionsecadmin, ltpadmin, bpadmin, ipnadmin, dtn2admin) go to that program after ours.
"""
from __future__ import annotations

import math
import re
import shlex
from datetime import datetime, timezone
from typing import Callable, Optional

from swarm.dtn.agents.base import AgentPlan, ContactLoad, LinkView, Peer, UserConfigError
from swarm.dtn.contacts import ION_RATE_MAX, Contact, ContactPlan, Range, ion_load, pair
from swarm.spec.dtn import APP_SERVICE, DtnSpec, endpoint

#: The admin programs in the order ionstart runs them, with the file each reads.
ADMINS = (("ionadmin", "node.ionrc"), ("ionsecadmin", "node.ionsecrc"), ("ltpadmin", "node.ltprc"),
          ("bpadmin", "node.bprc"), ("ipnadmin", "node.ipnrc"), ("dtn2admin", "node.dtn2rc"))
START = "start.sh"
CONFIG = "ion.config"
#: Where ION's senders (bpsendfile) send from: applications receive on dtn://<node>/in, which one process holds.
SOURCE_SERVICE = "src"
#: ipn: the applications send from ipn:<N>.2 (as on HDTN nodes) and receive on ipn:<N>.1.
SOURCE_SERVICE_NUMBER = 2
#: How long the generated contacts last (s): ION needs a contact for LTP to transmit at all.
HORIZON_S = 30 * 86400
#: The rate of a contact over a link without one (bytes/s): 1 Gbit/s.
UNLIMITED_BPS = 1_000_000_000
#: ION's default base key (ION_DEFAULT_SM_KEY); nodes get keys above it, one per node number.
BASE_WM_KEY = 65281
WM_SIZE = 64 * 1024 * 1024  # bytes of ION's working memory
DEFAULT_HEAP = 256 * 1024 * 1024  # bytes of SDR heap without dtn.storage.limit
#: LTP block (aggregation size, bytes) and the time ION waits to fill one (s).
LTP_BLOCK = 1_000_000
LTP_AGGREGATION_S = 1
MAX_SPAN_SESSIONS = 1000
UDP_MAX_PAYLOAD = 65_000


class IonConfigError(UserConfigError):
    """A user's file ION's start-up cannot take (file, line, why): one line."""


def split_user_config(text: str, source: str) -> dict[str, list[tuple[int, str]]]:
    """The user's file in ionstart's combined form -> admin program -> [(line number, line)] (pure). Comments and
    blank lines are dropped; anything outside a `## begin`/`## end` pair, an unknown program or an unclosed
    section is an IonConfigError naming the line."""
    known = {a for a, _ in ADMINS}
    out: dict[str, list[tuple[int, str]]] = {}
    current: Optional[str] = None
    opened = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        words = line.split()
        if line.startswith("##") and len(words) == 3 and words[1] in ("begin", "end"):
            if words[2] not in known:
                raise IonConfigError(source, n, f"unknown program {words[2]!r} (known: {', '.join(sorted(known))})")
            if words[1] == "begin":
                if current is not None:
                    raise IonConfigError(source, n, f"'## begin {words[2]}' inside the {current} section")
                current, opened = words[2], n
            else:
                if current != words[2]:
                    raise IonConfigError(source, n, f"'## end {words[2]}' without '## begin {words[2]}'")
                current = None
            continue
        if not line or line.startswith("#"):
            continue
        if current is None:
            raise IonConfigError(source, n, "outside any '## begin <program>' ... '## end <program>' section")
        if "'" in line and line.count("'") % 2:
            raise IonConfigError(source, n, "unbalanced quote")
        out.setdefault(current, []).append((n, line))
    if current is not None:
        raise IonConfigError(source, opened, f"'## begin {current}' is never ended")
    return out


def span_sessions(rate_bps: float, rtt: float, block: int = LTP_BLOCK) -> int:
    """Export sessions of one LTP span (its window): blocks in flight over a round trip (and one second of ION's
    own queuing on each side) at the link's rate, plus one, within [2, MAX_SPAN_SESSIONS]."""
    in_flight = rate_bps / 8 * (rtt + 2.0) / block
    return max(2, min(MAX_SPAN_SESSIONS, math.ceil(in_flight) + 1))


def plan_ion(node: str, number: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
             link_of: Callable[[str, str], LinkView], user_text: str = "", user_source: str = "") -> AgentPlan:
    """ION on `node` (node number and LTP engine `number`); ValueError (one line naming the field) for a piece ION
    cannot run. `user_text`: the user's file (`dtn.config`, read by the caller), appended per program."""
    user = split_user_config(user_text, user_source) if user_text else {}
    piece = routes_by_name(piece, node, number, peers)
    wd = workdir.rstrip("/")
    numbers = {node: number, **{p.name: p.index for p in peers}}
    files = {CONFIG: ion_config(number, wd, piece), "node.ionrc": ionrc(node, number, peers, link_of),
             "node.ionsecrc": "1\n", "node.bprc": bprc(node, number, isl_ip, piece, peers, numbers),
             "node.ipnrc": ipnrc(node, piece, numbers), "node.dtn2rc": f"# dtn scheme of {node} (swarm-emu)\n"}
    if piece.cla == "ltp":
        files["node.ltprc"] = ltprc(node, isl_ip, piece, peers, link_of)
    for admin, lines in user.items():  # the user's lines go after ours, one at a time (start.sh)
        files[f"user.{admin}"] = "".join(f"{n}\t{text}\n" for n, text in lines)
    files[START] = start_script(node, [a for a, f in ADMINS if f in files], sorted(user), user_source or "dtn.config",
                                number)
    return AgentPlan(node=node, argv=["sh", f"{wd}/{START}"], workdir=workdir, files=files,
                     web_port=piece.web_port, expected_peers=tuple(p.name for p in peers), agent="ion")


def routes_by_name(piece: DtnSpec, node: str, number: int, peers: list[Peer]) -> DtnSpec:
    """The piece with its static routes naming nodes by name: the framework hands adapters routes by node ID
    (dtn://<name>/ or ipn:<number>.0, swarm.dtn.plan), and ION's plans here are written from names and numbers."""
    if not piece.routes:
        return piece
    names = {endpoint(node): node, f"ipn:{number}.0": node}
    for p in peers:
        names.update({p.eid: p.name, f"ipn:{p.index}.0": p.name})

    def name(token: str) -> str:
        m = re.match(r"^dtn://([^/]+)/$", token)
        return names.get(token) or (m.group(1) if m else token)
    return piece.model_copy(update={"routes": [r.model_copy(update={"to": r.to if r.to == "*" else name(r.to),
                                                                    "via": name(r.via)}) for r in piece.routes]})


def ion_config(number: int, wd: str, piece: DtnSpec) -> str:
    heap = piece.storage.limit or DEFAULT_HEAP
    return (f"# ionconfig of node {number} (swarm-emu)\n"
            f"wmKey {BASE_WM_KEY + number}\nsdrName ion{number}\nwmSize {WM_SIZE}\n"
            f"heapWords {max(1, heap // 8)}\nconfigFlags 1\npathName {wd}\n")


def ionrc(node: str, number: int, peers: list[Peer], link_of: Callable[[str, str], LinkView]) -> str:
    """Node number, then contacts and ranges among the node and its peers (each pair once per direction)."""
    lines = [f"# ION node {number} ({node}), swarm-emu", f"1 {number} {CONFIG}", "s", "m horizon +0"]
    members = [(node, number)] + [(p.name, p.index) for p in peers]
    lines.append(f"a contact +0 +{HORIZON_S} {number} {number} {UNLIMITED_BPS // 8}")
    lines.append(f"a range +0 +{HORIZON_S} {number} {number} 0")
    for a, na in members:
        for b, nb in members:
            if a == b or (a != node and b != node):
                continue  # contacts of this node only: each node announces its own
            link = link_of(a, b)
            rate = int((link.rate or UNLIMITED_BPS) // 8)
            lines.append(f"a contact +0 +{HORIZON_S} {na} {nb} {rate}")
            if a == node:
                lines.append(f"a range +0 +{HORIZON_S} {na} {nb} {math.ceil(max(link.delay, link_of(b, a).delay))}")
    return "\n".join(lines) + "\n"


def ltprc(node: str, isl_ip: str, piece: DtnSpec, peers: list[Peer], link_of: Callable[[str, str], LinkView]) -> str:
    """One span per peer engine (export sessions from the link's rate x round trip), the seat on the ISL."""
    ltp = piece.ltp
    spans = []
    total = 0
    for p in peers:
        link, back = link_of(node, p.name), link_of(p.name, node)
        rate = link.rate or ltp.rate
        if not rate:
            raise ValueError(f"dtn.ltp.rate: link {node}->{p.name} has no rate to pace LTP at; give the link a rate "
                             "(links:) or set dtn.ltp.rate")
        sessions = span_sessions(rate, link.delay + back.delay)
        total += sessions
        spans.append(f"a span {p.index} {sessions} {sessions} {ltp.segment} {LTP_BLOCK} {LTP_AGGREGATION_S} "
                     f"'udplso {p.isl_ip}:{piece.cla_port()}'")
    return "\n".join([f"# LTP of {node} (swarm-emu)", f"1 {max(total, 2)}", *spans,
                      f"s 'udplsi {isl_ip}:{piece.cla_port()}'"]) + "\n"


def _duct(piece: DtnSpec, peer: Peer) -> tuple[str, str, str]:
    """(protocol, outduct name, CLO command) toward `peer`."""
    if piece.cla == "ltp":
        return "ltp", str(peer.index), "ltpclo"
    return "udp", f"{peer.isl_ip}:{piece.cla_port()}", "udpclo"


def bprc(node: str, number: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], numbers: dict[str, int]) -> str:
    if piece.cla not in ("ltp", "udp"):
        raise ValueError(f"dtn.cla {piece.cla!r}: agent 'ion' carries ltp and udp (ION 4.1's tcp is TCPCLv3)")
    lines = [f"# bundle protocol of {node} (swarm-emu)", "1",
             "a scheme ipn 'ipnfw' 'ipnadminep'", "a scheme dtn 'dtn2fw' 'dtn2adminep'",
             f"a endpoint ipn:{number}.1 q", f"a endpoint ipn:{number}.{SOURCE_SERVICE_NUMBER} q",
             f"a endpoint {endpoint(node, APP_SERVICE)} q", f"a endpoint {endpoint(node, SOURCE_SERVICE)} q"]
    if piece.cla == "ltp":
        lines += ["a protocol ltp", f"a induct ltp {number} ltpcli"]
    else:
        lines += ["a protocol udp", f"a induct udp {isl_ip}:{piece.cla_port()} udpcli"]
    for p in peers:
        proto, duct, clo = _duct(piece, p)
        lines.append(f"a outduct {proto} {duct} {clo}" + (f" {UDP_MAX_PAYLOAD}" if proto == "udp" else ""))
    for p in peers:
        proto, duct, _ = _duct(piece, p)
        lines += [f"a plan ipn:{p.index}.0", f"a planduct ipn:{p.index}.0 {proto} {duct}",
                  f"a plan {endpoint(p.name)}", f"g plan {endpoint(p.name)} ipn:{p.index}.0"]
    for route in piece.routes:  # routing: static: to X via Y (Y one of the peers)
        if route.to == "*":
            lines += ["a plan dtn://*", f"g plan dtn://* ipn:{numbers[route.via]}.0"]
        elif route.to not in {p.name for p in peers}:
            lines += [f"a plan {endpoint(route.to)}", f"g plan {endpoint(route.to)} ipn:{numbers[route.via]}.0"]
    lines.append("s")
    return "\n".join(lines) + "\n"


def ipnrc(node: str, piece: DtnSpec, numbers: dict[str, int]) -> str:
    lines = [f"# ipn scheme of {node} (swarm-emu)"]
    for route in piece.routes:
        if route.to == "*":
            lines.append(f"a exit 1 {2 ** 32 - 1} ipn:{numbers[route.via]}.0")
    return "\n".join(lines) + "\n"


#: start.sh: ION from the generated files, then the user's lines one at a time. A line ION rejects (its admin
#: program prints a complaint, or ion.log gains an error line) stops the start with one line naming the file and
#: line, and exit 1; the node's ION is stopped again.
START_SCRIPT = r"""#!/bin/sh
# ION of {node} (swarm-emu, generated): ionstart's order on the files beside this one, then the user's lines.
cd "$(dirname "$0")"
export ION_NODE_LIST_DIR="$PWD" ION_NODE_WDNAME="$PWD"
fail() {{ echo "ION start: $*"; ionstop >/dev/null 2>&1; exit 1; }}
complaint() {{  # ION's complaint about what an admin program just read: an error line of its output, else of ion.log
    printf '%s\n' "$1" | sed 's/^: *//' | grep -m 1 -i -e 'syntax error' -e 'unknown' -e 'invalid' -e "can't" \
        -e 'failed' -e 'usage' -e 'not ' -e '^\[?\]' -e '^\[!\]' && return
    tail -c +"$2" ion.log 2>/dev/null | grep -m 1 -e '\[?\]' -e '\[!\]' -e 'at line [0-9]* of ' | sed 's/^\[[^]]*\] //'
}}
logsize() {{ [ -f ion.log ] && wc -c < ion.log || echo 0; }}
# the admin programs' output goes to a file: the daemons they start inherit it (a pipe would never close)
for step in {admins}; do
    admin=${{step%%:*}} file=${{step#*:}}
    size=$(($(logsize) + 1))
    "$admin" "$file" > admin.out 2>&1 || fail "$admin $file: exit $?: $(tail -n 1 admin.out)"
    why=$(complaint "$(cat admin.out)" "$size")
    [ -z "$why" ] || fail "$admin $file: $why"
done
for admin in {users}; do
    while IFS='	' read -r n line; do
        size=$(($(logsize) + 1))
        printf '%s\nq\n' "$line" | "$admin" > admin.out 2>&1
        why=$(complaint "$(cat admin.out)" "$size")
        [ -z "$why" ] || fail "{source}: line $n ($admin): $why"
    done < "user.$admin"
done
echo "ION started: node {number}"
trap 'ionstop >/dev/null 2>&1; exit 0' TERM INT
while :; do sleep 1; done
"""


#: Milliseconds of the fastest link's rate the host's default UDP receive buffer should hold for ION's udplsi, which
#: sets no buffer of its own: segments dropped while it is descheduled cost LTP a round trip each. BENCHMARKS.md
#: ("ION's LTP at 0 and 4 s"): 1.7 ms (1 Gbit/s, 212,992 B) kept 0.17 of the 0 s goodput at 4 s one-way; 17 ms
#: (100 Mbit/s) held on a quiet host and not beside load; 33 ms (1 Gbit/s, 4 MiB) kept 0.98.
RCVBUF_MS = 30
MIB = 1 << 20


def host_notes(piece: DtnSpec, fastest_bps: int, udp_rcvbuf: int) -> list[str]:
    """A line when the host's default UDP receive buffer holds under RCVBUF_MS of the node's fastest LTP link (pure)."""
    rate = fastest_bps or (piece.ltp.rate or 0)
    if piece.cla != "ltp" or rate <= 0 or udp_rcvbuf * 8 / rate * 1000 >= RCVBUF_MS:
        return []
    want = max(4 * MIB, math.ceil(rate / 8 * RCVBUF_MS / 1000 / MIB) * MIB)
    return [f"ION's LTP reads with the host's default UDP receive buffer (net.core.rmem_default {udp_rcvbuf} B: "
            f"{udp_rcvbuf * 8 / rate * 1000:.1f} ms of a {rate / 1e6:g} Mbit/s link); what the kernel drops while ION "
            f"is descheduled costs LTP a round trip each, so goodput falls with delay: before `swarm up`, "
            f"sysctl -w net.core.rmem_default={want} (docs/DTN.md, ION)"]


#: What node.ionrc's start gives a node: contacts and ranges from +0 to the horizon (see ionrc).
_GENERATED = re.compile(r"^a (contact|range) \+0 \+\d+ (\d+) (\d+) \d+$")


def contact_plan_rc(generated_ionrc: str, load: ContactLoad) -> tuple[str, list[str]]:
    """ionadmin lines that give a running ION node a run's contact plan in place of the contacts its start gave it
    (`generated_ionrc`: its node.ionrc), and what of the plan ION would refuse (one line each; not sent). Pure.

    ION routes (CGR) and paces LTP by its contacts, so it must hold the plan the emulator cuts the links by: the
    generated contacts of each pair the plan names (both directions; every pair when `load.others` is 'down') are
    deleted, and their generated ranges where the plan has its own; then every contact and range of the plan among
    the swarm's DTN nodes is added: the whole plan on every node, as ION deployments load it (CGR plans paths over
    other nodes' contacts). Times are whole seconds from `@` = the release's second. A contact of a pair with no
    range in the plan, and no range from the start, gets the link's one-way delay over its span (whole light
    seconds, rounded up: ION's routes need a range). ION's rules (swarm.dtn.contacts.ion_load) decide what it
    keeps. ION's LTP needs contacts both ways (reports flow back), as ION's own plans give them."""
    generated = [m.groups() for m in map(_GENERATED.match, generated_ionrc.splitlines()) if m and m[2] != m[3]]
    started_ranges = {pair(a, b) for kind, a, b in generated if kind == "range"}
    kept, refused, planned_ranges = _in_ion_terms(load, started_ranges)
    named = {pair(c.a, c.b) for c in kept.contacts}
    lines = [f"# the run's contact plan (swarm-emu): @ = the release, {load.release:.3f}",
             f"@ {datetime.fromtimestamp(math.floor(load.release), timezone.utc):%Y/%m/%d-%H:%M:%S}"]
    for kind, a, b in generated:
        if kind == "contact" and (load.others == "down" or pair(a, b) in named):
            lines.append(f"d contact * {a} {b}")
        elif kind == "range" and pair(a, b) in planned_ranges:
            lines.append(f"d range * {a} {b}")
    lines += [f"a contact +{c.start:.0f} +{c.end:.0f} {c.a} {c.b} {c.rate:.0f}" for c in kept.contacts]
    lines += [f"a range +{r.start:.0f} +{r.end:.0f} {r.a} {r.b} {r.owlt:.0f}" for r in kept.ranges]
    return "\n".join(lines) + "\n", refused


def _in_ion_terms(load: ContactLoad, started_ranges: set[tuple[str, str]]
                  ) -> tuple[ContactPlan, list[str], set[tuple[str, str]]]:
    """The plan among the swarm's DTN nodes as ION keeps it (node numbers, whole seconds from the release's second,
    rates within ION's 32 bits, a range for each contact of a pair without one), what it would refuse, and the
    pairs the plan itself gives ranges for."""
    numbers = load.numbers
    shift = load.release - math.floor(load.release)

    def num(name: str) -> str:
        return str(numbers[name])

    def at(t: float) -> float:
        return float(round(t + shift))

    def rate(c: Contact) -> float:
        return min(ION_RATE_MAX, max(1.0, float(round(c.rate)))) if math.isfinite(c.rate) else ION_RATE_MAX

    ours = [c for c in load.plan.contacts if c.a in numbers and c.b in numbers]
    skipped = [f"line {c.line}: contact {c.a} -> {c.b}: not two DTN nodes of the swarm"
               for c in load.plan.contacts if c.a not in numbers or c.b not in numbers]
    contacts = [Contact(at(c.start), at(c.end), num(c.a), num(c.b), rate(c), c.line) for c in ours]
    ranges = [Range(at(r.start), at(r.end), num(r.a), num(r.b), math.ceil(r.owlt), r.line)
              for r in load.plan.ranges if r.a in numbers and r.b in numbers]
    planned_ranges = {pair(r.a, r.b) for r in ranges}
    ranges += [Range(c.start, c.end, c.a, c.b, math.ceil(load.owlt(raw.a, raw.b)), c.line)
               for c, raw in zip(contacts, ours) if pair(c.a, c.b) not in planned_ranges | started_ranges]
    kept = ion_load(ContactPlan(tuple(contacts), tuple(ranges)))
    refused = skipped + [f"line {x.line}: {'contact' if isinstance(x, Contact) else 'range'} {x.a} -> {x.b} "
                         f"+{x.start:g} +{x.end:g}: {why}" for x, why in kept.refused]
    return kept.kept, refused, planned_ranges


def start_script(node: str, admins: list[str], users: list[str], source: str, number: int = 0) -> str:
    files = dict(ADMINS)
    return START_SCRIPT.format(node=node, admins=" ".join(f"{a}:{files[a]}" for a in admins),
                               users=" ".join(users) or "", source=shlex.quote(source).strip("'"), number=number)
