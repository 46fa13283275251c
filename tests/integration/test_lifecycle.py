"""Bring-up, reachability, least privilege, failure rollback, Ctrl-C and teardown audit, per backend.

Real Docker, real namespaces: these run here and under CI (where a missing capability fails).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from swarm.runtime.swarm import NodeFailed, Swarm
from swarm.spec.model import spec_from_dict

from conftest import REPO, interruptible
from alloc import nets_yaml, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]
BACKENDS = ["netns", pytest.param("compose", marks=pytest.mark.docker)]


def run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def leftovers(name: str) -> list[str]:
    """Everything carrying this swarm's label, prefix or alias that still exists."""
    found = []
    if run(["docker", "info", "--format", "ok"]).strip() == "ok":
        for kind in (["ps", "-aq"], ["network", "ls", "-q"], ["volume", "ls", "-q"]):
            ids = run(["docker", *kind, "--filter", f"label=io.swarm-emu.swarm={name}"]).split()
            found += [f"docker {kind[0]} {i}" for i in ids]
    found += [f"netns {line.split()[0]}" for line in run(["ip", "netns", "list"]).splitlines()
              if line.startswith(f"swarm-emu_{name}")]
    found += [f"link {link['ifname']}" for link in json.loads(run(["ip", "-j", "link", "show"]) or "[]")
              if link.get("ifalias") == f"swarm-emu:{name}"]
    if (REPO / ".swarm" / name).exists():
        found.append("state dir")
    return found


def make(name: str, backend: str, n: int = 4, third: int = NET[0], **extra) -> Swarm:
    spec = spec_from_dict({"name": name, "networks": {"isl": {"subnet": f"10.{third}.0.0/24"},
                                                      "ground": {"subnet": f"10.{third + 1}.0.0/24"}},
                           **({"nodes": n} if "node_list" not in extra else {}), **extra})
    return Swarm(spec, backend=backend, workdir=REPO)


@pytest.fixture
def backend_ready(request, caps):
    backend = request.param
    request.getfixturevalue("need_netns")
    if backend == "compose":
        request.getfixturevalue("need_docker")
    return backend


@pytest.mark.parametrize("backend_ready", BACKENDS, indirect=True)
def test_four_nodes_all_pairs_then_clean_down(backend_ready):
    name = f"it-{backend_ready}-life"
    swarm = make(name, backend_ready)
    nft_before = run(["nft", "list", "tables"])
    try:
        swarm.up()
        rows = swarm.status()
        assert [(r.state, r.health) for r in rows] == [("running", "ok")] * 4
        matrix = swarm.reachability()
        assert all(all(row.values()) for row in matrix.values()) and sum(len(r) for r in matrix.values()) == 12
        addrs = swarm.exec("sat03", ["ip", "-o", "-4", "addr"]).stdout
        assert f"10.{NET[0]}.0.4/24" in addrs and f"10.{NET[1]}.0.4/24" in addrs
        if backend_ready == "compose":
            for node in ("sat01", "sat04"):
                host = json.loads(run(["docker", "inspect", f"{name}-{node}"]))[0]["HostConfig"]
                assert host["Privileged"] is False
                assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"]) == ["NET_ADMIN", "NET_RAW", "SYS_NICE"]
                assert host["Init"] is True
    finally:
        removed = swarm.down()
    assert removed, "down removed nothing"
    assert leftovers(name) == []
    assert run(["nft", "list", "tables"]) == nft_before
    assert swarm.down() == []


@pytest.mark.parametrize("backend_ready", BACKENDS, indirect=True)
def test_failing_node_shows_logs_and_rolls_back(backend_ready):
    name = f"it-{backend_ready}-fail"
    nodes = [{"name": "good1"}, {"name": "bad", "command": ["sh", "-c", "echo boom-from-bad; exit 3"]}, {"name": "good2"}]
    swarm = make(name, backend_ready, third=NET[2], node_list=nodes)
    with pytest.raises(NodeFailed) as exc:
        swarm.up(ready_timeout=60)
    assert exc.value.node == "bad" and "boom-from-bad" in exc.value.logs
    assert leftovers(name) == []


@pytest.mark.parametrize("backend_ready", BACKENDS, indirect=True)
def test_ctrl_c_during_up_leaves_nothing(backend_ready, tmp_path):
    name = f"it-{backend_ready}-intr"
    subprocess.run([sys.executable, "-m", "swarm", "down", name], cwd=REPO, check=True, capture_output=True)
    assert leftovers(name) == []
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: {name}\nnodes: 12\nbackend: {backend_ready}\n"
                    f"{nets_yaml(NET[4])}\n")
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "up", str(spec)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "SWARM_WORKDIR": str(REPO)},
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # interrupt once something exists
        if any(not x.startswith("state") for x in leftovers(name)):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert leftovers(name) == [], err
