"""Who may inject bundles (issue 29, defect 13), the planned part: every agent's convergence layer listens on
its node's ISL address only, and the node's firewall keeps dtnd's HTTP port (which dtnd 0.21.0 binds to every
address) to loopback, plus the ISL subnet where `cla: http` peers push bundles. Live: test_dtn_guard_live.py."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from swarm.dtn.agents.dtn7.plan import guard_rules
from swarm.dtn.plan import plan_agents
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


def verdict(rules: str, saddr: str, proto: str, port: int) -> str:
    """The verdict of the first rule of the guard's chain that a packet from `saddr` to `proto` `port` on the ISL
    interface matches (a reading of the few forms guard_rules writes; an unknown form fails the test)."""
    import ipaddress
    import re
    for line in rules.split("policy accept;\n", 1)[1].splitlines():
        line = line.strip()
        if line in ("}", 'iif "lo" accept'):
            continue
        m = re.fullmatch(r"(?:ip saddr (\S+) )?(tcp|udp) dport (\d+|\{ [\d, ]+ \}) (accept|drop|reject with tcp reset)",
                         line)
        assert m, f"a rule this reading does not know: {line!r}"
        src, p, ports, action = m.groups()
        if (src is None or ipaddress.ip_address(saddr) in ipaddress.ip_network(src)) and p == proto and \
                port in {int(x) for x in re.findall(r"\d+", ports)}:
            return action.split()[0]
    return "accept"


@pytest.mark.parametrize("cla", ["tcp", "mtcp", "udp", "http", "ltp"])
def test_the_isl_gateway_held_by_the_host_on_compose_reaches_no_agent_port(cla):
    """On compose the host holds the ISL bridge's gateway (the subnet's first host): every local user would
    pass as a peer if the guard admitted the whole subnet. Peers still reach the convergence layer."""
    piece = DtnSpec(cla=cla, **({"peers": "static"} if cla == "ltp" else {}))
    rules = guard_rules(piece, ISL)
    proto = "udp" if cla in ("udp", "ltp") else "tcp"
    agent_ports = [("tcp", 3000), (proto, piece.cla_port()), ("udp", 3003)]
    for p, port in agent_ports:
        assert verdict(rules, "10.188.0.1", p, port) != "accept", (p, port)  # the host (compose's gateway)
        assert verdict(rules, "172.17.0.1", p, port) != "accept", (p, port)  # the ground network
    assert verdict(rules, "10.188.0.3", proto, piece.cla_port()) == "accept"  # a peer
    assert verdict(rules, "10.188.0.3", "udp", 3003) == "accept"
    assert verdict(rules, "10.188.0.3", "tcp", 3000) == ("accept" if cla == "http" else "reject")
