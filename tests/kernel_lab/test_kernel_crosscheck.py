"""Cross-check: the same 2-node spec through kernel NetEm (`netem`) and the userspace engine (`userspace`,
swarm-linkd on iptables NFQUEUE), each pinned with `links: {engine: ...}`, inside the kernel lab (Debian's kernel
under qemu, which has both sch_netem and NFQUEUE). tests/kernel_lab/guest_crosscheck.py measures, per engine:
600 pings sat01->sat02 over delay 50 ms, jitter 5 ms normal, loss 5 % (sat01->sat02 only) -- the RTT
distribution and the loss -- and the TCP goodput (iperf3, 5 s) over rate 2 Mbit/s (sat02->sat01). One guest
boot, one guest Python process for the module (1.7-2.0 min under TCG at load 1-5.5).

Tolerances (stated, and why). Measured in 9 runs of each engine under TCG on this 2-core host at load 1.0-5.5,
4 with the engine holding packets at the receiver's PREROUTING and 5 at the switch's FORWARD (main's netns
backend, br_netfilter + xt_physdev); figures in BENCHMARKS.md, kernel-lab section:
- RTT median: |userspace - netem| <= 5 ms. Measured +0.9, +1.0, +1.1, +1.6 (receiver) and +1.4, +1.8, +2.2, +2.8,
  +3.6 ms (switch), always the userspace engine higher: each ping crosses kernel -> swarm-linkd -> kernel twice
  (request on the delayed link, reply on the rate link), each crossing two context switches of an emulated
  CPU. Statistically the medians of ~570 samples of a normal with sigma 5 ms are known to ~0.26 ms; the rest
  is that overhead and TCG.
- Shape: the robust spread (interquartile range / 1.349, which is sigma for a normal) and the p5..p95 width,
  userspace / netem, within [0.75, 1.33]. Measured IQR ratios 0.87-1.13, p5..p95 ratios 0.90-1.19; the
  standard error of an IQR from ~570 samples is ~6 %, so ~9 % for a ratio of two, and TCG adds some.
- Standard deviation: the plain stdev is ruled by a few stalls of the emulated guest (a vCPU descheduled by the
  host holds one packet 20-100+ ms): one run gave 12.6 ms beside netem's 5.3 ms with quartiles within 13 %.
  So it is judged on the RTTs between each sample's own p1 and p99 (the stalls trimmed): ratio within
  [0.75, 1.33] (measured 0.91-1.10 in the 6 runs that kept the RTTs); the untrimmed ratio only within
  [0.4, 2.5] (measured 0.87-1.37, once 2.38).
- Loss: |userspace - netem| <= 4 percentage points (binomial sigma of the difference of two 600-ping samples
  at 5 %: 1.26 pp; 4 pp > 3 sigma). Measured differences -1.67 to +0.83 pp.
- Rate: goodput userspace / netem within [0.95, 1.05], over 10 s of TCP. Nine runs of 5 s measured 1.012-1.028
  while swarm-linkd paced IP bytes (goodput 0.965 of the rate = 1448/1500) and the netem engine's HTB paces
  Ethernet frames (1448/1514 = 0.956 at most; measured 0.94-0.95); since swarm-linkd counts the wire length as
  NetEm does (Ethernet header, GSO as its segments) two runs gave 1.89 vs 1.89 Mbit/s (ratio 1.00), and a
  third, in a CI run, 1.77 vs 1.89 (0.936): one stall of the emulated CPU costs a 5 s sample ~6 %, hence 10 s
  and +-5 %.
So that agreement cannot come from two engines that both do nothing, each engine's figures are also judged
against the spec (median 50-58 ms, robust sigma 3-8 ms, loss within 4 pp of 5 %, goodput 0.85-1.02 of
2 Mbit/s), and each run is checked to be the engine it claims: netem qdiscs and no NFQUEUE'd packet for
`netem`; no netem qdisc and the pings' and TCP segments' packets queued to userspace for `userspace`.
"""
from __future__ import annotations

import json
import statistics
import sys

import pytest

from conftest import REPO, require
from klab import save_figures

pytestmark = [pytest.mark.kernel_lab, pytest.mark.root, pytest.mark.slow]
ENGINES = ("netem", "userspace")


def quantile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def shape(rtts: list[float]) -> dict:
    """Robust figures of an RTT sample: quartiles, IQR-based sigma, p5..p95 width, stdev between p1 and p99."""
    lo, hi = quantile(rtts, 1), quantile(rtts, 99)
    trimmed = [r for r in rtts if lo <= r <= hi]
    return {"robust_sigma": (quantile(rtts, 75) - quantile(rtts, 25)) / 1.349,
            "width_5_95": quantile(rtts, 95) - quantile(rtts, 5),
            "trimmed_stdev": statistics.pstdev(trimmed)}


@pytest.fixture(scope="module")
def fig(caps, request):
    """Per engine, the guest run's figures (KL-RESULT line of guest_crosscheck.py) and robust ones from its RTTs;
    under "guest": the modules loaded and the namespaces left at the end. The guest runs the host's
    swarm-linkd (its root is the host's), so without one there is nothing to boot for."""
    require("swarm-linkd", bool(caps.linkd), "swarm-linkd not built (make setup)")
    kernel_lab = request.getfixturevalue("kernel_lab")
    res = kernel_lab.run([sys.executable, "tests/kernel_lab/guest_crosscheck.py", "kl-xc", "225", *ENGINES],
                         cwd=str(REPO), env={"PYTHONPATH": str(REPO)}, timeout=900, echo=True)
    lines = [line for line in res.stdout.splitlines() if line.startswith("KL-RESULT ")]
    assert res.rc == 0 and lines, f"guest run failed (rc {res.rc}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    results = json.loads(lines[-1].removeprefix("KL-RESULT "))
    figures = {r["engine"]: dict(r, **shape(r["rtts"])) for r in results if "engine" in r}
    figures["guest"] = results[-1]
    save_figures("crosscheck", figures)
    return figures


def test_each_engine_is_the_one_that_ran(fig):
    """The guest has NFQUEUE (and the bridge netfilter hooks, where the engine holds packets at the switch);
    `netem` ran on qdiscs with nothing queued to userspace, `userspace` on NFQUEUE with no netem qdisc."""
    modules = set(fig["guest"]["modules"])
    assert {"sch_netem", "xt_NFQUEUE", "nfnetlink_queue"} <= modules, sorted(modules)
    net, usr = fig["netem"], fig["userspace"]
    assert net["engine_used"] == "netem" and net["netem_qdiscs"] >= 1 and net["nfqueue_packets"] == 0, net
    # 600 echo requests on the delayed link plus the TCP segments on the rate link pass the engine
    assert usr["engine_used"] == "userspace" and usr["netem_qdiscs"] == 0 and usr["nfqueue_packets"] >= 1000, usr
    assert not fig["guest"]["namespaces_left"], fig["guest"]


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_meets_the_spec(fig, engine):
    """Not a cross-check: keeps two engines that both ignore the spec from agreeing."""
    e = fig[engine]
    assert 50.0 <= e["median"] <= 58.0, e["median"]
    assert 3.0 <= e["robust_sigma"] <= 8.0, e["robust_sigma"]
    assert abs(e["loss_pct"] - 5.0) <= 4.0, e["loss_pct"]
    assert 0.85 <= e["rate_bps"] / 2e6 <= 1.02, e["rate_bps"]


def test_delay_distribution_agrees(fig):
    net, usr = fig["netem"], fig["userspace"]
    assert abs(usr["median"] - net["median"]) <= 5.0, (usr["median"], net["median"])
    for key in ("robust_sigma", "width_5_95", "trimmed_stdev"):
        assert 0.75 <= usr[key] / net[key] <= 1.33, (key, usr[key], net[key])
    assert 0.4 <= usr["stdev"] / net["stdev"] <= 2.5, (usr["stdev"], net["stdev"])


def test_loss_agrees(fig):
    assert abs(fig["userspace"]["loss_pct"] - fig["netem"]["loss_pct"]) <= 4.0, \
        (fig["userspace"]["loss_pct"], fig["netem"]["loss_pct"])


def test_rate_agrees(fig):
    ratio = fig["userspace"]["rate_bps"] / fig["netem"]["rate_bps"]
    assert 0.95 <= ratio <= 1.05, (ratio, fig["userspace"]["rate_bps"], fig["netem"]["rate_bps"])
