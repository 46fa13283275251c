"""No silent waits, no unclear output (issue 11): fault heal shows progress and honours Ctrl-C, the mesh is
read concurrently and called converged only once its routes hold, impair --show says where each engine acts."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import click
import pytest

from swarm.spec.mesh import MeshSpec


def fake_mesh(snapshots, clock_step=0.1):
    from swarm.runtime import mesh as mesh_mod
    from swarm.runtime.mesh import Mesh

    m = Mesh.__new__(Mesh)
    m.spec, m.implementation = MeshSpec(protocol="batman"), "batmand"
    it = iter(snapshots)
    m.snapshot = lambda direct=frozenset(), state=None: next(it)()
    return m, mesh_mod


def test_converged_only_when_routes_hold_for_the_stability_window(monkeypatch):
    from swarm.mesh.plan import MeshSnapshot

    clock = iter([100.0 + 0.5 * i for i in range(200)])
    now = {"t": 100.0}

    def tick():
        now["t"] = next(clock)
        return now["t"]

    m, mesh_mod = fake_mesh([])
    monkeypatch.setattr(mesh_mod.time, "time", tick)
    monkeypatch.setattr(mesh_mod.time, "sleep", lambda s: None)
    relay_a, relay_b = {"sat01": {"sat03": "sat02"}}, {"sat01": {"sat03": "sat04"}}
    seq = [({"sat01": ["no route"]}, {}), ({"sat01": []}, relay_a), ({"sat01": []}, relay_b),  # relay flips
           ({"sat01": []}, relay_b), ({"sat01": []}, relay_b), ({"sat01": []}, relay_b), ({"sat01": []}, relay_b)]
    snaps = iter(seq)

    def snapshot(direct=frozenset(), state=None):
        problems, routes = next(snaps)
        return MeshSnapshot(mesh_mod.time.time(), routes, problems)

    m.snapshot = snapshot
    seen = []
    timing = m.wait_converged(since=99.0, stable_s=2.0, progress=lambda d, t, w: seen.append(w))
    assert timing["converged"]
    # the first converged snapshot named relay sat02, the next sat04: converged counts from the first sat04 one
    # (taken at 103.0, done 103.5), once it held 2 s
    assert timing["converged_ts"] == 103.5 and timing["converge_s"] == 4.5
    assert any("routes stable" in w for w in seen)


def test_without_a_window_the_first_converged_snapshot_counts(monkeypatch):
    from swarm.mesh.plan import MeshSnapshot

    clock = iter([100.0 + 0.1 * i for i in range(100)])
    m, mesh_mod = fake_mesh([])
    monkeypatch.setattr(mesh_mod.time, "time", lambda: next(clock))
    monkeypatch.setattr(mesh_mod.time, "sleep", lambda s: None)
    outcomes = iter([{"sat01": ["x"]}, {"sat01": []}])
    m.snapshot = lambda direct=frozenset(), state=None: MeshSnapshot(mesh_mod.time.time(), {}, next(outcomes))
    assert m.wait_converged(since=99.95)["polls"] == 2


def test_mesh_report_reads_every_node_at_once():
    from swarm.mesh.plan import MeshSnapshot
    from swarm.runtime.mesh import Mesh

    names = [f"sat{i:02d}" for i in range(1, 9)]
    m = Mesh.__new__(Mesh)
    m.spec, m.implementation, m.names, m.by_ip = MeshSpec(protocol="batman"), "batmand", names, {}
    m.swarm = SimpleNamespace(name="hd-mesh")
    m.describe = lambda: "batmand"
    m.link_state = lambda: (set(), set())
    m.snapshot = lambda direct=frozenset(), state=None: MeshSnapshot(0.0, {n: {} for n in names}, {n: [] for n in names})
    active, peak = [0], [0]
    lock = threading.Lock()

    def originators(node):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return []

    m.originators = originators
    report = m.report()
    assert len(report["nodes"]) == 8 and peak[0] > 1  # read concurrently, not one node after another


def test_fault_wait_shows_progress_and_ctrl_c_leaves_the_fault(capsys):
    from swarm.cli import mesh as mesh_cli

    def interrupted(*args, **kwargs):
        kwargs["progress"](3, 8, "mesh nodes converged")
        raise KeyboardInterrupt

    swarm = SimpleNamespace(name="hd-f", spec=SimpleNamespace(mesh=SimpleNamespace(enabled=True)),
                            nodes=[None] * 8,
                            mesh=SimpleNamespace(spec=MeshSpec(protocol="batman"), implementation="batmand",
                                                 wait_converged=interrupted))
    with pytest.raises(click.exceptions.Exit) as exc:
        mesh_cli.wait_after_fault(swarm, "heal", time.time(), set(), set())
    assert exc.value.exit_code == 130
    text = capsys.readouterr().err
    assert "waiting for the mesh to reconverge" in text and "the fault (heal) stays applied" in text


@pytest.mark.parametrize("engine, where", [("nft", "loss and cuts at the receiver"), ("netem", "on the sender"),
                                           ("userspace", "on the way to the receiver")])
def test_impair_show_says_where_each_engine_applies(engine, where):
    from swarm.cli.links import applied_at

    assert applied_at(SimpleNamespace(name=engine)).startswith(where)


def test_every_registered_engine_says_where_it_applies():
    from netem.engines import ENGINES
    from swarm.cli.links import APPLIED_AT

    assert set(ENGINES) <= set(APPLIED_AT), "a new engine: say in swarm/cli/links.py (or its applied_at) where it acts"


def test_readme_impair_example_works_on_a_host_without_netem():
    """The links page's first impair line (docs/LINKS.md, moved from the README) must use parameters every
    engine applies (loss, rate)."""
    import re
    import shlex
    from pathlib import Path

    from netem.spec.links import PARAMS

    readme = (Path(__file__).resolve().parents[2] / "docs" / "LINKS.md").read_text()
    first = next(line for line in readme.splitlines() if line.startswith("swarm impair my-swarm --between"))
    argv = shlex.split(first.split("#")[0])
    params = {a[2:] for a in argv if a.startswith("--") and a[2:] in PARAMS}
    assert params and params <= {"loss", "rate", "up"}, params
    assert re.search(r"--delay .*sch_netem", readme)
