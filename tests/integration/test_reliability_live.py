"""Live regression tests of the reliability review (issue 29): races between swarms, one operation per swarm
name at a time, dead engines, killed nodes. Real namespaces and a real Compose CLI; swarm names start `rel`,
subnets in 10.160.0.0/24 .. 10.169.0.0/24."""
import os
import subprocess
import sys
import time

import pytest

from conftest import interruptible


def swarm(args, tmp_path, timeout=180, **env):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "SWARM_WORKDIR": str(tmp_path), **env}, timeout=timeout)


def popen(args, tmp_path):
    return subprocess.Popen([sys.executable, "-m", "swarm", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env={**os.environ, "SWARM_WORKDIR": str(tmp_path)},
                            preexec_fn=interruptible)


def netns_spec(tmp_path, name, isl="10.160.0.0/24", ground="10.161.0.0/24", nodes=2, extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nnodes: {nodes}\nbackend: netns\n"
                    f"networks: {{isl: {{subnet: {isl}}}, ground: {{subnet: {ground}}}}}\n"
                    f"defaults: {{command: [sleep, \"600\"]}}\n{extra}")
    return path


def namespaces(prefix):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


# ---- 3. Two swarms with the same subnets started at the same moment
@pytest.mark.root
def test_two_swarms_with_the_same_subnets_started_at_once_only_one_comes_up(need_netns, tmp_path):
    a, b = netns_spec(tmp_path, "rel-race-a"), netns_spec(tmp_path, "rel-race-b")
    try:
        for trial in range(4):
            procs = [popen(["up", str(a)], tmp_path), popen(["up", str(b)], tmp_path)]
            results = [(p.wait(timeout=180), *p.communicate()) for p in procs]
            codes = sorted(code for code, _, _ in results)
            assert codes == [0, 2], (trial, results)
            loser = next(err for code, _, err in results if code == 2)
            lines = loser.strip().splitlines()
            assert len(lines) == 1 and "overlap" in lines[0], (trial, loser)
            for name in ("rel-race-a", "rel-race-b"):
                swarm(["down", name], tmp_path)
            assert not namespaces("swarm-emu_rel-race"), trial
    finally:
        for name in ("rel-race-a", "rel-race-b"):
            swarm(["down", name], tmp_path)


# ---- 9. netns status after a node's main process is killed while another process lives in its namespace
@pytest.mark.root
def test_netns_status_reports_a_node_whose_main_process_was_killed(need_netns, tmp_path):
    import json
    import signal
    spec = netns_spec(tmp_path, "rel-kill", isl="10.168.0.0/24", ground="10.169.0.0/24")
    res = swarm(["up", str(spec)], tmp_path)
    assert res.returncode == 0, res.stderr
    lodger = None
    try:
        # a second process in sat01's namespace, as a DTN agent is
        lodger = subprocess.Popen(["ip", "netns", "exec", "swarm-emu_rel-kill_sat01", "sleep", "300"])
        pid = json.loads((tmp_path / ".swarm" / "rel-kill" / "pids.json").read_text())["sat01"]
        os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.5)
        res = swarm(["status", "rel-kill", "--json"], tmp_path)
        assert res.returncode == 0, res.stderr
        rows = {r["name"]: r for r in json.loads(res.stdout)["nodes"]}
        assert rows["sat01"]["state"] != "running", rows["sat01"]
        assert rows["sat02"]["state"] == "running", rows["sat02"]
    finally:
        if lodger:
            lodger.kill()
            lodger.wait()
        swarm(["down", "rel-kill"], tmp_path)
