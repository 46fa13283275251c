"""The reference swarm app live: 4 nodes reach full delivery, a partition reduces it, a heal restores it (netns,
and once with compose); a CCSDS command to the CI_LAB port changes the app, seen in TO_LAB telemetry."""
from __future__ import annotations

import io
import json
import socket
import time

import pandas as pd
import pytest

from experiments.app.model import experiment_from_dict
from experiments.app.run import run_app_experiment
from analysis.app import phase_table, with_sent, write_app_report
from swarm.runtime.swarm import Swarm
from swarm.spec.model import gateway_address, spec_from_dict

from flightsw import ground_link as gl
from alloc import nets, octets
from conftest import wait_until

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]


def app_experiment(backend: str, third: int):
    return experiment_from_dict({
        "type": "app", "name": f"dd-app-{backend}", "nodes": 4, "duration": "18s", "warmup": "4s", "backend": backend,
        "app": {"rate_hz": 10},
        "swarm": {"networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}}},
        "faults": [{"at": "6s", "partition": [["sat01", "sat02"], ["sat03", "sat04"]]}, {"at": "12s", "heal": "all"}],
    })


@pytest.mark.parametrize("backend", ["netns", pytest.param("compose", marks=pytest.mark.docker)])
def test_partition_reduces_delivery_and_heal_restores_it(backend, request, tmp_path, need_netns):
    if backend == "compose":
        request.getfixturevalue("need_docker")
    run_dir = run_app_experiment(app_experiment(backend, NET[0] if backend == "netns" else NET[2]), tmp_path)
    phases = phase_table(run_dir).set_index("phase")
    before, cut, healed = phases.iloc[0], phases.iloc[1], phases.iloc[2]
    assert phases.index[1].startswith("after partition") and phases.index[2] == "after heal all"
    # full delivery on all 12 directed pairs before the partition and after the heal
    assert before["delivery_ratio"] == 1.0 and before["pairs_full"] == 12, phases
    assert healed["pairs_full"] == 12 and healed["delivery_ratio"] == 1.0, phases
    # partitioned: nothing crosses between the halves, the 4 pairs inside them still deliver; the plans split
    peers = pd.read_csv(run_dir / "peers.csv")
    during = peers[(peers["t"] >= cut["from_s"]) & (peers["t"] + peers["window_s"] <= cut["to_s"])]
    half = {"sat01": 0, "sat02": 0, "sat03": 1, "sat04": 1}
    crossing = during["node"].map(half) != during["peer"].map(half)
    assert len(during) >= 4 * 12 and during[crossing]["received"].sum() == 0, during
    inside = during[~crossing].groupby(["node", "peer"])
    assert inside.ngroups == 4 and (inside["received"].sum() / inside["expected"].sum() >= 0.95).all(), during
    assert cut["delivery_ratio"] == pytest.approx(4 / 12, abs=0.02), phases
    assert cut["agreement_mean"] == pytest.approx(0.5, abs=0.05), phases
    # connected: (nearly) every cycle's plans agree; a plan made before a late peer's observation arrived
    # (a host hiccup longer than a cycle) disagrees once, which is what the figure is there to show
    assert before["agreement_mean"] >= 0.95 and healed["agreement_mean"] >= 0.9, phases
    assert set(peers["node"]) == {"sat01", "sat02", "sat03", "sat04"}
    lat = peers[(peers["t"] >= 0) & (peers["t"] < 5)]["latency_p50_ms"]
    assert 0 < lat.median() < 50  # same host: well under one cycle
    paths = write_app_report(run_dir)
    assert paths["plot"].stat().st_size > 10_000 and "after partition" in paths["report_md"].read_text()


def test_ccsds_command_changes_the_app_seen_in_telemetry(need_netns):
    spec = spec_from_dict({"name": "dd-ccsds", "nodes": 2, "backend": "netns", "apps": ["swarm-app"],
                           "app": {"rate_hz": 10},
                           "networks": nets(NET[4])})
    ground = gateway_address(spec.networks.ground.subnet)
    with Swarm(spec) as swarm:
        target = (swarm.node("sat01").ground_ip, gl.CI_LAB_PORT)
        tlm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tlm.bind((ground, gl.TO_LAB_PORT))
        tlm.settimeout(0.5)
        cmd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

        def send(code: int, payload: bytes = b"", seq: int = 0) -> None:
            cmd.sendto(gl.command_packet(code, payload, seq), target)

        def next_hk(pred, timeout=10.0) -> dict:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    data, src = tlm.recvfrom(2048)
                except socket.timeout:
                    continue
                hk = gl.parse_hk(gl.parse_telemetry(data).payload)
                if pred(hk):
                    return hk
            raise AssertionError("no matching telemetry")

        deadline = time.monotonic() + 20  # the app starts listening once DDS is set up
        while True:
            send(gl.CC_ENABLE_OUTPUT, gl.enable_output_payload(ground))
            try:
                hk = next_hk(lambda h: True, timeout=1.0)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        assert hk["rate_mhz"] == 10_000 and hk["peers"] == 1
        base = hk["command_count"]
        send(gl.CC_NOOP, seq=1)
        send(gl.CC_NOOP, seq=2)
        hk = next_hk(lambda h: h["command_count"] >= base + 2)
        assert hk["command_count"] == base + 2 and hk["command_errors"] == 0
        send(gl.CC_SET_RATE, gl.set_rate_payload(4), seq=3)
        hk = next_hk(lambda h: h["rate_mhz"] == 4000)
        assert hk["command_count"] == base + 3
        bad = bytearray(gl.command_packet(gl.CC_NOOP, seq=4))
        bad[-1] ^= 0xFF  # wrong checksum: counted as an error, not executed
        cmd.sendto(bytes(bad), target)
        hk = next_hk(lambda h: h["command_errors"] == 1)
        assert hk["command_count"] == base + 3
        # the slower rate shows in the records: cycles 250 ms apart (polled: the file grows a row per cycle)
        plans_csv = swarm.backend.node_run_dir(swarm.name, "sat01") / "sat01.plans.csv"

        def last_gaps() -> list[float]:
            lines = plans_csv.read_text().splitlines(keepends=True)
            whole = "".join(ln for ln in lines if ln.endswith("\n"))  # a row being written is left for the next poll
            return pd.read_csv(io.StringIO(whole))["cycle_ts"].diff().iloc[-3:].round(3).tolist()

        gaps: list = []
        try:
            wait_until(lambda: gaps.append(last_gaps()) or gaps[-1] == [0.25, 0.25, 0.25], 20, "cycles 250 ms apart")
        except AssertionError:
            raise AssertionError(f"the last gaps seen: {gaps[-3:]}") from None
        tlm.close()


def test_app_keeps_delivering_over_the_mesh_when_a_link_is_cut(tmp_path, need_netns):
    """With the B.A.T.M.A.N. mesh (batmand here), a cut sat01-sat03 costs that pair some samples, then the mesh
    carries them over two hops: delivery is full again from the mesh's measured re-route on, while the cut is still
    in place. The re-route instant is the run's own (mesh.csv's converged_ts of the cut), not a fixed 4 s: on a
    loaded host batmand's OGMs and the route install run late, which is not a defect (stress run 3 of 06e87f3 saw
    the window at 10.2 s, 4.2 s after the cut, still short one sample)."""
    exp = experiment_from_dict({
        "type": "app", "name": "dd-app-mesh", "nodes": 4, "duration": "20s", "warmup": "4s", "backend": "netns",
        "app": {"rate_hz": 10, "multicast": False},
        "swarm": {"mesh": {"protocol": "batman", "ogm_interval": "200ms", "purge_timeout": "3s"},
                  "networks": nets(NET[6])},
        "faults": [{"at": "6s", "cut": ["sat01", "sat03"]}, {"at": "16s", "heal": "all"}],
    })
    run_dir = run_app_experiment(exp, tmp_path)
    peers = with_sent(pd.read_csv(run_dir / "peers.csv"))
    # Full delivery = every sample sat01 sent arrived: cycles sat01 skipped because it ran late (a busy host) were
    # never sent, so they are `unsent`, not lost, as in the report's phase table (analysis.app.with_sent).
    pair = peers[(peers["node"] == "sat03") & (peers["peer"] == "sat01")]
    mesh = pd.read_csv(run_dir / "mesh.csv")
    assert list(mesh["event"]) == ["up", "cut", "heal"] and mesh["converged"].all(), mesh
    t0 = json.loads((run_dir / "run.json").read_text())["t0"]
    rerouted_at = float(mesh.loc[mesh["event"] == "cut", "converged_ts"].iloc[0]) - t0  # s after t0
    # By 13 s at the latest (7 s after the cut: purge_timeout 3 s and OGMs late on a busy host), so that at least two
    # whole windows show the re-routed delivery before the heal.
    assert 6 < rerouted_at <= 13, f"the mesh re-routed {rerouted_at:.2f} s after t0 (cut at 6 s, heal at 16 s)"
    before = pair[(pair["t"] >= 1) & (pair["t"] + pair["window_s"] <= 6)]
    rerouted = pair[(pair["t"] >= rerouted_at) & (pair["t"] + pair["window_s"] <= 16)]  # re-routed, still cut
    assert len(before) >= 4 and (before["received"] == before["sent"]).all(), pair
    late = pd.read_csv(run_dir / "plans.csv").query("skipped > 0")[["t", "node", "skipped"]]  # hosts' hiccups, if any
    assert len(rerouted) >= 2 and (rerouted["received"] == rerouted["sent"]).all(), (rerouted_at, pair, late)
    assert (rerouted["sent"] >= rerouted["expected"] // 2).all(), rerouted  # sat01 still sent (at least half)
    assert "Mesh: time to converge" in write_app_report(run_dir)["report_md"].read_text()
