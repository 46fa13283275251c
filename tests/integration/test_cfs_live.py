"""cFS on every node, live with real Docker.

- With a real cFS build (SWARM_CFS_INSTALL=<cFS>/build/exe/cpu1, see images/cfs/README.md): 4 nodes reach
  OPERATIONAL, each with its own CPU and spacecraft ID; a second image lookup does not rebuild; a command
  sent to every node's CI_LAB (UDP 1234) turns on its TO_LAB telemetry, whose events name that node's
  IDs. Skipped with that reason where no build is given (also under CI, which has no cFS build).
- Without a build: a stand-in core-cpu1 that exits, or never reaches OPERATIONAL, fails `up` with the
  node's log and leaves nothing behind (these need only Docker).
"""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from swarm.runtime.cfs_image import cfs_image_tag, ensure_cfs_image
from swarm.cfs.ground import (CFE_EVS_LONG_EVENT_MID, TO_LAB_CMD_MID, TO_LAB_HK_TLM_MID, TO_LAB_NOOP_CC, GroundStation,
                              command_packet, parse_event, to_lab_counters)
from swarm.runtime.swarm import NodeFailed, Swarm
from swarm.runtime.runner import Runner
from swarm.spec.model import gateway_address, spec_from_dict

from conftest import REPO
from alloc import octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.docker, pytest.mark.slow]
INSTALL = os.environ.get("SWARM_CFS_INSTALL", "")


def labelled(name: str) -> list[str]:
    """Containers and networks of swarm `name` that still exist."""
    out = []
    for kind in (["ps", "-aq"], ["network", "ls", "-q"]):
        res = subprocess.run(["docker", *kind, "--filter", f"label=io.swarm-emu.swarm={name}"], capture_output=True, text=True)
        out += res.stdout.split()
    return out


def make(name: str, install: str, third: int, n: int = 4) -> Swarm:
    spec = spec_from_dict({"name": name, "nodes": n, "backend": "compose",
                           "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}},
                           "defaults": {"cfs": {"install": install}}})
    return Swarm(spec, workdir=REPO)


@pytest.fixture
def cfs_install():
    if not INSTALL:
        pytest.skip("no cFS build: set SWARM_CFS_INSTALL to a natively built <cFS>/build/exe/cpu1 (images/cfs/README.md)")
    if not (Path(INSTALL) / "core-cpu1").is_file():
        pytest.fail(f"SWARM_CFS_INSTALL={INSTALL!r} has no core-cpu1")
    return INSTALL


def test_real_cfs_on_four_nodes_commanded_over_ci_lab(need_docker, cfs_install):
    swarm = make("cf-it", cfs_install, third=NET[0])
    try:
        swarm.up()
        for node in swarm.nodes:
            log = swarm.backend.logs(swarm.name, node.name, tail=100_000)
            assert f"CFE_PSP: CPU ID: {node.index}\n" in log + "\n"
            assert f"CFE_PSP: Spacecraft ID: {0x42 + node.index - 1}\n" in log + "\n"
            assert f"CFE_PSP: CPU Name: {node.name}" in log
            assert "CFE_ES_Main entering OPERATIONAL state" in log
            assert f"CI_LAB listening on UDP port: {1234 + node.index - 1}" in log

        said: list[str] = []
        assert ensure_cfs_image(Runner(), REPO, swarm.image, cfs_install, said.append) == \
            cfs_image_tag(REPO, swarm.image, cfs_install)
        assert said and "is up to date" in said[0]  # no second build

        by_ip = {n.ground_ip: n for n in swarm.nodes}
        events, counters = defaultdict(list), defaultdict(list)
        with GroundStation(gateway_address(swarm.spec.networks.ground.subnet)) as ground:
            for node in swarm.nodes:  # every node on UDP 1234, whatever its CPU ID
                ground.enable_telemetry(node.ground_ip)
                ground.send(node.ground_ip, command_packet(TO_LAB_CMD_MID, TO_LAB_NOOP_CC))
            for sender, tlm in ground.receive(8.0):
                if tlm.mid == CFE_EVS_LONG_EVENT_MID:
                    events[sender].append(parse_event(tlm))
                elif tlm.mid == TO_LAB_HK_TLM_MID:
                    counters[sender].append(to_lab_counters(tlm)["command_count"])
        assert set(events) == set(by_ip) and set(counters) == set(by_ip)
        for ip, node in by_ip.items():
            noop = [e for e in events[ip] if e["app"] == "TO_LAB_APP" and e["message"].startswith("TO: NOOP")]
            assert noop, events[ip]
            assert (noop[0]["cpu_id"], noop[0]["spacecraft_id"]) == (node.index, 0x42 + node.index - 1)
            assert max(counters[ip]) == 2  # output enable + NOOP, both accepted

        res = subprocess.run([sys.executable, "-m", "swarm", "cfs", "tlm", swarm.name, "--seconds", "3", "--json"],
                             capture_output=True, text=True, cwd=REPO, env={**os.environ, "SWARM_WORKDIR": str(REPO)})
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)["nodes"]
        assert [(r["node"], r["event_ids"]) for r in rows] == [(n.name, [n.index, 0x42 + n.index - 1]) for n in swarm.nodes]
    finally:
        swarm.down()
    assert labelled("cf-it") == []


def stand_in_build(root: Path, script: str) -> str:
    """An install tree whose core-cpu1 is a shell script (to test the framework, not cFS)."""
    (root / "cf").mkdir(parents=True)
    (root / "cf" / "cfe_es_startup.scr").write_text("!\n")
    core = root / "core-cpu1"
    core.write_text("#!/bin/sh\n" + script + "\n")
    core.chmod(0o755)
    return str(root)


@pytest.mark.parametrize("case", ["exits", "never_operational"])
def test_cfs_node_not_reaching_operational_fails_with_log_and_leaves_nothing(need_docker, tmp_path, case):
    script = {"exits": 'echo "core says boom for $*"; exit 3',
              "never_operational": 'echo "CFE_ES_Main entering CORE_STARTUP state for $*"; exec sleep 600'}[case]
    install = stand_in_build(tmp_path / "cpu1", script)
    name = f"cf-it-{case.replace('_', '-')}"[:32]
    swarm = make(name, install, third=NET[2], n=2)
    built = ""
    try:
        with pytest.raises(NodeFailed) as exc:
            swarm.up(ready_timeout=15)
        built = cfs_image_tag(REPO, swarm.image, install)
        if case == "exits":
            # every node exits; whichever is seen first is reported, with its own log and IDs (node i: CPU i, SC 65+i)
            i = int(re.search(r"node 'sat0(\d)'", str(exc.value)).group(1))
            assert f"core says boom for --cpuid {i} --scid {65 + i} --cpuname sat0{i}" in exc.value.logs
            assert "exited" in str(exc.value)
        else:
            assert "not OPERATIONAL after 15 s" in str(exc.value) and "CORE_STARTUP" in exc.value.logs
        assert labelled(name) == []
    finally:
        swarm.down()
        if built:  # the stand-in's image is this test's own
            subprocess.run(["docker", "image", "rm", built], capture_output=True)
