"""Host-wide changes given back, live (issue 40, item 8): a setting two swarms needed stays while one of them is
up and is set back by `down` of the last, which says so, with the real sysctl (net.bridge.bridge-nf-call-iptables
in a scratch network namespace: per namespace, so the host's own is never touched); and `swarm wipe` without
names removes this checkout's swarms only, never another checkout's (a CI run's): real netns swarms under two
workdirs. Swarms `hs-*`; subnets from tests/alloc.py; the ledger in a lock folder of the test's own."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from alloc import nets_yaml, octets
from conftest import REPO

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root]

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from swarm.runtime.host import BRIDGE_NF, claim_settings, read_sysctl
    from swarm.runtime.runner import Runner
    from swarm.runtime.state import down_by_name

    workdir = Path(sys.argv[1])
    Runner().run(["sysctl", "-q", "-w", f"{BRIDGE_NF}=0"])  # this scratch namespace's own setting
    seen = {"before": read_sysctl(BRIDGE_NF)}
    seen["claims"] = [claim_settings(Runner(), name, {BRIDGE_NF: 1}) for name in ("hs-a", "hs-b")]
    seen["raised"] = read_sysctl(BRIDGE_NF)
    seen["down_a"] = down_by_name("hs-a", workdir=workdir)
    seen["after_a"] = read_sysctl(BRIDGE_NF)
    seen["down_b"] = down_by_name("hs-b", workdir=workdir)
    seen["after_b"] = read_sysctl(BRIDGE_NF)
    print(json.dumps(seen))
""")


def test_down_of_the_last_swarm_needing_a_setting_sets_it_back_and_says_so(need_netns, tmp_path):
    import json

    env = {**os.environ, "SWARM_LOCK_DIR": str(tmp_path / "locks"), "PYTHONPATH": str(REPO)}
    res = subprocess.run(["unshare", "--net", "--", sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen["before"] == 0 and seen["claims"] == [{"net.bridge.bridge-nf-call-iptables": 1}, {}]
    assert seen["raised"] == 1 and seen["after_a"] == 1  # hs-b still needs it
    assert not any("host setting" in r for r in seen["down_a"]), seen["down_a"]
    assert seen["after_b"] == 0
    assert "host setting net.bridge.bridge-nf-call-iptables=0 (as before; 1 while needed)" in seen["down_b"]


def swarm(args: list[str], workdir, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "SWARM_WORKDIR": str(workdir)}, timeout=timeout)


def namespaces(name: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"swarm-emu_{name}")]


def test_wipe_without_names_removes_this_checkouts_swarms_only(need_netns, tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for workdir, name, octet in ((mine, "hs-mine", NET[0]), (theirs, "hs-theirs", NET[1])):
        workdir.mkdir()
        (workdir / "s.yaml").write_text(f"name: {name}\nnodes: 2\nbackend: netns\n"
                                        f"defaults: {{command: [sleep, \"600\"]}}\n{nets_yaml(octet)}\n")
    try:
        for workdir in (mine, theirs):
            up = swarm(["up", str(workdir / "s.yaml")], workdir)
            assert up.returncode == 0, up.stderr
        dry = swarm(["wipe", "--dry-run"], mine)
        assert "hs-theirs" in dry.stdout and "not this checkout's" in dry.stdout, dry.stdout
        res = swarm(["wipe", "--yes"], mine)
        assert res.returncode == 0, res.stderr
        said = " ".join(res.stderr.split())  # the console wraps long lines
        assert "hs-mine" in res.stdout and "hs-theirs" in said and "left alone" in said, (res.stdout, res.stderr)
        assert namespaces("hs-mine") == [] and not (mine / ".swarm" / "hs-mine").exists()
        assert len(namespaces("hs-theirs")) >= 2 and (theirs / ".swarm" / "hs-theirs" / "state.json").exists()
        assert swarm(["status", "hs-theirs"], theirs).returncode == 0
    finally:
        swarm(["down", "hs-mine"], mine)
        swarm(["down", "hs-theirs"], theirs)
    assert namespaces("hs-mine") == namespaces("hs-theirs") == []
