"""The orbit driver's initial state (LinkTimelineDriver.prepare) with the userspace engine: what each receiver's
engine is told about every sender, and links.json, are the plan's t=0 state over the spec's links, whether the
never-up pairs are listed one by one (small swarms) or held as one `others` condition (netem.state.DefaultLinks).
Real planner of the engine, real LinkState; the controller only records each node's plan instead of applying it."""
from __future__ import annotations

import contextlib
import dataclasses
import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pandas as pd
import pytest

from netem.engines.hold import LinkdHold
from netem.engines.userspace import UserspaceEngine, linkd_line
from netem.orbits.planner import Plan
from netem.runtime.orbits import LinkTimelineDriver
from netem.spec.links import NONE, Impairment
from netem.state import DEFAULT_MIN_PAIRS, DefaultLinks, LinkState, node_links
from swarm.caps import Capabilities
from swarm.observe.events import BULK_LINKS, EVENTS_FILE

DOWN = Impairment(up=False)
CAPS = Capabilities(kernel="6", root=True, docker=False, docker_version="", compose=[], compose_version="", netns=True,
                    sch_netem=False, batman_adv=False, nftables=True, tbf=True, iperf3_version="", batmand=False,
                    ddsperf=False, htb=True, nfqueue=True, bridge_nf=True, linkd="/bin/true")


def _plan(n: int) -> Plan:
    """n nodes in a ring, each up with its next at t=0 (delay 10 + i ms), every fifth pair across up only later."""
    names = [f"s{i:02d}" for i in range(n)]
    rows = [dict(a=names[i], b=names[i + 1], kind="isl", t_start=0.0, t_end=60.0, up=True, delay_ms=10.0 + i, rate=0)
            for i in range(n - 1)]
    for i in range(0, n - 2, 5):
        rows.append(dict(a=names[i], b=names[i + 2], kind="isl", t_start=0.0, t_end=30.0, up=False, delay_ms=float("nan"), rate=0))
        rows.append(dict(a=names[i], b=names[i + 2], kind="isl", t_start=30.0, t_end=60.0, up=True, delay_ms=7.0, rate=0))
    return Plan(nodes=names, kinds={x: "sat" for x in names}, epoch=datetime(2026, 1, 1, tzinfo=timezone.utc), step=1.0,
                duration=60.0, speed_km_s=299792.458, timeline=pd.DataFrame(rows))


class RecordingController:
    """The link controller's surface the driver uses; apply() plans with the real engine and keeps the plan."""

    def __init__(self, nodes: list[str], base: dict, tmp_path):
        self.swarm = SimpleNamespace(nodes=[SimpleNamespace(name=n, isl_mac=f"02:00:00:00:00:{i:02x}")
                                            for i, n in enumerate(nodes)])
        self.engine = UserspaceEngine(CAPS)
        self.linkd = SimpleNamespace(batched_rules=lambda: contextlib.nullcontext([]))
        self.dir = tmp_path
        self.by_mac = {n.name: n.isl_mac for n in self.swarm.nodes}
        self.base = base
        self.plans: dict[str, object] = {}

    def spec_links(self):
        return dict(self.base)

    def open_shells(self):
        return None

    def caused_by(self, cause):
        return self

    @contextlib.contextmanager
    def transaction(self, events=True):
        path = self.dir / "links.json"
        state = LinkState.from_json(json.loads(path.read_text())) if path.exists() else LinkState(base=dict(self.base))
        yield state
        path.write_text(json.dumps(state.to_json()))

    def apply(self, node, rec, links, force=False, cut_frames=True, others=None):
        _, ingress, labels = node_links(links, node.name, self.by_mac)
        hold = dataclasses.replace(LinkdHold.at_hop(0, cut_frames), others=others,
                                   senders=frozenset(m for n, m in self.by_mac.items() if n != node.name))
        self.plans[node.name] = self.engine.plan_node("eth1", {}, ingress, labels, hold)
        return self.plans[node.name]


def held(plan, mac: str) -> str | None:
    """The engine line that applies to `mac`'s packets at this receiver (None: they do not reach the engine)."""
    lines = {ln.split("#")[0].split()[1]: ln.split("#")[0].strip() for ln in (plan.linkd or "").splitlines()}
    if mac in lines:
        return lines[mac]
    ipt = plan.ipt or ""
    if f"--mac-source {mac} -j RETURN" in ipt or f"--mac-source {mac} -j NFQUEUE" in ipt or "*" not in lines:
        return None
    return lines["*"].replace("link *", f"link {mac}", 1)


def expected(plan: Plan, base: dict) -> dict:
    """Every directed pair's condition at t=0 as the driver has always set it: the spec's, down unless the plan
    has the pair up, then with the planned delay."""
    out = {}
    up = {}
    for r in plan.timeline[plan.timeline["t_start"] == 0].itertuples(index=False):
        up[(r.a, r.b)] = up[(r.b, r.a)] = r.delay_ms if r.up else None
    for a in plan.nodes:
        for b in plan.nodes:
            if a != b:
                d = up.get((a, b))
                spec = base.get((a, b), NONE)
                out[(a, b)] = spec.merge(DOWN) if d is None else spec.merge(Impairment(delay=round(d, 3)))
    return out


@pytest.mark.parametrize("n", [8, 40])
@pytest.mark.parametrize("spec", ["none", "default delay with exceptions"])
def test_every_receiver_holds_the_plans_t0_state_for_every_sender(n, spec, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_ORBITS_ENGINE_SCHEDULE", "0")  # the engine schedule is built after the initial state
    plan = _plan(n)
    base = {}
    if spec != "none":
        d = Impairment(delay=5.0)
        base = {(a, b): d for a in plan.nodes for b in plan.nodes if a != b}
        base[(plan.nodes[0], plan.nodes[-2])] = Impairment(loss=1.0)  # never up: down over its own loss
        del base[(plan.nodes[1], plan.nodes[-1])]                     # never up, nothing in the spec: plain down
    ctl = RecordingController(plan.nodes, base, tmp_path)
    driver = LinkTimelineDriver(ctl, plan, workers=4)
    driver.prepare()
    assert driver.others is not None  # the userspace engine holds the never-up pairs as one condition
    want = expected(plan, base)
    if not base or len(base) >= DEFAULT_MIN_PAIRS:  # (a spec default below that is no shared one: all listed)
        # listed: the pairs the plan has at t=0 and the spec's exceptions, nothing else
        t0 = {p for r in plan.timeline[plan.timeline["t_start"] == 0].itertuples() for p in ((r.a, r.b), (r.b, r.a))}
        spec_exceptions = {(plan.nodes[0], plan.nodes[-2]), (plan.nodes[1], plan.nodes[-1])} if base else set()
        assert {p for links in driver.eff.values() for p in links} == t0 | spec_exceptions
    for (a, b), imp in want.items():
        mac = ctl.by_mac[a]
        line = held(ctl.plans[b], mac)
        assert line == (linkd_line(mac, imp) if not imp.empty else None), (a, b, imp.describe(), ctl.plans[b].linkd)
    # the event log: the pairs `others` covers as one `links` event above BULK_LINKS, else a `link` event each
    # (what the live view draws its links from), with what they were before
    events = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    first = plan.timeline[plan.timeline["t_start"] == 0]
    t0_state = {p: "up" if r.up else "down" for r in first.itertuples() for p in ((r.a, r.b), (r.b, r.a))}
    assert {(e["src"], e["dst"]): e["state"] for e in events if "step" in e} == t0_state  # the t=0 rows, both ways
    events = [e for e in events if "step" not in e]
    never = {p for p, imp in want.items() if imp.effective().down} - {p for links in driver.eff.values() for p in links}
    if len(never) > BULK_LINKS:
        bulk = [e for e in events if e["type"] == "links"]
        assert len(bulk) == 1 and bulk[0]["links"] == len(never) and bulk[0]["state"] == "down", bulk
    else:
        assert {(e["src"], e["dst"]) for e in events if e["type"] == "link"} == never and \
            all(e["state"] == "down" for e in events)
    saved = LinkState.from_json(json.loads((tmp_path / "links.json").read_text()))
    assert {p: imp.values() for p, imp in saved.base.items()} == \
        {p: imp.values() for p, imp in want.items() if not imp.empty}  # a down link's own conditions kept too


def test_default_links_reads_as_every_pairs_condition():
    d, x = Impairment(up=False), Impairment(delay=3.0)
    links = DefaultLinks(d, ["a", "b", "c"], {("a", "b"): x, ("b", "a"): NONE, ("a", "z"): x})
    full = dict(links)
    assert full == {("a", "b"): x, ("a", "z"): x, ("a", "c"): d, ("b", "c"): d, ("c", "a"): d, ("c", "b"): d}
    assert len(links) == len(full) and ("b", "a") not in links and ("a", "a") not in links
    doc = LinkState(base=links).to_json()
    assert doc["default"]["except"] == [["a", "b"], ["b", "a"]]
    assert {p: v.values() for p, v in LinkState.from_json(doc).base.items()} == {p: v.values() for p, v in full.items()}

