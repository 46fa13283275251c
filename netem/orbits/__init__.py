"""Orbits drive the links: from orbital elements to a per-link timeline of visibility, delay and rate.

    spec.py       the `orbits:` spec (TLE, Keplerian elements, Walker delta/star, leader-follower formation,
                  ground stations, link policy) and its one-line errors
    propagate.py  SGP4 (sgp4.api.SatrecArray) for satellites, WGS84 + sidereal rotation for ground stations
    planner.py    geometry + policy per step and pair -> run-length-encoded link timeline (pandas)
    export.py     ION (`a contact` / `a range`) and HDTN JSON contact plans from the same timeline

All of it is pure: no subprocess, no file written except by the callers.
"""
from .export import parse_ion, to_hdtn, to_hdtn_json, to_ion
from .planner import COLUMNS, Plan, plan, plan_file
from .spec import OrbitsSpec, load_orbits_file, parse_orbits

__all__ = ["OrbitsSpec", "Plan", "COLUMNS", "plan", "plan_file", "parse_orbits", "load_orbits_file", "to_ion",
           "to_hdtn", "to_hdtn_json", "parse_ion"]
