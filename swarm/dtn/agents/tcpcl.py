"""TCPCL (RFC 9174) transfers in flight per session, sized from a link's bandwidth-delay product (pure), for
any agent that pipelines transfers (dtn7 as patched: `-O tcp:window=N`; swarm-hardy on hardy-tcpclv4 as
patched: `--window N`).

With one transfer in flight a session carries at most one bundle per round trip whatever the link's rate
(9.6 bundles/s of 100 kB at 100 ms round trip). To fill the link the sender needs rate x RTT bytes in flight,
i.e. that many bundles of the size it sends, and one more so that the next transfer is already queued when
an acknowledgement comes back.
"""
from __future__ import annotations

import math
from typing import Optional

from swarm.spec.dtn import MAX_TCP_WINDOW

#: Transfers in flight the framework sets by itself on a link with no rate (whose product it cannot know). A link
#: with a rate gets its bandwidth-delay product, up to MAX_TCP_WINDOW (the most a user may set in
#: `dtn.tcpcl.window`): capping that at 64 too held 0.3 s one-way at 100 Mbit/s to 87 Mbit/s with the sender
#: app-limited 86 % of the time; its product, 76, filled it (98 Mbit/s; BENCHMARKS.md, 2026-11-28).
AUTO_MAX_WINDOW = 64


def tcp_window(rate_bps: Optional[float], rtt: float, bundle_bytes: int, most: int = MAX_TCP_WINDOW) -> int:
    """Transfers in flight that keep a link of `rate_bps` (None or 0: unlimited) busy over a round trip of `rtt`
    s with bundles of `bundle_bytes`: ceil(rate x RTT / bundle bits) + 1, clamped to [1, most]; an unlimited link
    gets AUTO_MAX_WINDOW (or `most` if lower). No round trip (rtt 0): 1, the agents' published behaviour, which
    suffices there."""
    if rtt < 0 or bundle_bytes <= 0:
        raise ValueError(f"tcp window: round trip {rtt} s, bundle {bundle_bytes} bytes: must be >= 0 and > 0")
    if rtt == 0:
        return 1
    if not rate_bps:
        return min(most, AUTO_MAX_WINDOW)
    return max(1, min(most, math.ceil(rate_bps * rtt / (8 * bundle_bytes)) + 1))


def fastest_rate(rates: list[Optional[float]]) -> Optional[float]:
    """The rate a node's window is sized for: its fastest link toward its peers (bit/s), None (unlimited) when it
    has none or any of them is unlimited."""
    return None if not rates or not all(rates) else max(r for r in rates if r)


def session_window(configured: Optional[int], rate_bps: Optional[float], rtt: float, bundle_bytes: int) -> int:
    """A node's TCPCL window: the spec's `dtn.tcpcl.window` when set (`configured`), else tcp_window; one rule for
    every agent that pipelines (dtn7's `-O tcp:window`, swarm-hardy's `--window`)."""
    return configured or tcp_window(rate_bps, rtt, bundle_bytes)
