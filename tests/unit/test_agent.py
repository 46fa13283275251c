"""flightsw/agent.py, the in-node agent, run as the nodes run it (a standard-library script, its own process) on
this host: the host-side protocol of `clients` (parked -> release instant -> one line per flow), `cleanup`
killing only what the agent started, `run` ending on SIGTERM. iperf3 is replaced by short Python programs:
the agent starts whatever argv a flow names."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flightsw import agent as flightsw_agent

AGENT = Path(__file__).resolve().parents[2] / "flightsw" / "agent.py"


def agent(*args: str, run_dir: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "SWARM_RUN_DIR": str(run_dir), "SWARM_NODE": "sat01", "SWARM_INDEX": "1"}
    env.pop("SWARM_APPS", None)
    return subprocess.Popen([sys.executable, str(AGENT), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kwargs)


def load_agent():
    return flightsw_agent


def gone(pid: int, within: float = 5.0) -> bool:
    """The process ended (or is a zombie waiting for its reaper)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_clients_park_then_release_at_the_instant_and_report_every_flow(tmp_path):
    flows = [{"id": "a", "argv": [sys.executable, "-c", "print('{\"ok\": 1}')"]},
             {"id": "b", "argv": [sys.executable, "-c", "import sys; sys.exit(3)"]}]
    proc = agent("clients", run_dir=tmp_path)
    proc.stdin.write(json.dumps(flows) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline()) == {"parked": 2}
    release = time.time() + 0.3
    proc.stdin.write(f"{release}\n")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=30)
    lines = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0
    assert release <= lines[0]["release_ts"] < release + 1.0
    by_id = {rec["id"]: rec for rec in lines[1:]}
    assert set(by_id) == {"a", "b"}
    assert (by_id["a"]["returncode"], by_id["a"]["output"].strip()) == (0, '{"ok": 1}')
    assert by_id["b"]["returncode"] == 3
    assert all(rec["release_ts"] == lines[0]["release_ts"] <= rec["exit_ts"] for rec in by_id.values())
    assert len((tmp_path / "iperf3.pids").read_text().split()) == 2  # remembered for `cleanup`


def test_clients_release_nobody_when_the_host_goes_away(tmp_path):
    proc = agent("clients", run_dir=tmp_path)
    proc.stdin.write(json.dumps([{"id": "a", "argv": ["sleep", "30"]}]) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline()) == {"parked": 1}
    proc.stdin.close()  # no release instant: the host's end went away
    assert proc.wait(timeout=30) == 1
    pid = int((tmp_path / "iperf3.pids").read_text().split()[0])
    assert gone(pid)


def test_cleanup_kills_only_what_the_agent_started_and_continues_stopped_servers(tmp_path):
    stranger = subprocess.Popen(["sleep", "30"])  # a pid in the file, but not an iperf3 the agent started
    stopped = subprocess.Popen(["sleep", "30"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        (tmp_path / "iperf3.pids").write_text(f"{stranger.pid}\n")
        (tmp_path / "servers.stopped").write_text(f"{stopped.pid}\n")
        proc = agent("cleanup", run_dir=tmp_path)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and json.loads(out) == {"killed": 0}
        assert stranger.poll() is None  # still running: not ours
        assert Path(f"/proc/{stopped.pid}/stat").read_text().split(")")[1].split()[0] != "T"  # continued
        assert not (tmp_path / "iperf3.pids").exists() and not (tmp_path / "servers.stopped").exists()
    finally:
        for p in (stranger, stopped):
            p.kill()
            p.wait()


def test_run_is_the_nodes_main_process_until_sigterm(tmp_path):
    proc = agent("run", run_dir=tmp_path)
    assert "node sat01 (index 1)" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopping" in out


def test_listening_ports_and_run_dir(tmp_path, monkeypatch):
    mod = load_agent()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert s.getsockname()[1] in mod.listening_tcp_ports()
    monkeypatch.setenv("SWARM_RUN_DIR", str(tmp_path / "run"))
    assert mod.run_dir() == tmp_path / "run" and (tmp_path / "run").is_dir()


def test_unknown_subcommand_is_refused(tmp_path):
    proc = agent("nope", run_dir=tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "invalid choice" in err


@pytest.mark.parametrize("name", ["iperf3.pids", "mux.pids"])
def test_is_ours_refuses_a_pid_of_another_program(name):
    assert load_agent()._is_ours(os.getpid(), name) is False  # this pytest is neither iperf3 nor `agent.py mux`
