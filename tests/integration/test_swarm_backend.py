"""Backend `swarm` over two real Docker Engines (the main one and a second one in its own network
namespace, tests/hosts/second_engine.py): up, status with hosts, reachability across hosts, exec,
impair and a node fault on the remote host, a mux sweep with clock correction, down; bad input that
must create nothing anywhere; and a host that becomes unreachable before `down`. No mock host.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import interruptible
from hosts.fixtures import second_engine, second_engine_session  # noqa: F401 - fixtures
from hosts.second_engine import SwarmPair
from swarm.errors import RuntimeFailure, SpecError
from swarm.runtime.backends.multihost.backend import SwarmBackend
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.slow, pytest.mark.serial]  # the main Engine's Swarm, the second engine
REPO = Path(__file__).resolve().parents[2]
MAIN_DOCKERD_LOG = Path("/var/log/dockerd.log")  # where this machine's main Engine logs (absent elsewhere: skipped)
GOSSIP_WORDS = ("gossip", "memberlist", "networkdb", "bulk sync", "level=error", "level=warn")


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout


def hosts(eng) -> list[dict]:
    return [{"name": "main", "endpoint": "local", "advertise_addr": eng.host_address},
            {"name": "host2", "endpoint": eng.host, "advertise_addr": eng.address}]


def make(name: str, eng, third: int, n: int = 4, **extra) -> Swarm:
    spec = spec_from_dict({"name": name, "nodes": n, "backend": "swarm", "hosts": extra.pop("hosts", hosts(eng)),
                           "networks": {"isl": {"subnet": f"10.{third}.0.0/24", "mtu": 1400},
                                        "ground": {"subnet": f"10.{third + 1}.0.0/24", "mtu": 1400}}, **extra})
    return Swarm(spec, workdir=REPO)


def main_swarm_state() -> str:
    return sh("docker", "info", "--format", "{{.Swarm.LocalNodeState}}").strip()


def nothing_left(name: str, eng) -> None:
    for docker in (["docker"], ["docker", "-H", eng.host]):
        for kind in (["ps", "-aq"], ["network", "ls", "-q"]):
            assert sh(*docker, *kind, "--filter", f"label=io.swarm-emu.swarm={name}").split() == [], (docker, kind)
    assert not (REPO / ".swarm" / name).exists()


@pytest.fixture
def clean_main(second_engine):  # noqa: F811
    """The main Engine's Swarm state must be what it was before the test (no Swarm here: inactive)."""
    before = main_swarm_state()
    gw_before = "docker_gwbridge" in sh("docker", "network", "ls", "--format", "{{.Name}}").split()
    gw2_before = "docker_gwbridge" in sh("docker", "-H", second_engine.host, "network", "ls", "--format", "{{.Name}}").split()
    logs = {"main": MAIN_DOCKERD_LOG, "host2": second_engine.log}
    offsets = {who: path.stat().st_size if path.exists() else 0 for who, path in logs.items()}
    yield second_engine
    # Shown by pytest only when the test failed: what both engines said about the Swarm's gossip meanwhile.
    for who, path in logs.items():
        if path.exists():
            with path.open(errors="replace") as f:
                f.seek(offsets[who])
                said = [ln.rstrip() for ln in f if any(w in ln.lower() for w in GOSSIP_WORDS)]
            print(f"--- dockerd ({who}, {path}), gossip and errors during the test:", *said[-40:], sep="\n")
    assert main_swarm_state() == before
    assert ("docker_gwbridge" in sh("docker", "network", "ls", "--format", "{{.Name}}").split()) == gw_before
    assert sh("docker", "-H", second_engine.host, "info", "--format", "{{.Swarm.LocalNodeState}}").strip() == "inactive"
    # Neither engine keeps what the Swarm made: a stale ingress network (seen once, leaving mid-setup) or
    # the second engine's docker_gwbridge.
    nets2 = sh("docker", "-H", second_engine.host, "network", "ls", "--format", "{{.Name}}").split()
    assert ("docker_gwbridge" in nets2) == gw2_before
    if before == "inactive":
        assert "ingress" not in sh("docker", "network", "ls", "--format", "{{.Name}}").split()
    assert "ingress" not in nets2


def test_up_sweep_down_across_two_engines(clean_main, tmp_path):
    eng = clean_main
    swarm = make("mh2-it", eng, 243)
    try:
        swarm.up()
        rows = swarm.status()
        assert [(r.name, r.host, r.state, r.health) for r in rows] == [
            ("sat01", "main", "running", "ok"), ("sat02", "main", "running", "ok"),
            ("sat03", "host2", "running", "ok"), ("sat04", "host2", "running", "ok")]
        assert sh("docker", "-H", eng.host, "ps", "--format", "{{.Names}}").split() != []
        matrix = swarm.reachability()
        assert all(all(row.values()) for row in matrix.values())
        link = json.loads(swarm.exec("sat04", ["ip", "-j", "addr", "show"]).stdout)
        isl = next(i for i in link if any(a.get("local") == "10.243.0.5" for a in i["addr_info"]))
        assert isl["address"] == swarm.node("sat04").isl_mac and isl["mtu"] == 1400
        # a cut between hosts, then healed; a fault on the remote host keeps the node's address
        swarm.links.cut("sat01", "sat03")
        assert not swarm.reachability()["sat01"]["sat03"]
        swarm.links.heal()
        swarm.links.node_action("sat03", "restart")
        assert swarm.reachability()["sat01"]["sat03"]
        offsets = swarm.backend.clock_offsets(swarm.name)
        assert set(offsets) == {"main", "host2"} and all(o.uncertainty_s < 0.05 for o in offsets.values())
    finally:
        swarm.down()
    nothing_left("mh2-it", eng)


def test_mux_sweep_over_two_engines_is_clock_corrected(clean_main, tmp_path):
    eng = clean_main
    exp = tmp_path / "exp.yaml"
    exp.write_text(json.dumps({
        "name": "mh2-itmux", "sizes": [4], "protocols": ["udp"], "rates": ["2M"], "duration": "3s", "engine": "mux",
        "swarm": {"backend": "swarm", "hosts": hosts(eng),
                  "networks": {"isl": {"subnet": "10.247.0.0/24"}, "ground": {"subnet": "10.248.0.0/24"}}}}))
    proc = subprocess.run([sys.executable, "-m", "swarm", "sweep", str(exp), "--results", str(tmp_path / "results"),
                           "--no-report"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = next((tmp_path / "results").iterdir())
    (row,) = list(csv.DictReader((run / "tests.csv").open()))
    assert row["flows_ok"] == row["flows"] == "12"
    assert 0 < float(row["clock_uncertainty_s"]) < 0.05
    assert float(row["skew_s"]) <= 0.01 * 3  # within 1 % of the test duration
    facts = json.loads((run / "host.json").read_text())
    assert [h["host"] for h in facts["hosts"]] == ["main", "host2"]
    nothing_left("mh2-itmux-n4", eng)


@pytest.mark.parametrize("case", ["unreachable", "overlap", "capacity", "worker-first"])
def test_bad_input_names_host_and_field_and_creates_nothing(clean_main, case):
    eng = clean_main
    name = f"mh2-bad-{case}"
    if case == "unreachable":
        bad = hosts(eng)
        bad[1]["endpoint"] = "unix:///run/mh2-no-such-engine.sock"
        with pytest.raises(SpecError, match=r"^hosts\[1\] \('host2'\)\.endpoint 'unix:///run/mh2-no-such-engine.sock': unreachable"):
            make(name, eng, 243, hosts=bad).up()
    elif case == "overlap":
        sh("docker", "-H", eng.host, "network", "create", "--subnet", "10.243.0.0/25", "mh2-clash")
        try:
            with pytest.raises(SpecError, match=r"^hosts\[1\] \('host2'\): networks\.isl\.subnet '10\.243\.0\.0/24' "
                                                r"overlaps network 'mh2-clash'"):
                make(name, eng, 243).up()
        finally:
            sh("docker", "-H", eng.host, "network", "rm", "mh2-clash")
    elif case == "capacity":
        capped = hosts(eng)
        capped[1]["capacity"] = 1
        with pytest.raises(SpecError, match=r"hosts\[1\] \('host2'\)\.capacity: 2 nodes pinned to it \(x1\.\.x2\) "
                                            r"exceed its capacity 1"):
            make(name, eng, 243, n=None, node_list=[{"name": "x1", "host": "host2"}, {"name": "x2", "host": "host2"},
                                                      {"name": "x3"}], hosts=capped)
    else:  # the second engine, a worker of the main Engine's Swarm, listed first (as the manager)
        with SwarmPair(eng):
            with pytest.raises(SpecError, match=r"^hosts\[0\] \('host2'\)\.endpoint .*: is a worker in a Swarm"):
                make(name, eng, 243, hosts=list(reversed(hosts(eng)))).up()
            assert main_swarm_state() == "active"  # SwarmPair's, untouched
    nothing_left(name, eng)


def test_down_with_an_unreachable_host_says_what_it_holds_and_can_be_rerun(clean_main):
    eng = clean_main
    swarm = make("mh2-gone", eng, 243)
    away = eng.socket.with_name("docker.sock.away")
    try:
        swarm.up()
        eng.socket.rename(away)  # the engine (and its containers) live on, but nothing reaches it
        assert swarm.status(health=False)[3].state == "host unreachable"
        with pytest.raises(RuntimeFailure) as err:
            swarm.down()
        msg = str(err.value)
        assert "host host2 (" in msg and "unreachable" in msg and "still holds containers sat03..sat04" in msg
        assert (REPO / ".swarm" / "mh2-gone").exists()  # state kept for the rerun
        assert sh("docker", "ps", "-aq", "--filter", "label=io.swarm-emu.swarm=mh2-gone").split() == []
    finally:
        if away.exists():
            away.rename(eng.socket)
    removed = Swarm.attach("mh2-gone", workdir=REPO).down()
    assert any(r.startswith("host2: 2 container(s)") for r in removed)
    nothing_left("mh2-gone", eng)
    assert SwarmBackend  # the registry's class is what Swarm used


def test_a_host_over_tcp_with_tls(clean_main):
    """The second engine addressed as a remote daemon is: tcp://<its address>:2376, client certificates."""
    eng = clean_main
    over_tls = hosts(eng)
    over_tls[1] = {**over_tls[1], "endpoint": eng.tcp_endpoint, "tls": eng.client_tls}
    # Its own subnet: the test before it leaves a Swarm holding 10.243.0.0/24's addresses a moment earlier.
    swarm = make("mh2-tls", eng, 245, n=2, hosts=over_tls)
    try:
        swarm.up()
        assert [(r.host, r.state) for r in swarm.status(health=False)] == [("main", "running"), ("host2", "running")]
        assert swarm.reachability() == {"sat01": {"sat02": True}, "sat02": {"sat01": True}}
        assert swarm.exec("sat02", ["hostname"]).stdout.strip() == "sat02"
    finally:
        swarm.down()
    nothing_left("mh2-tls", eng)


@pytest.mark.parametrize("stage", ["swarm-join", "overlay"])
def test_ctrl_c_during_up_undoes_the_swarm_too(clean_main, tmp_path, stage):
    """Interrupted right after the backend recorded `stage` in hosts.json: the rollback removes what exists
    on both engines and leaves the Docker Swarm as it found it (clean_main checks)."""
    import os
    import signal
    import time

    eng = clean_main
    name = f"mh2-intr-{stage.split('-')[-1]}"
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({"name": name, "nodes": 4, "backend": "swarm", "hosts": hosts(eng),
                                "networks": {"isl": {"subnet": "10.243.0.0/24"}, "ground": {"subnet": "10.244.0.0/24"}}}))
    plan = REPO / ".swarm" / name / "hosts.json"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "up", str(spec)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "SWARM_WORKDIR": str(REPO)},
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(c["what"] == stage for c in json.loads(plan.read_text())["created"]):
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    nothing_left(name, eng)


def test_a_host_over_ssh(clean_main, monkeypatch):
    """The second engine addressed as a remote Docker host most often is: ssh://root@<its address>, Debian's
    sshd in its network namespace and the Docker CLI's own ssh transport, a throw-away key (tests/hosts/ssh_host.py)."""
    from hosts.ssh_host import SshEndpoint

    eng = clean_main
    ssh = SshEndpoint(eng).start()
    for key, value in ssh.env().items():
        monkeypatch.setenv(key, value)
    # over ssh, the endpoint is that engine, not this machine's (whose socket a plain dial-stdio would reach)
    assert sh("docker", "-H", ssh.endpoint, "info", "--format", "{{.Name}}").strip() == eng.hostname
    over_ssh = hosts(eng)
    over_ssh[1] = {**over_ssh[1], "endpoint": ssh.endpoint}
    swarm = make("mh2-ssh", eng, 184, n=2, hosts=over_ssh)
    try:
        swarm.up()
        assert [(r.host, r.state) for r in swarm.status(health=False)] == [("main", "running"), ("host2", "running")]
        assert swarm.reachability() == {"sat01": {"sat02": True}, "sat02": {"sat01": True}}
        assert swarm.exec("sat02", ["hostname"]).stdout.strip() == "sat02"
    finally:
        swarm.down()
    nothing_left("mh2-ssh", eng)
