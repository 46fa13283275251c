"""Who may inject bundles (issue 29, defect 13), live on the netns backend with real dtnd 0.21.0: a local user
of the host reaches every node's ground address, so neither the agent's HTTP port (`/push` takes bundles from
whoever reaches it) nor its convergence layer may answer there; the node's own programs (loopback) and its
peers over the ISL still work, and bundles still flow. Swarm names `rel-guard-*`, subnets from tests/alloc.py."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO, swarm_namespaces
from alloc import octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]


def swarm(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "SWARM_WORKDIR": str(REPO)}, timeout=timeout)


def connects(host: str, port: int, netns: str | None = None) -> bool:
    """A TCP connection to host:port succeeds (from the host, or from inside `netns`)."""
    if netns is None:
        try:
            with socket.create_connection((host, port), timeout=3):
                return True
        except OSError:
            return False
    code = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
            "except OSError:\n    sys.exit(1)\n")
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", code, host, str(port)],
                          capture_output=True, timeout=30).returncode == 0


@pytest.mark.parametrize("cla,sub", [("tcp", NET[0]), ("http", NET[1])])
def test_host_users_reach_no_agent_port_and_bundles_still_flow(need_dtn7, cla, sub, tmp_path):
    name = f"rel-guard-{cla}"
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: {name}\nbackend: netns\nnode_list: [{{name: sat01}}, {{name: sat02}}]\n"
                    f"defaults: {{dtn: {{cla: {cla}, routing: epidemic, peers: static}}}}\n"
                    f"networks: {{isl: {{subnet: 10.{sub}.0.0/25}}, ground: {{subnet: 10.{sub}.0.128/25}}}}\n")
    swarm("down", name)
    try:
        res = swarm("up", str(spec))
        assert res.returncode == 0, res.stderr[-2000:]
        nodes = {r["name"]: r for r in json.loads(swarm("status", name, "--json").stdout)["nodes"]}
        sat01 = nodes["sat01"]
        ns1, ns2 = f"swarm-emu_{name}_sat01", f"swarm-emu_{name}_sat02"
        cla_port = 3000 if cla == "http" else 4556

        # a local user of the host: the ground address answers ping, but no agent port
        assert not connects(sat01["ground_ip"], 3000), "dtnd's HTTP port (/push) answers the host"
        assert not connects(sat01["ground_ip"], 4556), "the TCP convergence layer answers the host"
        # the node's own programs and its peers over the ISL
        assert connects("127.0.0.1", 3000, ns1)
        assert connects(sat01["isl_ip"], cla_port, ns2)
        if cla == "tcp":
            assert not connects(sat01["isl_ip"], 3000, ns2)  # only `cla: http` peers push over HTTP
            listen = subprocess.run(["ip", "netns", "exec", ns1, "ss", "-ltnH", "sport", "= :4556"],
                                    capture_output=True, text=True).stdout.split()
            assert f"{sat01['isl_ip']}:4556" in listen, listen  # bound to the ISL address, not every address

        res = swarm("dtn", "status", name, "--json")  # the host's status queries go through the node
        assert res.returncode == 0, res.stdout + res.stderr
        assert {r["node"]: r["state"] for r in json.loads(res.stdout)} == {"sat01": "ok", "sat02": "ok"}
        res = swarm("dtn", "send", name, "sat01", "sat02", f"guarded {cla}")
        assert res.returncode == 0, res.stderr
        got = swarm("dtn", "recv", name, "sat02", "--timeout", "20", timeout=120)
        assert got.returncode == 0 and f"guarded {cla}" in got.stdout, got.stdout + got.stderr
    finally:
        swarm("down", name)
    assert not swarm_namespaces(name)
