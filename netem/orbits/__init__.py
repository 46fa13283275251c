"""Orbits drive the links: from orbital elements to a per-link timeline of visibility, delay and rate.

    (netem/spec/orbits.py: the `orbits:` spec, light (pydantic only), so the swarm spec can validate an
    `orbits:` section without loading numpy)
    propagate.py  SGP4 (sgp4.api.SatrecArray) for satellites, WGS84 + sidereal rotation for ground stations
    planner.py    geometry + policy per step and pair -> run-length-encoded link timeline (pandas): plan(), Plan
    export.py     ION (`a contact` / `a range`) and HDTN JSON contact plans from the same timeline
    records.py    what a live run records (links.csv, probes.csv columns), the probe's ping argv and parser

All of it is pure: no subprocess, no file written except by the callers. Import from the submodules.
"""
