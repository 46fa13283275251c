"""swarm-ltpcla (flightsw/ltpcla), the program behind `cla: ltp`, planned for any agent that carries it through an
external convergence layer (pure): its argv, its link-down file from the contact plan, and its counters.

Its engine ID is the node's index, and each peer's one-way light time and pacing rate are those of the link toward
it (`links:`), or `dtn.ltp.rate`.
"""
from __future__ import annotations

from typing import Any

from swarm.dtn.agents.base import LinkView, Peer
from swarm.spec.dtn import DtnSpec

LTPCLA = "swarm-ltpcla"
LTP_LOG = "ltp.csv"  # every block, retransmission, cancel and refusal (swarm-ltpcla --log)
LTP_STATUS = "ltp-status.json"  # counters, rewritten each second (swarm-ltpcla --status)
LTP_DOWN = "ltp-down.txt"  # link-down windows from the contact plan (swarm-ltpcla --down)


def plan_ltp(node: str, engine: int, isl_ip: str, piece: DtnSpec, peers: list[Peer], workdir: str, ws_url: str,
             link_of: Any) -> list[str]:
    """swarm-ltpcla's argv for `node` (pure); `ws_url`: the agent's external-CLA WebSocket; `link_of(a, b)` ->
    LinkView of the directed link a->b. ValueError (one line naming the field) for a peer whose link has no rate
    and no `dtn.ltp.rate` to pace at."""
    ltp = piece.ltp
    wd = workdir.rstrip("/")
    argv = [LTPCLA, "--ws", ws_url, "--engine", str(engine),
            "--bind", f"{isl_ip}:{piece.cla_port()}", "--segment", str(ltp.segment), "--red", f"{ltp.red:g}",
            "--margin", f"{ltp.margin:g}", "--rtx-limit", str(ltp.rtx_limit), "--attempts", str(ltp.attempts),
            "--log", f"{wd}/{LTP_LOG}", "--status", f"{wd}/{LTP_STATUS}", "--down", f"{wd}/{LTP_DOWN}"]
    for peer in peers:
        link: LinkView = link_of(node, peer.name)
        rate = link.rate or ltp.rate
        if not rate:
            raise ValueError(f"dtn.ltp.rate: link {node}->{peer.name} has no rate to pace LTP at; give the link a "
                             f"rate (links:) or set dtn.ltp.rate")
        if link.delay < 0:
            raise ValueError(f"links: link {node}->{peer.name} delay {link.delay:g} s: not a one-way light time")
        argv += ["--peer", f"{peer.index},{peer.isl_ip}:{piece.cla_port()},{int(rate)},{link.delay:g}"]
    for i, ext in enumerate(ltp.peers):  # LTP engines outside the swarm (dtn.ltp.peers), e.g. ION
        rate = ext.rate or ltp.rate
        if not rate:
            raise ValueError(f"dtn.ltp.peers[{i}].rate: peer {ext.address} has no rate to pace LTP at; set it or "
                             "dtn.ltp.rate")
        argv += ["--peer", f"{ext.engine},{ext.address},{int(rate)},{ext.owlt:g}"]
    return argv


def ltp_down_windows(windows: list[tuple[str, float, float]], engine_of: dict[str, int], t0: float) -> str:
    """The down file of one node (pure): `windows` = (peer node, from s, until s) relative to `t0` (Unix s)
    -> lines `<peer engine> <from unix> <until unix>`."""
    lines = ["# link-down windows (swarm-emu): <peer engine> <from, unix s> <until, unix s>"]
    for peer, a, b in windows:
        lines.append(f"{engine_of[peer]} {t0 + a:.3f} {t0 + b:.3f}")
    return "\n".join(lines) + "\n"


def ltp_summary(counters: dict) -> dict:
    """What `swarm dtn` shows of swarm-ltpcla's counters (its ltp-status.json): registered with dtnd, LTP
    sessions open (sending + receiving), blocks sent / received, segments retransmitted, sessions cancelled
    (by us or by the peer), bundles refused or dropped."""
    get = lambda k: int(counters.get(k) or 0)  # noqa: E731
    return {"registered": bool(counters.get("registered")), "sessions_open": get("send_sessions") + get("recv_sessions"),
            "blocks_sent": get("blocks_sent"), "blocks_received": get("blocks_received"),
            "retransmitted_segments": get("retransmitted_segments"), "cancels": get("cancels") + get("recv_cancels"),
            "refused": get("refused"), "dropped": get("dropped"), "queued": get("queued")}
