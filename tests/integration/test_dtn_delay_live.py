"""dtn7 as patched by images/dtn/dtn7-0.21.0.patch, live (netns backend, real dtnd from `make setup`):

- the epidemic router relays around a destination it cannot reach: with the published 0.21.0, sat01 marks
  sat02 as "sent" while looking for sat03 in its (name-ordered) peer map, fails the direct attempt, and then
  never offers the bundle to sat02, so it is never delivered;
- `cla: tcp` carries bundles over 2 s and 4 s one-way (the published crate's 3 s connect timeout stopped
  every bundle above ~1.5 s one-way).

Subnets from tests/alloc.py, swarm names dtn-*(helper dtn's range)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.dtn.model import experiment_from_dict
from experiments.dtn.run import run_dtn_experiment
from experiments.store import ResultsStore, host_facts
from netem.engines import choose_engine
from swarm.runtime.probe import capabilities
from conftest import REPO, swarm_namespaces as _namespaces
from alloc import nets, nets_yaml, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}


def _swarm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


def _peers(name: str, node: str) -> list[str]:
    res = _swarm("dtn", "status", name, "--json")
    assert res.returncode == 0, res.stderr
    return next(r["peers"] for r in json.loads(res.stdout) if r["node"] == node)


def _wait_peer(name: str, node: str, peer: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while peer not in _peers(name, node):
        assert time.monotonic() < deadline, f"{node} never listed {peer} as a peer"
        time.sleep(0.5)


def _receive(name: str, node: str, payload: str, timeout: float) -> bool:
    """Whether `payload` from sat01 reaches `node` within `timeout` s. Epidemic routing hands the endpoint
    duplicates (after a heal sat01 still offers an earlier round's bundle directly): those are skipped."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        got = _swarm("dtn", "recv", name, node, "--timeout", f"{max(left, 1):.0f}", timeout=left + 60)
        if got.returncode != 0:
            return False
        bundle = json.loads(got.stdout)
        if bundle["payload"] == payload and bundle["src"] == "dtn://sat01/":
            return True
    return False


def test_epidemic_relays_around_a_cut_destination_every_time(need_dtn7, tmp_path):
    name = "dtn-relay"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: netns\nnodes: 3\n"
                    f"{nets_yaml(NET[0])}\n"
                    "defaults: {dtn: {cla: tcp, routing: epidemic, peers: auto}}\n")
    try:
        up = _swarm("up", str(spec), timeout=180)
        assert up.returncode == 0, up.stderr
        direct_first = []
        for round_ in range(3):
            # sat03 is sat01's peer when the bundle is sent (discovered over the ISL), then the direct link goes
            _wait_peer(name, "sat01", "sat03")
            _wait_peer(name, "sat02", "sat03")
            cut = _swarm("fault", name, "cut", "sat01", "sat03")
            assert cut.returncode == 0, cut.stderr
            # Usually still listed, so the direct attempt happens first; on a host loaded enough that the CLI calls
            # outlast dtnd's peer timeout it is already gone. Either way the bundle must go round via sat02.
            direct_first.append("sat03" in _peers(name, "sat01"))
            payload = f"round {round_} around the cut"
            sent = _swarm("dtn", "send", name, "sat01", "sat03", payload)
            assert sent.returncode == 0, sent.stderr
            assert _receive(name, "sat03", payload, 40), (f"round {round_}: not delivered via sat02 "
                                                          f"(sat03 still sat01's peer after the cut: {direct_first})\n"
                                                          + _swarm("dtn", "status", name).stdout)
            heal = _swarm("fault", name, "heal", "sat01", "sat03")
            assert heal.returncode == 0, heal.stderr
        log = _swarm("dtn", "log", name, "sat02").stdout
        assert "Sending bundle succeeded" in log  # sat02 carried them to sat03
    finally:
        down = _swarm("down", name)
    assert down.returncode == 0, down.stderr
    assert not _namespaces(name)


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_tcp_cla_delivers_at_2_and_4_seconds_one_way(need_dtn7, tmp_path):
    """experiments/dtn-delay.yaml test-sized: 8 bundles of 100 kB over 2 s and 4 s one-way (the published
    dtn7 delivered none: its 3 s connect timeout is shorter than the handshake's 4 s / 8 s round trip)."""
    engine = choose_engine(capabilities())
    if "delay" not in engine.supported():
        pytest.skip(f"no impairment engine here can delay (chosen: {engine.name})")
    doc = {"type": "dtn", "name": "dtn-delay-it", "backend": "netns", "pattern": "all-to-ground", "sizes": [1],
           "bundle_sizes": ["100kB"], "rates": [2], "clas": ["tcp"], "routings": ["epidemic"],
           "profiles": [{"delay": "2s"}, {"delay": "4s"}], "duration": "4s", "drain": "80s",
           "swarm": {"networks": nets(NET[1])}}
    exp = experiment_from_dict(doc, str(tmp_path / "exp.yaml"))
    store = ResultsStore.create(tmp_path / "results", exp, host_facts())
    run_dtn_experiment(exp, store, message=print)
    assert not _namespaces("dtn-delay-it"), "the test's namespaces outlived it"
    tests = {t["profile"]: t for t in _rows(store.dir / "tests.csv")}
    assert set(tests) == {"delay=2s", "delay=4s"}
    bundles = _rows(store.dir / "bundles.csv")
    for profile, one_way in (("delay=2s", 2.0), ("delay=4s", 4.0)):
        test = tests[profile]
        got = [b for b in bundles if b["test_id"] == test["test_id"] and b["delivered"] == "True"]
        # one bundle per round trip at best (TCPCL waits for each XFER_ACK); measured with the larger initial
        # windows: 8 of 8 at 2 s, 3 of 8 at 4 s within the drain (6 and 1 without them)
        assert len(got) >= 2, f"{profile}: {test['bundles_delivered']} of {test['bundles_sent']} delivered"
        assert all(int(b["size"]) == 100_000 for b in got)
        # nothing sooner than the light time allows; the session's set-up takes ~3 round trips first
        assert min(float(b["latency_s"]) for b in got) >= one_way


def test_a_patch_that_no_longer_applies_is_one_line_exit_2(need_dtn7, tmp_path):
    """images/dtn/build.sh against a patch that does not fit the crate: one line naming the patch, exit 2,
    nothing built or cached (the check runs on the registry's .crate before cargo starts)."""
    bad = tmp_path / "dtn7-0.21.0.patch"
    bad.write_text("header\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,1 +1,1 @@\n-not a line of dtn7\n+nor this\n")
    cache = tmp_path / "cache"
    res = subprocess.run(["bash", str(REPO / "images/dtn/build.sh")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DTN7_PATCH": str(bad), "SWARM_DTN7_CACHE": str(cache)})
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"dtn7 build: {bad} no longer applies to dtn7 0.21.0 "
                                               "(update the patch or DTN7_VERSION)"]
    assert not any(p.name.startswith("dtn7-") for p in cache.iterdir())
