"""Who may inject bundles (issue 29, defect 13), the planned part: every agent's convergence layer listens on
its node's ISL address only, and the node's firewall keeps dtnd's HTTP port (which dtnd 0.21.0 binds to every
address) to loopback, plus the ISL subnet where `cla: http` peers push bundles. Live: test_dtn_guard_live.py."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from swarm.dtn.plan import guard_rules, plan_agents
from swarm.spec.dtn import DtnSpec

ISL = "10.188.0.0/24"


@pytest.mark.parametrize("cla,port", [("tcp", 4556), ("mtcp", 16162), ("udp", 4556)])
def test_the_convergence_layer_listens_on_the_isl_address_only(cla, port):
    piece = DtnSpec(cla=cla)
    plans = plan_agents([("sat01", "10.188.0.2", piece), ("sat02", "10.188.0.3", piece)], ISL, lambda n: f"/w/{n}")
    for plan, ip in zip(plans, ("10.188.0.2", "10.188.0.3")):
        assert plan.argv[plan.argv.index("-C") + 1] == f"{cla}:port={port}:bind={ip}", plan.argv


@pytest.mark.parametrize("cla", ["tcp", "mtcp", "udp", "http", "ltp"])
def test_the_http_port_answers_loopback_and_only_http_peers_on_the_isl(cla):
    piece = DtnSpec(cla=cla, **({"peers": "static"} if cla == "ltp" else {}))
    rules = guard_rules(piece, ISL)
    lines = [ln.strip() for ln in rules.splitlines()]
    first_web = next(i for i, ln in enumerate(lines) if "dport 3000" in ln)
    assert lines.index('iif "lo" accept') < first_web
    assert ("ip saddr 10.188.0.0/24 tcp dport 3000 accept" in lines) == (cla == "http")
    assert "tcp dport 3000 reject with tcp reset" in lines  # the ground network and IPv6: refused
    if cla != "http":
        proto, port = ("udp", 1113) if cla == "ltp" else ("udp", 4556) if cla == "udp" else \
            ("tcp", 16162 if cla == "mtcp" else 4556)
        accept = lines.index(f"ip saddr 10.188.0.0/24 {proto} dport {port} accept")
        assert any(ln.startswith(f"{proto} dport {port} ") for ln in lines[accept + 1:])


@pytest.mark.skipif(not shutil.which("nft") or subprocess.run(["nft", "-c", "-f", "/dev/null"],
                    capture_output=True).returncode != 0, reason="nft cannot check rules here (not root)")
@pytest.mark.parametrize("cla", ["tcp", "udp", "http"])
def test_the_guard_rules_are_valid_nft(cla):
    res = subprocess.run(["nft", "-c", "-f", "-"], input=guard_rules(DtnSpec(cla=cla), ISL), capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
