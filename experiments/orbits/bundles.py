"""Bundles of an orbits run judged against the contact plan exported from the same timeline (pure).

Times are wall seconds from the run's release (the exact contact plan, netem.orbits.export.to_ion_exact, is
written in those seconds: plan time / speedup, light times not compressed). Per bundle sent:

    t_created_s, t_delivered_s      when the sending program handed it to its agent / the receiver took it
    plan_earliest_s                 the earliest delivery the plan allows (contact-graph earliest arrival,
                                    swarm.dtn.contacts.earliest_arrival); empty: no path before the plan ends
    plan_latency_s, slack_s         plan_earliest - created; measured latency - plan_latency
    plan_wait_s                     of plan_latency, the time spent waiting for contacts (minus light time)
    plan_path                       the contacts the earliest path rides: a>b [window start-end) per hop
    last_hop                        the node whose agent handed the first copy to the destination (dtnd log)
    last_hop_in_contact             that node and the destination were in contact then (per the plan)
    outcome                         delivered | undelivered (no plan path) | missed (a plan path existed) |
                                    early (delivered before the plan allows, even with contacts held
                                    `tolerance_s` longer: the links' own update lag)
    router_earliest_s               the earliest delivery on what the routers' plan gives them: the contacts
                                    a real ionadmin keeps of contact-plan.ion (swarm.dtn.contacts.ion_load;
                                    whole seconds inside each pass); empty: no path, or no router plan given

The outcomes are judged on the exact plan (what the links do, at ms resolution); router_earliest_s says
what a contact-graph router loading the exported plan would have planned for the same bundle.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from experiments.dtn.parse import BUNDLE_COLUMNS, percentile
from swarm.dtn.contacts import (Contact, ContactPlan, Range, earliest_arrival, ion_load, open_intervals, pair,
                                 parse_contact_plan, renamed)

PLAN_COLUMNS = ["t_created_s", "t_delivered_s", "plan_earliest_s", "plan_latency_s", "slack_s", "plan_wait_s",
                "plan_hops", "plan_path", "last_hop", "last_hop_in_contact", "outcome", "router_earliest_s"]
ORBIT_BUNDLE_COLUMNS = BUNDLE_COLUMNS + PLAN_COLUMNS


def held_longer(plan: ContactPlan, seconds: float) -> ContactPlan:
    """The plan with every contact and range ending `seconds` later (links go down that late at most)."""
    return ContactPlan(tuple(Contact(c.start, c.end + seconds, c.a, c.b, c.rate, c.line) for c in plan.contacts),
                       tuple(Range(r.start, r.end + seconds, r.a, r.b, r.owlt, r.line) for r in plan.ranges))


def router_plan(ion_text: str, numbers: dict[str, int], release: float,
                source: str = "contact-plan.ion") -> tuple[ContactPlan, int]:
    """What ionadmin keeps of an exported ION plan, with node names (`numbers`: name -> ION node number) and
    times in seconds from `release` (the file's `@` line is its whole second); and how many lines ION would
    refuse (0 for this project's exports)."""
    loaded = ion_load(parse_contact_plan(ion_text, source))
    shift = (loaded.kept.epoch - release) if loaded.kept.epoch is not None else 0.0
    return renamed(loaded.kept, {str(n): name for name, n in numbers.items()}, shift), len(loaded.refused)


def window_of(windows: dict, a: str, b: str, at: float) -> Optional[tuple[float, float]]:
    """The merged contact window of a-b open at `at`, or None."""
    for s, e in windows.get(pair(a, b), []):
        if s <= at < e:
            return s, e
    return None


def last_hops(logs: dict[str, list[dict]], address_of: dict[str, str]) -> dict[tuple[str, str], tuple[str, float]]:
    """{(destination, bundle ID): (node, time)} of the first successful hand-over of each bundle to each
    node, from the agents' logs (Agent.log_events 'forwarded' events; `to` holds the peer's address or name)."""
    node_at = {addr: n for n, addr in address_of.items()}
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for node, events in logs.items():
        for ev in events:
            if ev["kind"] != "forwarded":
                continue
            to = ev.get("to", "")
            host = to.split("//")[-1].split("/")[0].rsplit(":", 1)[0]
            dst = node_at.get(host) or (to.rstrip("/").rsplit("/", 1)[-1] if "/" in to else to)
            key = (dst, ev["bid"])
            if key not in out or ev["t"] < out[key][1]:
                out[key] = (node, ev["t"])
    return out


def judge(rows: list[dict], plan: ContactPlan, release: float, tolerance_s: float = 0.0,
          hops: Optional[dict[tuple[str, str], tuple[str, float]]] = None,
          routers: Optional[ContactPlan] = None) -> list[dict]:
    """Bundle rows (experiments.dtn.parse.bundle_rows) with the plan's columns (see the module text);
    `routers`: the plan the routers were given (router_plan), for router_earliest_s."""
    loose = held_longer(plan, tolerance_s)
    windows = open_intervals(plan)
    out = []
    for r in rows:
        created = float(r["created_ts"]) - release
        best = earliest_arrival(plan, r["src"], r["dst"], created)
        delivered = bool(r["delivered"])
        t_del = float(r["delivered_ts"]) - release if delivered else math.nan
        row = dict(r, t_created_s=round(created, 6), t_delivered_s=round(t_del, 6) if delivered else "",
                   plan_earliest_s="", plan_latency_s="", slack_s="", plan_wait_s="", plan_hops="", plan_path="",
                   last_hop="", last_hop_in_contact="", router_earliest_s="")
        if routers is not None:
            seen = earliest_arrival(routers, r["src"], r["dst"], created)
            row["router_earliest_s"] = round(seen[0], 6) if seen is not None else ""
        if best is not None:
            t, path = best
            light = sum(h.arrive - h.depart for h in path)
            row.update(plan_earliest_s=round(t, 6), plan_latency_s=round(t - created, 6),
                       plan_wait_s=round(max(0.0, t - created - light), 6), plan_hops=len(path),
                       plan_path=" | ".join(f"{h.a}>{h.b} [{w[0]:g}-{w[1]:g})" for h in path
                                            for w in [window_of(windows, h.a, h.b, h.depart) or (h.start, h.end)]))
            if delivered:
                row["slack_s"] = round(float(r["latency_s"]) - (t - created), 6)
        if delivered and hops is not None:
            hop = hops.get((r["dst"], r["bid"]))
            if hop is not None:
                row["last_hop"] = hop[0]
                row["last_hop_in_contact"] = window_of(open_intervals(loose), hop[0], r["dst"], hop[1] - release) is not None
        if delivered:
            allowed = earliest_arrival(loose, r["src"], r["dst"], created)
            row["outcome"] = "early" if allowed is None or t_del < allowed[0] else "delivered"
        else:
            row["outcome"] = "missed" if best is not None else "undelivered (no plan path)"
        out.append(row)
    return out


def _given(v) -> bool:
    """A cell with a value ("" or NaN: none; rows from bundles.csv read back hold NaN)."""
    return v != "" and v is not None and not (isinstance(v, float) and math.isnan(v))


def summary(rows: list[dict]) -> dict:
    """Created, deliverable per plan, delivered (and early), latency vs the plan's earliest (p50/p95)."""
    got = [r for r in rows if r["delivered"] is True or r["delivered"] in ("True", 1)]
    lat = [float(r["latency_s"]) for r in got]
    plan_lat = [float(r["plan_latency_s"]) for r in got if _given(r["plan_latency_s"])]
    slack = [float(r["slack_s"]) for r in got if _given(r["slack_s"])]
    return {"bundles_created": len(rows), "deliverable_per_plan": _count(rows, lambda r: _given(r["plan_earliest_s"])),
            "bundles_delivered": len(got), "delivered_early": _count(rows, lambda r: r["outcome"] == "early"),
            "missed": _count(rows, lambda r: r["outcome"] == "missed"),
            "latency_p50_s": percentile(lat, 50), "latency_p95_s": percentile(lat, 95),
            "plan_latency_p50_s": percentile(plan_lat, 50), "plan_latency_p95_s": percentile(plan_lat, 95),
            "slack_p50_s": percentile(slack, 50), "slack_p95_s": percentile(slack, 95),
            "last_hop_in_contact": _count(got, lambda r: r["last_hop_in_contact"] in (True, "True")),
            "last_hop_known": _count(got, lambda r: _given(r["last_hop"])),
            "deliverable_per_routers": _count(rows, lambda r: _given(r.get("router_earliest_s", "")))}


def _count(rows: list[dict], test: Callable[[dict], bool]) -> int:
    return sum(1 for r in rows if test(r))


__all__ = ["ORBIT_BUNDLE_COLUMNS", "judge", "last_hops", "summary", "held_longer", "router_plan"]
