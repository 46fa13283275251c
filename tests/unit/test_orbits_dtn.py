"""DTN bundles on an orbit plan (pure parts): earliest delivery on a contact plan, the exact contact-plan export
read back with the DTN side's ION parser, judging bundles against the plan, the agents' last hops, the
experiment's `dtn:` part and its traffic plans, and the report from a recorded run."""
from __future__ import annotations

import math

import pytest
import yaml

from conftest import REPO
from experiments.orbits.bundles import judge, last_hops, summary
from experiments.orbits.model import experiment_from_dict
from experiments.orbits.traffic import traffic_plans
from swarm.dtn.agents.dtn7.log import parse_dtnd_log
from netem.orbits.export import to_ion_exact
from netem.orbits.planner import plan as make_plan
from swarm.dtn.contacts import earliest_arrival, parse_contact_plan
from swarm.errors import SpecError

# sat01 sees the ground 10-20 s (light time 5 ms); sat02-sat01 are in contact 0-5 s and 15-30 s (10 ms).
PLAN = """\
a contact +10 +20 sat01 gs01 1000000
a contact +10 +20 gs01 sat01 1000000
a range +10 +20 sat01 gs01 0.005
a contact +0 +5 sat02 sat01 1000000
a contact +0 +5 sat01 sat02 1000000
a contact +15 +30 sat02 sat01 1000000
a contact +15 +30 sat01 sat02 1000000
a range +0 +30 sat01 sat02 0.010
"""


@pytest.fixture
def cp():
    return parse_contact_plan(PLAN, "test plan")


# ------------------------------------------------------------------------------- earliest arrival
def test_a_bundle_waits_for_the_next_contact_then_crosses_in_one_light_time(cp):
    t, path = earliest_arrival(cp, "sat01", "gs01", 3.0)
    assert t == pytest.approx(10.005) and [(h.a, h.b, h.depart) for h in path] == [("sat01", "gs01", 10.0)]


def test_during_a_contact_the_bundle_goes_at_once(cp):
    t, _ = earliest_arrival(cp, "sat01", "gs01", 12.5)
    assert t == pytest.approx(12.505)


def test_two_hops_store_at_the_relay_until_its_contact_opens(cp):
    # created at 1 s: sat02 -> sat01 now (1.010), then sat01 waits for the ground at 10 s
    t, path = earliest_arrival(cp, "sat02", "gs01", 1.0)
    assert t == pytest.approx(10.005)
    assert [(h.a, h.b) for h in path] == [("sat02", "sat01"), ("sat01", "gs01")]
    assert path[0].arrive == pytest.approx(1.010)
    # created at 7 s: the sat02-sat01 gap lasts until 15 s, the ground contact is still open then
    t, path = earliest_arrival(cp, "sat02", "gs01", 7.0)
    assert t == pytest.approx(15.015) and path[0].depart == 15.0


def test_no_path_before_the_plan_ends_is_none(cp):
    assert earliest_arrival(cp, "sat01", "gs01", 20.0) is None  # the pass is over
    assert earliest_arrival(cp, "sat02", "gs01", 19.995) is None  # reaches sat01 at 20.005: too late
    assert earliest_arrival(cp, "sat02", "gs01", 1.0, horizon=5.0) is None
    assert earliest_arrival(cp, "gs01", "sat03", 0.0) is None  # a node the plan never names


def test_a_contact_closing_before_departure_is_not_used(cp):
    t, path = earliest_arrival(cp, "sat01", "sat02", 5.0)  # the first window ended at 5 s
    assert t == pytest.approx(15.010) and path[0].start == 15


# ----------------------------------------------------------------------------- exact export
def _walker():
    data = yaml.safe_load((REPO / "experiments/walker-dtn.yaml").read_text())
    return experiment_from_dict(data, "walker-dtn.yaml")


def test_exact_contact_plan_is_the_timeline_scaled_and_reads_back_with_the_dtn_parser():
    exp = _walker()
    p = make_plan(exp.orbits_spec())
    cp = parse_contact_plan(to_ion_exact(p, speedup=10), "exact")
    up = p.timeline[p.timeline["up"]]
    assert len(cp.contacts) == 2 * len(up) and len(cp.ranges) == len(up)
    ground = up[up["b"] == "gs01"].sort_values("t_start")
    first = ground.iloc[0]
    c = [c for c in cp.contacts if (c.a, c.b) == (first.a, "gs01")][0]
    assert (c.start, c.end) == (pytest.approx(first.t_start / 10), pytest.approx(first.t_end / 10))
    r = [r for r in cp.ranges if (r.a, r.b) == (first.a, "gs01")][0]
    assert r.owlt == pytest.approx(first.delay_ms / 1000, abs=1e-6)  # light time not compressed, not rounded
    # a bundle from the passing satellite created before its pass arrives at AOS (scaled) + that light time
    t, path = earliest_arrival(cp, first.a, "gs01", 0.0)
    assert t == pytest.approx(first.t_start / 10 + first.delay_ms / 1000, abs=1e-6) and len(path) == 1


# ---------------------------------------------------------------------------------- judging
def _row(src, dst, seq, created, delivered=None, bid=""):
    return {"src": src, "dst": dst, "seq": seq, "bid": bid, "created_ts": 1000.0 + created,
            "delivered_ts": "" if delivered is None else 1000.0 + delivered, "delivered": delivered is not None,
            "latency_s": "" if delivered is None else delivered - created}


def test_judge_names_every_outcome(cp):
    rows = [_row("sat01", "gs01", 0, 3.0, 10.30, "b0"),   # waited for the pass: delivered
            _row("sat01", "gs01", 1, 12.0, 12.02, "b1"),  # during the pass
            _row("sat01", "gs01", 2, 5.0, 6.0, "b2"),     # before the pass opened: early
            _row("sat02", "gs01", 3, 1.0),                # a path existed: missed
            _row("sat01", "gs01", 4, 25.0)]               # no path: undelivered
    hops = {("gs01", "b0"): ("sat01", 1010.31), ("gs01", "b1"): ("sat01", 1012.02), ("gs01", "b2"): ("sat02", 1006.0)}
    out = judge(rows, cp, 1000.0, tolerance_s=0.1, hops=hops)
    assert [r["outcome"] for r in out] == ["delivered", "delivered", "early", "missed", "undelivered (no plan path)"]
    assert out[0]["plan_earliest_s"] == pytest.approx(10.005) and out[0]["slack_s"] == pytest.approx(0.295)
    assert out[0]["plan_wait_s"] == pytest.approx(7.0) and out[0]["plan_path"] == "sat01>gs01 [10-20)"
    assert out[3]["plan_path"] == "sat02>sat01 [0-5) | sat01>gs01 [10-20)" and out[3]["plan_hops"] == 2
    assert [r["last_hop_in_contact"] for r in out[:3]] == [True, True, False]
    s = summary(out)
    assert (s["bundles_created"], s["deliverable_per_plan"], s["bundles_delivered"], s["delivered_early"],
            s["missed"]) == (5, 4, 3, 1, 1)


def test_tolerance_covers_a_link_going_down_late(cp):
    late = [_row("sat01", "gs01", 0, 20.05, 20.06)]  # 50 ms after the planned LOS: the cut had not landed yet
    assert judge(late, cp, 1000.0, tolerance_s=0.0)[0]["outcome"] == "early"
    assert judge(late, cp, 1000.0, tolerance_s=0.2)[0]["outcome"] == "delivered"


def test_last_hops_from_agent_logs():
    log = (" 2026-11-23T00:45:09.393Z INFO  dtn7::core::processing > Sending bundle succeeded: "
           "dtn://sat01/-848709909342-0 10.236.0.14:4556 tcp in 51.655713ms\n"
           " 2026-11-23T00:45:09.100Z INFO  dtn7::core::processing > Sending bundle succeeded: "
           "dtn://sat01/-848709909342-0 10.236.0.11:4556 tcp in 1ms\n")
    hops = last_hops({"sat01": parse_dtnd_log(log)}, {"gs01": "10.236.0.14", "sat10": "10.236.0.11"})
    assert hops[("gs01", "dtn://sat01/-848709909342-0")][0] == "sat01"
    assert hops[("sat10", "dtn://sat01/-848709909342-0")][1] == pytest.approx(1795394709.100)


# --------------------------------------------------------------------------- experiment part
def test_walker_dtn_has_agents_in_every_node_and_traffic_plans():
    exp = _walker()
    assert exp.dtn is not None
    spec = exp.swarm_spec()
    assert all(n.dtn is not None and n.dtn.peers == "auto" for n in spec.resolved_nodes())
    plans = traffic_plans(exp, release=100.0, wall_s=60.0, port=3000)
    assert set(plans) == set(exp.orbits_spec().node_names())
    assert [f["dst"] for f in plans["sat05"]["flows"]] == ["gs01"] and plans["gs01"]["receive"]
    assert [f["dst"] for f in plans["gs01"]["flows"]] == ["sat10"] and plans["sat10"]["receive"]
    assert not plans["sat05"]["receive"]
    assert plans["sat01"]["duration"] == pytest.approx(60.0)  # the whole plan at x10
    assert plans["sat01"]["drain"] == pytest.approx(exp.dtn.drain)


def _with_dtn(**dtn):
    data = yaml.safe_load((REPO / "experiments/walker-dtn.yaml").read_text())
    data["dtn"] = {"flows": [{"from": "sat01", "to": "gs01", "rate": 1}], **dtn}
    return data


@pytest.mark.parametrize("dtn, needle", [
    ({"flows": [{"from": "sat99", "to": "gs01", "rate": 1}]}, "dtn.flows[0]: node 'sat99' is not a node of the orbit plan"),
    ({"flows": [{"from": "gs01", "to": "gs01", "rate": 1}]}, "dtn.flows[0]: no source other than the destination"),
    ({"flows": [{"from": "sat01", "to": "gs01", "rate": 0}]}, "rate"),
    ({"flows": []}, "flows: give at least one flow"),
    ({"agent": {"routing": "static"}}, "routing 'static': fixed next hops cannot follow contacts"),
    ({"agent": {"cla": "bibe"}}, "dtn.cla 'bibe': unknown cla"),
    ({"agent": {"static_peers": ["sat02"]}}, "agent.static_peers"),
    ({"agent": {"cla": "udp"}, "flows": [{"from": "sat01", "to": "gs01", "rate": 1, "size": "100kB"}]},
     "flows[0].size 100000: larger than the agent's largest bundle"),
    ({"send_until": "20min"}, "dtn.send_until 1200 s: after the plan's end"),
    ({"nodes": ["sat01", "sat77"]}, "dtn.nodes: node 'sat77' is not a node of the orbit plan"),
    ({"nodes": ["sat01"]}, "dtn.nodes: 1 node(s): give at least two"),
    ({"nodes": ["sat01", "sat02"]}, "dtn.flows[0]: node 'gs01' runs no agent (not in dtn.nodes)"),
])
def test_bad_dtn_part_is_one_line(dtn, needle):
    with pytest.raises(SpecError) as err:
        experiment_from_dict(_with_dtn(**dtn), "x.yaml")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_send_until_shortens_the_send_window():
    exp = experiment_from_dict(_with_dtn(send_until="5min"), "x.yaml")
    plans = traffic_plans(exp, release=0.0, wall_s=60.0, port=3000)
    assert plans["sat01"]["duration"] == pytest.approx(30.0) and plans["gs01"]["drain"] == pytest.approx(30.0 + 10.0)


def test_dtn_nodes_put_an_agent_on_those_nodes_only_and_judge_on_the_contacts_among_them(cp):
    exp = experiment_from_dict(_with_dtn(nodes=["sat01", "sat02", "gs01"],
                                         flows=[{"from": "satellites", "to": "gs01", "rate": 1}]), "x.yaml")
    with_agent = {n.name for n in exp.swarm_spec().resolved_nodes() if n.dtn is not None}
    assert with_agent == {"sat01", "sat02", "gs01"} and len(exp.swarm_spec().resolved_nodes()) == 13
    plans = traffic_plans(exp, release=0.0, wall_s=60.0, port=3000)
    assert set(plans) == with_agent  # `satellites` as a source: those with an agent
    assert [f["dst"] for f in plans["sat02"]["flows"]] == ["gs01"] and plans["gs01"]["receive"]
    # a path through a node without an agent is none: sat02 reaches the ground only through sat01
    assert earliest_arrival(cp.among(frozenset({"sat02", "gs01"})), "sat02", "gs01", 1.0) is None
    assert earliest_arrival(cp.among(frozenset({"sat01", "sat02", "gs01"})), "sat02", "gs01", 1.0)[0] == \
        pytest.approx(10.005)


# --------------------------------------------------------------------------------- report
def test_report_of_a_recorded_orbits_dtn_run(tmp_path):
    """A walker-dtn run recorded on this host (x10, userspace engine), raw/ and probes left out."""
    import shutil
    from analysis.orbits import write_orbits_report
    run = tmp_path / "run"
    shutil.copytree(REPO / "tests/data/orbits/dtn-run", run)
    files = write_orbits_report(run)
    md = files["report_md"].read_text()
    assert "DTN bundles against the contact plan" in md
    assert "82 of 420 bundles delivered; the contact plan" in md and "allowed 82" in md
    assert "sat10 → gs01" in md and files["bundles.png"].stat().st_size > 0
    assert not math.isnan(summary(__import__("pandas").read_csv(run / "bundles.csv").to_dict("records"))["slack_p95_s"])
