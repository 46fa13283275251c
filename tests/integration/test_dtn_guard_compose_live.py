"""Who may inject bundles on compose (issue 40, item 2), live with real Docker and dtnd 0.21.0: the host holds the
ISL bridge's gateway address, so a local user of the host reaches every node's ISL address; neither dtnd's TCP
convergence layer (bundles can be injected) nor its HTTP port may answer there, while the nodes' own traffic
over the ISL still flows. One bring-up per CLA (`tcp`: TCPCL on 4556; `http`: peers push to dtnd's HTTP port
3000) for every assertion. Swarms `rel-cguard-tcp`, `rel-cguard-http`; subnets from tests/alloc.py.

The unprivileged user is `nobody` (setpriv), with the system Python (the checkout's venv need not be readable
to it). "Refused" is ECONNREFUSED: the node's guard answered with a reset, so the probe did reach the node."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from alloc import octets
from conftest import REPO, require, require_dtn7

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]

CLAS = {"tcp": (NET[0], 4556), "http": (NET[1], 3000)}  # cla: (second octet of its subnets, the port peers use)
PROBE = ("import errno, socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
         "    print('connected')\nexcept OSError as e:\n    print(errno.errorcode.get(e.errno, str(e)))\n")


def swarm(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "SWARM_WORKDIR": str(REPO)}, timeout=timeout)


def as_nobody(host: str, port: int) -> str:
    """What a TCP connection from an unprivileged user of the host to host:port gives: 'connected' or the errno."""
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                          PROBE, host, str(port)], capture_output=True, text=True, timeout=30, cwd="/")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.fixture(scope="module", params=sorted(CLAS))
def nodes(request, caps, tmp_path_factory):
    """(cla, swarm name, {node: status row}) of a 2-node compose DTN swarm with that CLA."""
    require("docker", caps.docker and bool(caps.compose), "no Docker daemon or Compose CLI answered")
    require("root", caps.root, "not running as root (setpriv to nobody)")
    require_dtn7()
    spec = tmp_path_factory.mktemp("cguard") / "s.yaml"
    cla, sub = request.param, CLAS[request.param][0]
    name = f"rel-cguard-{cla}"
    spec.write_text(f"name: {name}\nbackend: compose\nnode_list: [{{name: sat01}}, {{name: sat02}}]\n"
                    f"defaults: {{dtn: {{cla: {cla}, routing: epidemic, peers: static}}}}\n"
                    f"networks: {{isl: {{subnet: 10.{sub}.0.0/25}}, ground: {{subnet: 10.{sub}.0.128/25}}}}\n")
    swarm("down", name)
    try:
        res = swarm("up", str(spec), timeout=900)
        assert res.returncode == 0, res.stderr[-2000:]
        yield cla, name, {r["name"]: r for r in json.loads(swarm("status", name, "--json").stdout)["nodes"]}
    finally:
        swarm("down", name)


def test_the_host_holds_the_isl_gateway(nodes):
    """The premise: on compose the host itself has an address on the ISL subnet (the bridge's gateway)."""
    cla, _name, _nodes = nodes
    addrs = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    assert f" 10.{CLAS[cla][0]}.0.1/25 " in addrs, addrs


@pytest.mark.parametrize("port", [4556, 3000])
def test_a_host_user_reaches_no_agent_port_on_the_isl(nodes, port):
    _cla, _name, rows = nodes
    assert as_nobody(rows["sat01"]["isl_ip"], port) == "ECONNREFUSED"
    assert as_nobody(rows["sat02"]["isl_ip"], port) == "ECONNREFUSED"


def test_peers_still_reach_the_convergence_layer_and_bundles_flow(nodes):
    cla, name, rows = nodes
    probe = swarm("exec", name, "sat02", "python3", "-c", PROBE, rows["sat01"]["isl_ip"], str(CLAS[cla][1]))
    assert probe.stdout.strip() == "connected", probe.stdout + probe.stderr
    res = swarm("dtn", "send", name, "sat01", "sat02", f"guarded on compose ({cla})")
    assert res.returncode == 0, res.stderr
    got = swarm("dtn", "recv", name, "sat02", "--timeout", "30", timeout=120)
    assert got.returncode == 0 and f"guarded on compose ({cla})" in got.stdout, got.stdout + got.stderr
