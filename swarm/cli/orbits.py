"""`swarm orbits`: orbit-driven links.

    swarm orbits plan FILE [--out DIR] [--json]     # the plan alone, no swarm: summary, plots, contact plans
    swarm orbits apply NAME [FILE] [--speedup 10]   # running swarm NAME's links follow the plan live
                                                    # (FILE's, or the `orbits:` of NAME's own spec)

FILE is a YAML file with an `orbits:` mapping (an orbits experiment, a swarm spec) or the mapping itself
(netem/spec/orbits.py has the fields). Bad input: one line, exit 2, nothing started.
"""
from __future__ import annotations

import json
import time
from typing import Callable
from pathlib import Path

import click
from rich.table import Table

from swarm.cli.console import err, out
from swarm.errors import SpecError
from swarm.runtime.swarm import Swarm
from swarm.spec.documents import read_yaml
from swarm.spec.model import spec_from_dict
from swarm.spec.dtn import node_numbers

# The planner, its report and the driver pull in numpy, pandas and matplotlib (~1.5 s): imported in the
# commands that use them, so the other `swarm` commands start fast.


def register(cli: click.Group) -> None:
    """Add `orbits` to the `swarm` command group."""
    cli.add_command(orbits)


@click.group()
def orbits() -> None:
    """Orbit-driven links: plan a link timeline from orbits, or make a running swarm follow it."""


@orbits.command("plan")
@click.argument("file", type=click.Path())
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for the timeline, contact plans and plots (default: results/orbits-<file stem>).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def plan_cmd(file: str, out_dir: str | None, as_json: bool) -> None:
    """Plan FILE's orbits: print the timeline summary, write plots and contact plans. Starts no swarm."""
    from analysis.orbits import write_plan_report
    from netem.orbits.planner import plan as make_plan
    from netem.spec.orbits import load_orbits_file

    spec = load_orbits_file(file)
    plan = make_plan(spec)
    folder = Path(out_dir) if out_dir else Path("results") / f"orbits-{Path(file).stem}"
    files = write_plan_report(plan, folder, _swarm_numbers(file))
    summary = plan.summary()
    for w in plan.warnings:
        err.print(f"warning: {w}")
    if as_json:
        out.print_json(json.dumps(summary | {"files": {k: str(v) for k, v in files.items()}}))
        return
    table = Table(title=f"orbit plan: {file}", show_header=False)
    for key, value in summary.items():
        table.add_row(key, "" if value is None else f"{value:g}" if isinstance(value, float) else str(value))
    out.print(table)
    out.print(f"written to {folder}: " + ", ".join(sorted(files)))


def _swarm_numbers(file: str) -> dict[str, int] | None:
    """ION/HDTN node numbers in the swarm's node order (node i = ipn:i, or a DTN node's own ipn number) when FILE
    is a swarm spec with
    `orbits:`; None (plan order) otherwise."""
    data = read_yaml(file, "orbits file")
    if not (isinstance(data, dict) and "name" in data and any(k in data for k in ("nodes", "node_list", "groups"))):
        return None
    nodes = spec_from_dict(data, file).resolved_nodes()
    # a DTN node's number is its ipn number (dtn.number / LTP engine ID, else its index), as its agent uses
    return {**{n.name: i for i, n in enumerate(nodes, start=1)}, **node_numbers({n.name: n.dtn for n in nodes})}


@orbits.command("apply")
@click.argument("name")
@click.argument("file", type=click.Path(), required=False)
@click.option("--speedup", type=float, default=1.0, show_default=True,
              help="Time compression: plan second t is applied at wall second t / speedup.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for links.csv and the plan (default: results/orbits-<name>-<UTC time>).")
@click.option("--keep", is_flag=True, help="Leave the plan's last link state in place (default: restore the spec's).")
def every_seconds(period: float, report: Callable[[float, float, str], None]) -> Callable[[float, float, str], None]:
    """`report` at most once per `period` seconds, and at the plan's end (a progress line, not one per poll)."""
    last = [float("-inf")]

    def throttled(done: float, total: float, what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= period or done >= total:
            last[0] = now
            report(done, total, what)
    return throttled


def apply_cmd(name: str, file: str | None, speedup: float, out_dir: str | None, keep: bool) -> None:
    """Make running swarm NAME's links follow an orbit plan live (FILE's, or the `orbits:` of NAME's spec);
    every update's lag goes to links.csv."""
    import pandas as pd

    from analysis.orbits import lag_summary
    from netem.orbits.planner import plan as make_plan
    from netem.spec.orbits import load_orbits_file, parse_orbits
    from netem.orbits.records import LINK_COLUMNS
    from netem.runtime.orbits import LinkTimelineDriver, links_csv_writer

    if not speedup > 0:
        raise SpecError(f"--speedup {speedup:g}: must be positive")
    swarm = Swarm.attach(name)
    if file is None and swarm.spec.orbits is None:
        raise SpecError(f"swarm {name!r}: its spec has no `orbits:`; give an orbits FILE")
    orbits_spec = load_orbits_file(file) if file else parse_orbits(swarm.spec.orbits, f"swarm {name}: orbits")
    plan = make_plan(orbits_spec)
    folder = Path(out_dir) if out_dir else Path("results") / f"orbits-{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    folder.mkdir(parents=True, exist_ok=True)
    plan.timeline.to_csv(folder / "timeline.csv", index=False)
    rows: list[dict] = []
    record = links_csv_writer(folder / "links.csv", rows)

    driver = LinkTimelineDriver(swarm.links, plan, speedup=speedup, on_rows=record, message=err.print, orbits=orbits_spec)
    err.print(f"swarm {name!r}: following {file or 'its orbits'} ({plan.duration:g} s of orbit at x{speedup:g}: "
              f"{plan.duration / speedup:.0f} s); Ctrl-C stops")
    try:
        summary = driver.run(progress=every_seconds(10.0, lambda done, total, what: err.print(
            f"orbits: {done:.0f}/{total:.0f} s: {what}")))
    except KeyboardInterrupt:
        driver.stop()
        raise
    finally:
        driver.close()
        if not keep:
            driver.restore()
    (folder / "driver.json").write_text(json.dumps(summary, indent=1))
    lag = lag_summary(pd.DataFrame(rows, columns=LINK_COLUMNS), plan.step / speedup) if rows else {}
    out.print(json.dumps(summary | {"lag": lag}, indent=1))
    out.print(f"written to {folder}")
