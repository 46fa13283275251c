"""Contact plans that ION and HDTN load as meant (issue 30).

ION's rules (swarm.dtn.contacts.ion_load) are first checked against a real ionadmin's decisions on a plan
this project exported before (tests/data/ion/, with its README); then the exports of the walker plan
(experiments/walker-dtn.yaml) and of a rate-varying 2-satellite plan are loaded under those rules and
under HDTN's reader, at speedup 1 and 10: nothing refused, and what is kept covers the timeline's up time
for every pair and direction.
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone

import pytest
import yaml

from conftest import REPO
from experiments.orbits.bundles import judge, router_plan, summary
from experiments.orbits.model import experiment_from_dict
from netem.orbits.export import node_numbers, passes, to_hdtn, to_ion
from netem.orbits.planner import Plan, plan as make_plan
from netem.spec.orbits import parse_orbits
from swarm.dtn.contacts import (ION_RATE_MAX, Contact, ContactPlan, Range, ion_load, parse_contact_plan, parse_hdtn,
                                write_hdtn, write_ion)

DATA = REPO / "tests/data/ion"
LOADED_AT = datetime(2026, 11, 25, 8, 54, 47, tzinfo=timezone.utc)  # when ionadmin read small.ionrc (its `+0`)

# The plan small.ionrc was exported from (tests/data/ion/README.md): ground rate varies along each pass.
TWO_SATS = {"epoch": "2026-03-20T12:00:00Z", "duration": "900s", "step": "1s",
            "satellites": [{"name": "alpha", "elements": {"altitude": "550km", "inclination": 53}},
                           {"name": "beta", "elements": {"altitude": "550km", "inclination": 53, "mean_anomaly": -10}}],
            "ground_stations": [{"name": "gs01", "lat": 10.0, "lon": 20.0, "min_elevation": 10}],
            "links": {"isl": {"max_range": "5000km", "rate": "100Mbit"},
                      "ground": {"min_elevation": 10, "rate": {"bandwidth": "20MHz", "snr": "10dB", "at": "1000km",
                                                               "max": "100Mbit", "step": "5Mbit"}}}}


def _two_sats() -> Plan:
    return make_plan(parse_orbits(TWO_SATS))


def _walker() -> Plan:
    data = yaml.safe_load((REPO / "experiments/walker-dtn.yaml").read_text())
    return make_plan(experiment_from_dict(data, "walker-dtn.yaml").orbits_spec())


PLANS = {"walker": _walker, "two-sats": _two_sats}


# --------------------------------------------------------------------------- golden: a real ionadmin
def _offset(stamp: str) -> int:
    t = datetime.strptime(stamp, "%Y/%m/%d-%H:%M:%S").replace(tzinfo=timezone.utc)
    return int((t - LOADED_AT).total_seconds())


def _ionadmin_listing() -> tuple[set, set]:
    """ionadmin's `l contact` / `l range` output as ({(from, until, a, b, bytes/s)}, {(from, until, {a, b}, owlt)})."""
    contacts, ranges = set(), set()
    pat = re.compile(r"From\s+(\S+) to\s+(\S+) the (xmit rate|OWLT) from node (\d+) to node (\d+) is\s+(\d+)")
    for line in (DATA / "small.ionadmin-listing.txt").read_text().splitlines():
        m = pat.search(line)
        if not m or m.group(4) == m.group(5):  # ION's own loopback contact (node 1 to itself, at 2038)
            continue
        s, e, a, b, v = _offset(m.group(1)), _offset(m.group(2)), m.group(4), m.group(5), int(m.group(6))
        if m.group(3) == "xmit rate":
            contacts.add((s, e, a, b, v))
        else:
            ranges.add((s, e, frozenset((a, b)), v))
    return contacts, ranges


def _ionadmin_refused() -> list[tuple[int, int, str, str]]:
    pat = re.compile(r"Overlapping contact ignored: from (\S+) until (\S+), (\d+)->(\d+)")
    return [(_offset(m.group(1)), _offset(m.group(2)), m.group(3), m.group(4))
            for m in map(pat.search, (DATA / "small.ionadmin-log.txt").read_text().splitlines()) if m]


def test_ion_rules_reproduce_what_ionadmin_kept_of_the_reference_plan():
    loaded = ion_load(parse_contact_plan((DATA / "small.ionrc").read_text(), "small.ionrc"))
    contacts, ranges = _ionadmin_listing()
    assert len(contacts) == 20 and len(loaded.kept.contacts) + len(loaded.refused) == 34
    assert {(int(c.start), int(c.end), c.a, c.b, int(c.rate)) for c in loaded.kept.contacts} == contacts
    assert sorted((int(x.start), int(x.end), x.a, x.b) for x, _ in loaded.refused) == sorted(_ionadmin_refused())
    assert {why for _, why in loaded.refused} == {"Overlapping contact ignored"} and len(loaded.refused) == 14
    # ION lists a range both ways; the plan writes it once
    assert {(int(r.start), int(r.end), frozenset((r.a, r.b)), int(r.owlt)) for r in loaded.kept.ranges} == ranges


def test_ion_rules_closed_contacts_strict_ranges_numbers_and_32_bit_rates():
    text = ("a contact +0 +10 1 2 100\n"
            "a contact +10 +20 1 2 100\n"        # touches the first at 10: ION refuses it
            "a contact +10 +20 2 1 100\n"        # the other direction is another pair: kept
            "a contact +11 +20 1 2 100\n"        # one second later: kept
            "a range +0 +10 1 2 1\n"
            "a range +10 +20 1 2 1\n"            # ranges touching: kept
            "a range +15 +25 1 2 1\n"            # overlapping: refused
            "a contact +30 +40 sat01 2 100\n"    # not a node number
            "a contact +30 +40 0 2 100\n"        # node 0
            "a contact +30.5 +40 3 2 100\n"      # not whole seconds
            f"a contact +30 +40 3 2 {ION_RATE_MAX + 1}\n"  # wraps in ION's unsigned int
            f"a contact +50 +60 3 2 {ION_RATE_MAX}\n")
    loaded = ion_load(parse_contact_plan(text))
    assert [c.line for c in loaded.kept.contacts] == [1, 3, 4, 12]
    assert [r.line for r in loaded.kept.ranges] == [5, 6]
    reasons = {x.line: why for x, why in loaded.refused}
    assert reasons[2] == "Overlapping contact ignored" and reasons[7] == "Overlapping range ignored"
    assert "node 'sat01'" in reasons[8] and "node '0'" in reasons[9]
    assert "whole seconds" in reasons[10] and "32-bit" in reasons[11]


# ------------------------------------------------------------------------- coverage of the up time
def _up_intervals(p: Plan, speedup: float, shift: float = 0.0) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Per pair, the merged up intervals in wall seconds (counted from the file's time 0)."""
    out: dict[tuple[str, str], list[list[float]]] = {}
    for r in p.timeline[p.timeline["up"]].sort_values(["a", "b", "t_start"]).itertuples():
        s, e = shift + r.t_start / speedup, shift + r.t_end / speedup
        spans = out.setdefault((r.a, r.b), [])
        if spans and math.isclose(spans[-1][1], s):
            spans[-1][1] = e
        else:
            spans.append([s, e])
    return {k: [(s, e) for s, e in v] for k, v in out.items()}


def _coverage(kept: ContactPlan, p: Plan, speedup: float, shift: float = 0.0) -> dict[tuple[str, str], dict]:
    """Per directed pair: the share of the whole wall seconds the link is up in that kept contacts cover
    (`seconds`), the share of the continuous up time (`time`), and the covered seconds when the link is down."""
    num = {n: str(i) for n, i in node_numbers(p).items()}
    out = {}
    for (a, b), spans in _up_intervals(p, speedup, shift).items():
        up_s = {k for s, e in spans for k in range(math.ceil(s - 1e-9), math.floor(e + 1e-9))}
        total = sum(e - s for s, e in spans)
        for x, y in ((a, b), (b, a)):
            mine = [c for c in kept.contacts if (c.a, c.b) == (num[x], num[y])]
            cov_s = {k for c in mine for k in range(int(c.start), int(c.end))}
            cov_t = sum(max(0.0, min(e, c.end) - max(s, c.start)) for c in mine for s, e in spans)
            out[(x, y)] = {"seconds": len(cov_s & up_s) / len(up_s) if up_s else 1.0, "time": cov_t / total,
                           "while_down": sorted(cov_s - up_s), "up_s": len(up_s)}
    return out


@pytest.mark.parametrize("speedup", [1, 10])
@pytest.mark.parametrize("name", list(PLANS))
def test_ion_export_keeps_every_contact_and_covers_every_pairs_up_time(name, speedup):
    p = PLANS[name]()
    loaded = ion_load(parse_contact_plan(to_ion(p, speedup=speedup), "export"))
    assert loaded.refused == ()
    cov = _coverage(loaded.kept, p, speedup)
    assert len(cov) == 2 * len(p.links())
    assert {k: v["while_down"] for k, v in cov.items() if v["while_down"]} == {}  # never a contact that is not there
    assert {k: v["seconds"] for k, v in cov.items() if v["seconds"] < 0.99} == {}
    if speedup == 1:  # at 1 s steps whole seconds are the timeline's own edges: all of the up time
        assert {k: v["time"] for k, v in cov.items() if v["time"] < 0.99} == {}
    # every second of a contact has its range
    ranges: dict[tuple[str, str], set[int]] = {}
    for r in loaded.kept.ranges:
        ranges.setdefault((r.a, r.b), set()).update(range(int(r.start), int(r.end)))
    for c in loaded.kept.contacts:
        assert set(range(int(c.start), int(c.end))) <= ranges[tuple(sorted((c.a, c.b), key=int))]


@pytest.mark.parametrize("speedup", [1, 10])
@pytest.mark.parametrize("name", list(PLANS))
@pytest.mark.parametrize("segments", [False, True])
def test_hdtn_export_covers_every_pairs_up_time_without_overlaps(name, speedup, segments):
    p = PLANS[name]()
    cp = parse_hdtn(to_hdtn(p, speedup=speedup, segments=segments))
    by_pair: dict[tuple[str, str], list] = {}
    for c in cp.contacts:
        by_pair.setdefault((c.a, c.b), []).append((c.start, c.end))
    for spans in by_pair.values():
        spans.sort()
        assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:]))  # one contact at a time per direction
    cov = _coverage(cp, p, speedup)
    assert {k: v["while_down"] for k, v in cov.items() if v["while_down"]} == {}
    assert {k: v["seconds"] for k, v in cov.items() if v["seconds"] < 0.99} == {}
    passes_n = len(passes(p, speedup=speedup))
    if segments:  # a contact per rate segment: the ground passes have several
        assert len(cp.contacts) > 2 * passes_n
    else:
        assert len(cp.contacts) == 2 * passes_n


def test_speedup_rounds_only_a_passs_outer_edges():
    """The walker's ground pass is 110-509 s of plan time: 11-50.9 s at x10. Rounding each rate segment
    inward on its own left 27-28, 29-33 and 34-35 s; the pass is 11-50 now, in both files."""
    p = _walker()
    ion = parse_contact_plan(to_ion(p, speedup=10))
    assert [(c.start, c.end) for c in ion.contacts if (c.a, c.b) == ("1", "13")] == [(11, 50)]
    assert [(r.start, r.end) for r in ion.ranges if (r.a, r.b) == ("1", "13")] == [(11, 50)]
    hdtn = to_hdtn(p, speedup=10)["contacts"]
    assert [(c["startTime"], c["endTime"]) for c in hdtn if (c["source"], c["dest"]) == (13, 1)] == [(11, 50)]
    # with rate segments (HDTN's flap form) the segments tile the same pass
    seg = sorted((c["startTime"], c["endTime"], c["rateBitsPerSec"])
                 for c in to_hdtn(p, speedup=10, segments=True)["contacts"] if (c["source"], c["dest"]) == (1, 13))
    assert seg[0][0] == 11 and seg[-1][1] == 50 and all(a[1] == b[0] for a, b in zip(seg, seg[1:]))
    assert len({r for *_, r in seg}) > 3
    # a pass loses at most its two partial edge seconds however fast the clock runs
    windows = passes(p, speedup=10)
    for (a, b), spans in _up_intervals(p, 10).items():
        for s, e in spans:
            kept = [w for w in windows.itertuples()
                    if (w.a, w.b) == (a, b) and s - 1e-9 <= w.start and w.end <= e + 1e-9]
            if e - s >= 2:
                assert len(kept) == 1 and kept[0].end - kept[0].start > (e - s) - 2


def test_the_pass_rate_is_its_lowest_in_both_formats():
    p = _two_sats()
    ion = parse_contact_plan(to_ion(p))
    alpha_gs = [c for c in ion.contacts if (c.a, c.b) == ("1", "3")]
    assert [(c.start, c.end, c.rate) for c in alpha_gs] == [(110, 509, 40_000_000 // 8)]  # bytes/s
    rates = p.timeline[(p.timeline["a"] == "alpha") & (p.timeline["b"] == "gs01") & p.timeline["up"]]["rate"]
    assert rates.min() == 40_000_000 and rates.max() == 60_000_000
    hdtn = [c for c in to_hdtn(p)["contacts"] if (c["source"], c["dest"]) == (1, 3)]
    assert [(c["startTime"], c["endTime"], c["rateBitsPerSec"], c["owlt"]) for c in hdtn] == [(110, 509, 40_000_000, 1)]


def test_origin_gives_the_ion_epoch_line_and_hdtn_unix_seconds():
    p = _two_sats()
    whole = datetime(2026, 11, 25, 9, 0, 0, tzinfo=timezone.utc)
    text = to_ion(p, origin=whole)
    assert "@ 2026/11/25-09:00:00" in text.splitlines()
    cp = parse_contact_plan(text)
    assert cp.epoch == whole.timestamp() and min(c.start for c in cp.contacts) == 0
    rel, unix = to_hdtn(p)["contacts"], to_hdtn(p, origin=whole)["contacts"]
    assert [(c["startTime"] + int(whole.timestamp()), c["endTime"] + int(whole.timestamp())) for c in rel] == \
           [(c["startTime"], c["endTime"]) for c in unix]
    # a release 0.4 s into a second: the files count from that second, contacts stay inside the real windows
    frac = datetime(2026, 11, 25, 9, 0, 0, 400000, tzinfo=timezone.utc)
    loaded = ion_load(parse_contact_plan(to_ion(p, origin=frac)))
    assert loaded.refused == () and loaded.kept.epoch == whole.timestamp()
    cov = _coverage(loaded.kept, p, 1, shift=0.4)
    assert not any(v["while_down"] for v in cov.values()) and min(v["seconds"] for v in cov.values()) >= 0.99
    alpha_gs = [c for c in to_hdtn(p, origin=frac)["contacts"] if (c["source"], c["dest"]) == (1, 3)]
    base = int(whole.timestamp())
    assert [(c["startTime"] - base, c["endTime"] - base) for c in alpha_gs] == [(111, 509)]


# ------------------------------------------------------------------- the writer and the readers
def test_the_one_writer_and_the_readers_round_trip():
    items = [Contact(0, 10, "1", "2", 125, 0), Range(0, 10, "1", "2", 1, 0)]
    text = write_ion(items, ["a plan"], epoch=datetime(2026, 11, 25, 9, 0, 0, 700000, tzinfo=timezone.utc).timestamp())
    assert text.splitlines() == ["# a plan", "@ 2026/11/25-09:00:00", "a contact +0 +10 1 2 125",
                                 "a range +0 +10 1 2 1"]
    cp = parse_contact_plan(text)
    assert [(c.start, c.end, c.a, c.b, c.rate) for c in cp.contacts] == [(0, 10, "1", "2", 125)]
    doc = write_hdtn([(1, 2, 0, 10, 1000, 1)])
    assert doc == {"contacts": [{"contact": 0, "source": 1, "dest": 2, "startTime": 0, "endTime": 10,
                                 "rateBitsPerSec": 1000, "owlt": 1}]}
    back = parse_hdtn(doc)
    assert back.contacts[0].rate == 125 and back.ranges[0].owlt == 1
    with pytest.raises(ValueError, match="contact 0: endTime 0 is not after startTime 0"):
        parse_hdtn(write_hdtn([(1, 2, 0, 0, 1000, 1)]))
    with pytest.raises(ValueError, match="source 0 dest 2"):
        parse_hdtn(write_hdtn([(0, 2, 0, 5, 1000, 1)]))


# -------------------------------------------------------------- bundles judged on the routers' plan
def test_router_plan_is_what_ion_keeps_named_and_timed_from_the_release():
    p = _two_sats()
    release = datetime(2026, 11, 25, 9, 0, 0, 400000, tzinfo=timezone.utc).timestamp()
    text = to_ion(p, origin=datetime.fromtimestamp(release, timezone.utc))
    routers, refused = router_plan(text, node_numbers(p), release)
    assert refused == 0
    c = [c for c in routers.contacts if (c.a, c.b) == ("alpha", "gs01")][0]
    assert (c.start, c.end) == (pytest.approx(110.6), pytest.approx(508.6))  # whole seconds inside 110-509
    # the old, touching export: ION refuses 14 lines, its routers would not see alpha-gs01 at 150 s (but 184 s)
    old, refused = router_plan((DATA / "small.ionrc").read_text(), node_numbers(p), 0.0)
    assert refused == 14
    rows = [{"src": "alpha", "dst": "gs01", "seq": 0, "bid": "b0", "created_ts": 150.0, "delivered_ts": 150.1,
             "delivered": True, "latency_s": 0.1}]
    exact = parse_contact_plan("a contact +110 +509 alpha gs01 5000000\n")
    on_old = judge(rows, exact, 0.0, routers=old)[0]
    assert on_old["plan_earliest_s"] == 150 and on_old["router_earliest_s"] == 185 and on_old["outcome"] == "delivered"
    on_new = judge(rows, exact, 0.0, routers=renamed_release(text, p, 0.0))[0]
    assert on_new["router_earliest_s"] == 151  # + the range's 1 s light time
    assert summary([on_new])["deliverable_per_routers"] == 1


def renamed_release(text: str, p: Plan, release_shift: float) -> ContactPlan:
    """router_plan with the file's own `@` second as the release."""
    cp = parse_contact_plan(text)
    return router_plan(text, node_numbers(p), cp.epoch + release_shift)[0]


def test_an_orbit_run_writes_both_hdtn_forms_and_its_routers_plan_loses_nothing(tmp_path):
    from experiments.orbits.run import ION_PLAN, write_contact_plans
    p = _walker()
    release = 1_795_000_000.25
    write_contact_plans(p, tmp_path, release, 10, None)
    rel = json.loads((tmp_path / "contact-plan.hdtn.json").read_text())["contacts"]
    unix = json.loads((tmp_path / "contact-plan.hdtn.unix.json").read_text())["contacts"]
    assert len(rel) == len(unix) and min(c["startTime"] for c in unix) >= int(release)
    routers, refused = router_plan((tmp_path / ION_PLAN).read_text(), node_numbers(p), release)
    assert refused == 0
    c = [c for c in routers.contacts if (c.a, c.b) == ("sat01", "gs01")][0]
    assert 11.0 <= c.start < 12.0 and 49.0 < c.end <= 50.9  # inside the pass's 11-50.9 s from the release


def test_the_dtn_experiments_read_an_orbit_export_as_the_links_schedule():
    """A `dtn` experiment's `contacts.plan` may be a `swarm orbits plan` export (`@` line, node numbers in
    plan order): the links it schedules are the timeline's passes."""
    from swarm.dtn.contacts import link_schedule, resolve_nodes
    p = _two_sats()
    text = to_ion(p, origin=datetime(2026, 11, 25, 9, 0, 0, tzinfo=timezone.utc))
    events = link_schedule(resolve_nodes(parse_contact_plan(text, "export"), p.nodes), p.nodes)
    ground = [(e.at, e.action) for e in events if (e.a, e.b) == ("alpha", "gs01")]
    assert ground == [(0, "down"), (110, "up"), (509, "down")]
    assert [(e.at, e.action) for e in events if (e.a, e.b) == ("alpha", "beta")] == [(900, "down")]
