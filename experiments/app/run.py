"""`swarm run`: the reference swarm app on a swarm, under a fault timeline, into a results store and a report.

```yaml
type: app                 # experiments/dds-faults.yaml
name: dds-faults
nodes: 4
duration: 30s             # measured time, from t0 (after `warmup`)
warmup: 5s                # after `up`, before t0: DDS discovery
backend: netns
app: {rate_hz: 10}        # swarm.apps.AppSettings
swarm: {networks: ...}    # any other swarm spec fields
faults:                   # swarm.faults timeline, `at` seconds after t0
  - {at: 10s, partition: [[sat01, sat02], [sat03, sat04]]}
  - {at: 20s, heal: all}
```
Every node's app writes <node>.peers.csv and <node>.plans.csv as it runs: with the netns backend straight into
the run folder's nodes/ (a crash loses nothing written), with compose into the container, copied out before
the swarm is removed (also after Ctrl-C). The run folder then gets the tidy tables peers.csv (one row per
directed pair and window), plans.csv (per node and cycle), agreement.csv (per cycle: the share of nodes
holding the most common plan), faults.csv and run.json (t0), and report/ (tables, a time-series plot of
delivery ratio and agreement with the faults marked).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.spec.apps import AppSettings
from swarm.errors import SpecError
from experiments.timeline import FaultEvent, check_timeline
from swarm.spec.model import SwarmSpec, _check_name, swarm_from_template, validate_document

NODE_FILES = ("peers", "plans")


class AppExperiment(BaseModel):
    """An app run under a fault timeline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["app"] = "app"
    name: str
    nodes: int = Field(4, ge=2, le=1000)
    duration: float = 30.0
    warmup: float = 5.0
    apps: list[str] = Field(default_factory=lambda: ["swarm-app"])
    app: AppSettings = AppSettings()
    backend: Optional[Literal["compose", "netns"]] = None
    swarm: dict[str, Any] = Field(default_factory=dict)
    faults: list[FaultEvent] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name("experiment", v)

    @field_validator("duration", "warmup", mode="before")
    @classmethod
    def _seconds(cls, v: Any, info) -> float:
        from swarm.units import parse_duration

        return parse_duration(v, info.field_name)

    @model_validator(mode="after")
    def _consistent(self) -> "AppExperiment":
        if "swarm-app" not in self.apps:
            raise ValueError("apps: `swarm run` measures the reference app; list swarm-app")
        for key in ("name", "nodes", "node_list", "groups", "apps", "app"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the experiment (top-level `{key}`)" if key in ("nodes", "apps", "app")
                                 else f"swarm.{key}: set by the experiment")
        spec = self.swarm_spec()
        check_timeline(self.faults, [n.name for n in spec.resolved_nodes()], self.duration)
        return self

    def swarm_spec(self, app_out: str | None = None) -> SwarmSpec:
        """The swarm the app runs on; `app_out` (netns) is where the nodes write their records."""
        fields = {"apps": self.apps, "app": self.app.model_dump()}
        if app_out:
            defaults = dict(self.swarm.get("defaults", {}))
            defaults["env"] = {**defaults.get("env", {}), "SWARM_APP_OUT": app_out}
            fields["defaults"] = defaults
        return swarm_from_template(self.swarm, self.name, self.name, self.nodes, self.backend, **fields)


def experiment_from_dict(data: Any, source: str = "") -> AppExperiment:
    return validate_document(AppExperiment, data, source, "experiment")


# ------------------------------------------------------------------------------------------------ run
def run_app_experiment(exp: AppExperiment, results_root: Path, *, backend: str | None = None,
                       message: Callable[[str], None] = lambda m: None,
                       progress: Callable[[float, float, str], None] = lambda d, t, w: None) -> Path:
    """Bring the swarm up with the app, run the fault timeline for `duration`, collect, tear down; the run folder."""
    from swarm.runtime.swarm import Swarm, raise_keyboard_interrupt
    from experiments.timeline import FaultTimeline
    from experiments.traffic.run import ResultsStore, host_facts
    import signal

    probe = Swarm(exp.swarm_spec(), backend=backend or exp.backend)
    probe.backend.check_available()
    store = ResultsStore.create(Path(results_root), exp, host_facts())
    nodes_dir = store.dir / "nodes"
    nodes_dir.mkdir()
    direct = probe.backend.name == "netns"
    swarm = Swarm(exp.swarm_spec(str(nodes_dir.resolve()) if direct else None), backend=probe.backend.name,
                  message=message)
    previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    timeline = None
    try:
        message(f"run folder: {store.dir}")
        swarm.up(ready_timeout=60 + 2 * exp.nodes)  # every node starts a DDS participant: slow on a small host
        try:
            (store.dir / "host.json").write_text(json.dumps(host_facts(swarm), indent=1))
            if swarm.mesh_result is not None:  # a swarm with a mesh: its convergence after up, then per fault
                from swarm.mesh.plan import mesh_row

                store.append_mesh(mesh_row(store.run_id, "app", exp.nodes, swarm.mesh.implementation, "up", "",
                                           swarm.mesh_result))
            end_warmup = time.time() + exp.warmup
            while (left := end_warmup - time.time()) > 0:
                progress(exp.warmup - left, exp.warmup, "warm-up (DDS discovery)")
                time.sleep(min(0.5, left))
            t0 = time.time()
            (store.dir / "run.json").write_text(json.dumps({"t0": t0, "duration": exp.duration,
                                                            "backend": swarm.backend.name}))
            timeline = FaultTimeline(swarm.links, list(exp.faults), "app", store.run_id, message)
            if swarm.spec.mesh.enabled:
                from swarm.mesh.plan import MeshWatcher

                timeline.watcher = MeshWatcher(swarm.mesh, store.append_mesh, store.run_id, "app", exp.nodes)
            timeline.start(t0)
            while (elapsed := time.time() - t0) < exp.duration:
                done = len(timeline.rows)
                progress(elapsed, exp.duration, f"running, {done}/{len(exp.faults)} faults applied")
                time.sleep(min(0.5, exp.duration - elapsed))
            progress(exp.duration, exp.duration, "collecting")
            store.append_faults(timeline.finish(restore=False))
            if timeline.watcher:
                timeline.watcher.finish()
            timeline = None
        finally:
            if timeline is not None:
                timeline.stop()
                store.append_faults(timeline.finish(restore=False, timeout=5))
            if not direct:
                collect_from_nodes(swarm, nodes_dir)
            swarm.down()
    finally:
        signal.signal(signal.SIGTERM, previous)
    tidy_tables(store.dir)
    return store.dir


def collect_from_nodes(swarm, nodes_dir: Path) -> None:
    """Copy every node's record files out of its container (the app writes them into /run/swarm)."""
    for node in swarm.nodes:
        for kind in NODE_FILES:
            res = swarm.backend.exec(swarm.name, node.name, ["cat", f"/run/swarm/{node.name}.{kind}.csv"], check=False,
                                     timeout=60)
            if res.ok:
                (nodes_dir / f"{node.name}.{kind}.csv").write_text(res.stdout)


def tidy_tables(run_dir: Path) -> dict[str, Path]:
    """peers.csv, plans.csv (all nodes, with t = seconds since t0) and agreement.csv in the run folder."""
    import pandas as pd

    run_dir = Path(run_dir)
    t0 = json.loads((run_dir / "run.json").read_text())["t0"] if (run_dir / "run.json").exists() else 0.0
    out = {}
    for kind, tcol in (("peers", "window_start"), ("plans", "cycle_ts")):
        frames = [pd.read_csv(p) for p in sorted((run_dir / "nodes").glob(f"*.{kind}.csv")) if p.stat().st_size]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if not df.empty:
            df.insert(0, "t", (df[tcol] - t0).round(3))
        out[kind] = run_dir / f"{kind}.csv"
        df.to_csv(out[kind], index=False)
    plans = pd.read_csv(out["plans"]) if out["plans"].stat().st_size > 1 else pd.DataFrame()
    out["agreement"] = run_dir / "agreement.csv"
    agreement_per_cycle(plans).to_csv(out["agreement"], index=False)
    return out


def agreement_per_cycle(plans) -> "Any":
    """Per cycle: nodes that made a plan, and the share of them holding the most common plan."""
    import pandas as pd

    if plans.empty:
        return pd.DataFrame(columns=["cycle", "t", "nodes", "agreement"])
    g = plans.groupby("cycle")
    return pd.DataFrame({"t": g["t"].first(), "nodes": g["digest"].size(),
                         "agreement": g["digest"].agg(lambda s: s.value_counts().iloc[0] / len(s))}).reset_index()


# --------------------------------------------------------------------------------------------- report
def phase_table(run_dir: Path) -> "Any":
    """Delivery, latency and agreement per phase: before the first fault, between faults, after the last."""
    import pandas as pd

    run_dir = Path(run_dir)
    peers, agreement = pd.read_csv(run_dir / "peers.csv"), pd.read_csv(run_dir / "agreement.csv")
    meta = json.loads((run_dir / "run.json").read_text())
    faults = pd.read_csv(run_dir / "faults.csv") if (run_dir / "faults.csv").exists() else pd.DataFrame()
    marks = sorted(float(x) for x in faults.get("offset_s", pd.Series(dtype=float)).dropna())
    edges = [0.0, *marks, meta["duration"]]
    labels = ["before faults"] + [f"after {r.kind} {r.args}" for r in faults.sort_values("offset_s").itertuples()
                                  if not pd.isna(r.offset_s)] if len(faults) else ["whole run"]
    rows = []
    for (lo, hi), label in zip(zip(edges, edges[1:]), labels):
        p = peers[(peers["t"] >= lo) & (peers["t"] + peers["window_s"] <= hi)]
        a = agreement[(agreement["t"] >= lo) & (agreement["t"] < hi)]
        rows.append({"phase": label, "from_s": round(lo, 2), "to_s": round(hi, 2), "windows": len(p),
                     "delivery_ratio": p["received"].sum() / p["expected"].sum() if len(p) else float("nan"),
                     "pairs_full": int((p.groupby(["node", "peer"])["delivery_ratio"].min() >= 1).sum()) if len(p) else 0,
                     "pairs": p.groupby(["node", "peer"]).ngroups if len(p) else 0,
                     "latency_p50_ms": p["latency_p50_ms"].median(), "latency_p95_ms": p["latency_p95_ms"].median(),
                     "latency_max_ms": p["latency_max_ms"].max(), "age_mean_ms": p["age_mean_ms"].mean(),
                     "agreement_mean": a["agreement"].mean(), "agreement_min": a["agreement"].min()})
    return pd.DataFrame(rows)


def timeseries(run_dir: Path) -> "Any":
    """Per window (t: its middle, s since t0; windows ending after the run left out, when nodes were being
    stopped): delivery ratio over every directed pair, median p95 latency, mean swarm-wide agreement."""
    import pandas as pd

    run_dir = Path(run_dir)
    peers, agreement = pd.read_csv(run_dir / "peers.csv"), pd.read_csv(run_dir / "agreement.csv")
    duration = json.loads((run_dir / "run.json").read_text())["duration"]
    peers = peers[peers["t"] + peers["window_s"] <= duration + 1e-6]
    d = peers.groupby("t").agg(window_s=("window_s", "max"), received=("received", "sum"),
                               expected=("expected", "sum"), latency_p95_ms=("latency_p95_ms", "median")).reset_index()
    d["delivery_ratio"] = d["received"] / d["expected"]
    d["agreement"] = [agreement[(agreement["t"] >= r.t) & (agreement["t"] < r.t + r.window_s)]["agreement"].mean()
                      for r in d.itertuples()]
    d["t"] = (d["t"] + d["window_s"] / 2).round(3)
    return d


def write_app_report(run_dir: Path) -> dict[str, Path]:
    """report/: phases.csv, timeseries.csv, app_timeseries.png, report.md and report.html."""
    import pandas as pd
    from matplotlib.figure import Figure

    from analysis.report import write_report_pages

    run_dir = Path(run_dir)
    if not (run_dir / "peers.csv").exists() and (run_dir / "run.json").exists():
        tidy_tables(run_dir)  # an interrupted run: its nodes' records are in nodes/
    if not (run_dir / "peers.csv").exists():
        raise SpecError(f"{run_dir}: no peers.csv (not an app run folder, or the run collected nothing)")
    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    phases, series = phase_table(run_dir), timeseries(run_dir)
    faults = pd.read_csv(run_dir / "faults.csv") if (run_dir / "faults.csv").exists() else pd.DataFrame()
    paths = {"phases_csv": out / "phases.csv", "timeseries_csv": out / "timeseries.csv", "plot": out / "app_timeseries.png"}
    phases.to_csv(paths["phases_csv"], index=False)
    series.to_csv(paths["timeseries_csv"], index=False)
    fig = Figure(figsize=(8, 4.5), dpi=110)
    ax = fig.add_subplot()
    ax.plot(series["t"], series["delivery_ratio"], marker=".", label="delivery ratio (all directed pairs)")
    ax.plot(series["t"], series["agreement"], marker=".", label="plan agreement (share on the modal plan)")
    for r in faults.itertuples() if len(faults) else []:
        if not pd.isna(r.offset_s):
            ax.axvline(r.offset_s, color="grey", linestyle="--", linewidth=1)
            ax.text(r.offset_s, 1.03, f"{r.kind}", rotation=90, fontsize="x-small", va="bottom")
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("seconds since t0")
    ax.set_title("Reference app: delivery and agreement (dashed: faults took effect)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    fig.tight_layout()
    fig.savefig(paths["plot"], format="png")
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    sections = [("Phases (between the faults)", [("table", phases)]),
                ("Delivery ratio and plan agreement over time", [("figure", (paths["plot"], "delivery and agreement"))])]
    if len(faults):
        sections.append(("Faults (planned at_s, took effect at offset_s)", [("table", faults)]))
    if (run_dir / "mesh.csv").exists():
        from analysis.faults import mesh_table

        sections.append(("Mesh: time to converge after up and after each fault", [("table", mesh_table(run_dir))]))
    skipped = pd.read_csv(run_dir / "plans.csv")["skipped"].sum() if (run_dir / "plans.csv").stat().st_size > 1 else 0
    warnings = [f"nodes skipped {int(skipped)} cycles in all because they ran late (host overloaded): those "
                "samples were never sent"] if skipped else []
    title = f"Swarm app report: {run_dir.resolve().name}"
    intro = ("Delivery ratio: samples received / samples the peers should have sent (two topics per cycle), per "
             "directed pair and window of send cycles. Agreement: per cycle, the share of nodes whose plan equals "
             "the most common plan. Latency: receive minus send time on the shared host clock.")
    return {**paths, **write_report_pages(out, title, intro, host, warnings, sections)}
