"""Orbit-driven links, live (netns): the link-timeline driver makes a running swarm's links follow a plan,
records every update's lag, and the swarm's reachability matches the plan at the end; restore heals.

Runs with whichever engine the host picks (here nft: up/down and rate; delay where sch_netem exists).
Names orb-*, subnets from tests/alloc.py."""
from __future__ import annotations

import pytest

from netem.orbits.planner import plan as make_plan
from netem.spec.orbits import parse_orbits
from netem.runtime.orbits import LinkTimelineDriver

from conftest import assert_links_in_plans_last_state, reachable, require, swarm_up
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]

ORBITS = {"duration": "10min", "satellites": [{"walker": {"total": 6, "planes": 3, "phasing": 1, "altitude": 550,
                                                          "inclination": 53}}],
          "ground_stations": [{"name": "gs01", "lat": 30, "lon": 20, "min_elevation": 0}],
          "links": {"isl": {"max_range": "4000km", "rate": "50Mbit"}}}


@pytest.fixture
def need_nft(caps):
    require("nftables", caps.nftables, "nft cannot create tables here")


@pytest.fixture
def orbit_swarm(need_netns, need_nft):
    with swarm_up({"name": "orb-it", "backend": "netns",
                   "groups": [{"prefix": "sat", "count": 6}, {"prefix": "gs", "count": 1}],
                   "networks": nets(NET[0])}) as swarm:
        yield swarm


def test_links_follow_the_plan_and_restore(orbit_swarm):
    plan = make_plan(parse_orbits(ORBITS))
    assert len(plan.links()) >= 2 and plan.timeline["t_start"].gt(0).any()
    rows: list[dict] = []
    driver = LinkTimelineDriver(orbit_swarm.links, plan, speedup=60, on_rows=rows.extend)
    summary = driver.run()
    driver.close()
    changes = plan.timeline[plan.timeline["t_start"] > 0]
    assert len(rows) == len(changes)  # one row per planned change, none dropped
    assert all(r["ok"] for r in rows) and all(r["lag_ms"] >= 0 for r in rows)
    assert summary["steps_planned"] == changes["t_start"].nunique()
    down_pairs = assert_links_in_plans_last_state(orbit_swarm, plan)
    shown = {(r.src, r.dst) for r in orbit_swarm.links.rows()}  # links.json knows what the driver set
    assert set(down_pairs) <= shown
    driver.restore()
    for a, b in down_pairs:
        assert reachable(orbit_swarm, a, b)
