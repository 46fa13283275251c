"""µD3TN's command and configuration for one node, from the swarm spec (pure, golden-tested).

    start.sh       starts `ud3tn` (the user's build) with the node ID (`-e dtn://<node>/` or `-e ipn:<n>.0`), the
                   CLA listening on the node's ISL address (`-c "mtcp:<ISL address>,<port>"`, µD3TN's own option
                   syntax: `<cla>:<address>,<port>`), its AAP 1.0 and AAP 2.0 sockets in the work folder (`-s`, `-S`)
                   and the bundle lifetime (`-l`); then the in-node helper (flightsw/ud3tn_aap.py, on the user's
                   ud3tn-utils) configures it over AAP and keeps the applications' endpoint
    node.ud3tnrc   µD3TN configuration messages (its config agent's syntax, ud3tn_utils.config.ConfigMessage), one
                   per peer: `1(<peer node ID>):(<cla>:<peer ISL address>:<port>):[(<node ID it reaches>),...]:
                   [{+0,+<horizon>,<bytes/s>}];` a contact from now for HORIZON_S at the link's rate (a `+` time is
                   relative to the start; the helper makes it absolute); a static route `to: X, via: Y` adds X to
                   what Y's contact reaches
    user.ud3tnrc   the user's file (`dtn.config`): their own configuration messages, one per line (`#` comments),
                   sent after ours one at a time, with their line numbers (a line µD3TN rejects stops the start)

µD3TN (v0.13) has the CLAs tcpclv3 (RFC 7242), mtcp, smtcp, tcpspp and BIBE, and no TCPCLv4 and no LTP: of the
swarm's CLAs it carries `mtcp` (as dtn7 does: the two interoperate on it). Its routing follows its contacts: a
bundle goes to the peer whose node ID it is addressed to, or along `dtn.routes`; there is no default route
(`to: '*'`) and no epidemic routing.
"""
from __future__ import annotations

import re

from swarm.dtn.agents.base import AgentPlan, LinkView, Peer, UserConfigError
from swarm.spec.dtn import DtnSpec

PROGRAM = "ud3tn"
START = "start.sh"
RC = "node.ud3tnrc"
USER_RC = "user.ud3tnrc"
#: The in-node helper (in the node image, with flightsw/): configures over AAP, keeps the applications' endpoint.
HELPER = "/opt/swarm/flightsw/ud3tn_aap.py"
AAP_SOCKET = "ud3tn.socket"
AAP2_SOCKET = "ud3tn.aap2.socket"
#: µD3TN's names for the swarm's CLAs it carries (dtn.cla -> the name in its -c option and CLA addresses).
CLA_NAMES = {"mtcp": "mtcp"}
#: How long the generated contacts last (s), like ION's plan: µD3TN sends only within a contact.
HORIZON_S = 30 * 86400
#: The rate of a contact over a link without one (bytes/s): 1 Gbit/s. µD3TN keeps a contact's rate in 32 bits.
UNLIMITED_BYTES_S = 125_000_000
MAX_BYTES_S = 2**32 - 1
#: Lifetime of the bundles µD3TN creates for AAP clients (s): its -l (AAP 1.0 has no per-bundle lifetime).
LIFETIME_S = 86400
#: Log level (-L): 3 = info, where µD3TN says which contacts started and which connections it made.
LOG_LEVEL = 3
#: A configuration message as µD3TN's config agent reads it: <command>(<EID>) then optional :(<CLA address>),
#: :[(<EID>),...] and :[{<from>,<to>,<bytes/s>},...], then ';' (times may be +<s>, relative to the start).
_EID = r"[^()\s]+"
_CONTACT = r"\{\+?\d+,\+?\d+,\d+\}"
CONFIG_LINE = re.compile(rf"^[1-3]\({_EID}\)(:\(([^()\s]*)\))?(:(\[(\({_EID}\)(,\({_EID}\))*)?\])?)?"
                         rf"(:(\[({_CONTACT}(,{_CONTACT})*)?\])?)?;$")


class Ud3tnConfigError(UserConfigError):
    """A line of the user's file that is no µD3TN configuration message (file, line, why): one line."""


def user_lines(text: str, source: str) -> list[tuple[int, str]]:
    """The user's file -> [(line number, configuration message)] (pure); blank and `#` lines dropped. A line that
    is no configuration message in µD3TN's syntax is a Ud3tnConfigError naming it."""
    out = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not CONFIG_LINE.match(line):
            raise Ud3tnConfigError(source, n, f"{line[:60]!r} is no µD3TN configuration message "
                                              "('1(<EID>):(<cla>:<address>):[(<EID>),...]:[{<from>,<to>,<bytes/s>}];')")
        out.append((n, line))
    return out


def cla_of(piece: DtnSpec) -> str:
    """µD3TN's name of the piece's CLA; ValueError naming the field for one it does not have."""
    try:
        return CLA_NAMES[piece.cla]
    except KeyError:
        raise ValueError(f"dtn.cla {piece.cla!r}: agent 'ud3tn' carries {', '.join(CLA_NAMES)} (µD3TN has tcpclv3, "
                         "mtcp, smtcp, tcpspp: no TCPCLv4, no LTP, no UDP)") from None


def contact_rate(link: LinkView) -> int:
    """A contact's rate (bytes/s) from the link's (bit/s; unlimited: 1 Gbit/s), within µD3TN's 32 bits."""
    return max(1, min(MAX_BYTES_S, int((link.rate or UNLIMITED_BYTES_S * 8) // 8)))


def plan_ud3tn(node: str, node_id: str, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str,
               link_of, user_text: str = "", user_source: str = "") -> AgentPlan:
    """µD3TN on `node` (node ID `node_id`); ValueError (one line naming the field) for a piece it cannot run."""
    cla = cla_of(piece)
    if piece.peers != "static":
        raise ValueError(f"node {node!r}: dtn.peers {piece.peers!r}: agent 'ud3tn' needs static peers (µD3TN "
                         "routes by configured contacts, no discovery here)")
    user = user_lines(user_text, user_source or "dtn.config") if user_text else []
    wd = workdir.rstrip("/")
    port = piece.cla_port()
    by_id = {p.eid: p for p in peers}
    reaches: dict[str, list[str]] = {p.eid: [] for p in peers}
    for route in piece.routes:  # node IDs (swarm.dtn.plan resolves names)
        if route.to == "*":
            raise ValueError(f"node {node!r}: dtn.routes to '*': µD3TN has no default route (name each node: "
                             "to: <node>, via: <peer>)")
        if route.via not in by_id:
            raise ValueError(f"node {node!r}: dtn.routes via {route.via!r}: not a peer of {node} (peers: "
                             f"{', '.join(by_id) or 'none'})")
        if route.to not in by_id and route.to not in reaches[route.via]:
            reaches[route.via].append(route.to)
    lines = [f"# µD3TN contacts of {node} (swarm-emu): one per peer, from the start for {HORIZON_S} s"]
    for p in peers:
        via = "[" + ",".join(f"({e})" for e in reaches[p.eid]) + "]" if reaches[p.eid] else ""
        lines.append(f"1({p.eid}):({cla}:{p.isl_ip}:{port}):{via}:[{{+0,+{HORIZON_S},{contact_rate(link_of(node, p.name))}}}];")
    files = {RC: "\n".join(lines) + "\n"}
    if user:
        files[USER_RC] = "".join(f"{n}\t{text}\n" for n, text in user)
    argv = [PROGRAM, "-e", node_id, "-c", f"{cla}:{isl_ip},{port}", "-s", f"{wd}/{AAP_SOCKET}",
            "-S", f"{wd}/{AAP2_SOCKET}", "-l", str(LIFETIME_S), "-L", str(LOG_LEVEL), "-b", "7"]
    files[START] = start_script(node, argv, node_id, piece.app_service(), user_source or "dtn.config", bool(user))
    return AgentPlan(node=node, argv=["sh", f"{wd}/{START}"], workdir=workdir, node_id=node_id, files=files,
                     web_port=piece.web_port, expected_peers=tuple(p.eid for p in peers), agent="ud3tn")


#: start.sh: ud3tn in the background, then the helper (configuration over AAP, then the applications' endpoint);
#: TERM ends both. The helper says "µD3TN start: ..." and exits 1 when µD3TN refuses a line or never answers, and
#: "µD3TN started" once configured.
START_SCRIPT = r"""#!/bin/sh
# µD3TN of {node} (swarm-emu, generated): the user's ud3tn, configured over AAP by the helper.
cd "$(dirname "$0")"
rm -f {aap} {aap2}
{argv} &
ud3tn=$!
python3 {helper} start --socket "$PWD/{aap}" --node-id {node_id} --service {service} --rc {rc}{user} \
    --log "$PWD/dtnd.log" --pid "$ud3tn" &
helper=$!
trap 'kill $helper $ud3tn 2>/dev/null; wait; exit 0' TERM INT
wait $ud3tn
echo "µD3TN start: ud3tn exited ($?)"
kill $helper 2>/dev/null
exit 1
"""


def start_script(node: str, argv: list[str], node_id: str, service: str, source: str, user: bool) -> str:
    quoted = " ".join(_q(a) for a in argv)
    return START_SCRIPT.format(node=node, aap=AAP_SOCKET, aap2=AAP2_SOCKET, argv=quoted, helper=HELPER,
                               node_id=_q(node_id), service=_q(service), rc=RC,
                               user=f" --user {USER_RC} --source {_q(source)}" if user else "")


def _q(word: str) -> str:
    """A word for sh: as is when plain, else in single quotes."""
    if re.fullmatch(r"[\w@%+=:,./-]+", word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"
