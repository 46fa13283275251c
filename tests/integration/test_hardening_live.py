"""Live regression tests of the hardening review (issue 11): real Compose CLI, real namespaces."""
import os
import subprocess
import sys

import pytest

from conftest import interruptible
from alloc import nets_yaml, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)


def swarm(args, tmp_path, input=None, **env):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=tmp_path,
                          input=input, env={**os.environ, "SWARM_WORKDIR": str(tmp_path), **env}, timeout=120)


def one_error_line(res):
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


# ---- 3. Compose interpolation
@pytest.mark.docker
@pytest.mark.parametrize("cli", [["docker-compose"], ["docker", "compose"]], ids=["v1", "v2"])
def test_compose_gives_the_node_what_the_spec_says(cli, tmp_path):
    import yaml

    from compose.render import compose_yaml, render_compose
    from swarm.spec.model import spec_from_dict

    if subprocess.run([*cli, "version"], capture_output=True).returncode != 0:
        pytest.skip(f"{' '.join(cli)} is not installed on this host")
    spec = spec_from_dict({"name": "hd-env", "nodes": 2, "defaults": {"env": {"B": "$HOME", "C": "$(id)", "D": "a$$b"}}})
    path = tmp_path / "c.yml"
    path.write_text(compose_yaml(render_compose(spec, "swarm-emu/node:latest")))
    res = subprocess.run([*cli, "-f", str(path), "config"], capture_output=True, text=True, env={"HOME": "/root",
                         "PATH": os.environ["PATH"]})
    assert res.returncode == 0, res.stderr
    env = yaml.safe_load(res.stdout)["services"]["sat01"]["environment"]
    assert (env["B"], env["C"], env["D"]) == ("$$HOME", "$$(id)", "a$$$$b") or (env["B"], env["C"], env["D"]) == ("$HOME", "$(id)", "a$$b")
    assert "/root" not in str(env)



# ---- 5. wipe removed a namespace by its name prefix alone
@pytest.fixture
def foreign_namespace(need_netns):
    """A namespace named like ours that the framework never made (no marker, not recorded)."""
    name = "swarm-emu_hd-foreign"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def netns_list():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.root
def test_down_and_wipe_leave_a_namespace_the_framework_did_not_make(foreign_namespace, tmp_path):
    from swarm.runtime.backends.netns.backend import NetnsBackend
    from swarm.runtime.probe import capabilities
    from swarm.runtime.runner import Runner

    backend = NetnsBackend(Runner(), capabilities(), tmp_path)
    assert foreign_namespace not in backend.owned_namespaces(None)
    assert all(foreign_namespace not in what for _, what in backend.leftovers(None))
    res = swarm(["down", "hd-foreign"], tmp_path)
    assert res.returncode == 0 and "nothing to remove" in res.stdout, (res.stdout, res.stderr)
    dry = swarm(["wipe", "--dry-run"], tmp_path)
    assert dry.returncode == 0 and "dry run: nothing removed" in dry.stdout and foreign_namespace not in dry.stdout
    assert foreign_namespace in netns_list()


@pytest.mark.root
def test_wipe_named_swarm_removes_what_up_marked(need_netns, tmp_path):
    (tmp_path / "s.yaml").write_text("name: hd-wipe\nnodes: 2\nbackend: netns\ndefaults: {command: [sleep, \"600\"]}\n"
                                     f"{nets_yaml(NET[0])}\n")
    up = swarm(["up", "s.yaml"], tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        dry = swarm(["wipe", "hd-wipe", "--dry-run"], tmp_path)
        assert "namespace swarm-emu_hd-wipe_sat01" in dry.stdout and "state" in dry.stdout, dry.stdout
        assert "swarm-emu_hd-wipe_sat01" in netns_list()
        ask = swarm(["wipe"], tmp_path, input="")  # not a terminal, no --yes: refused, names the count
        assert ask.returncode == 2 and "swarm(s)" in one_error_line(ask) and "--yes" in ask.stderr
        res = swarm(["wipe", "hd-wipe"], tmp_path)
        assert res.returncode == 0 and "namespace" in res.stdout, res.stderr
        assert "swarm-emu_hd-wipe" not in netns_list() and not (tmp_path / ".swarm" / "hd-wipe").exists()
    finally:
        swarm(["down", "hd-wipe"], tmp_path)




def leftover_namespaces(name):
    return [line.split()[0] for line in netns_list().splitlines() if line.startswith(f"swarm-emu_{name}")]


@pytest.mark.root
@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_interrupted_up_is_removed_by_down_with_markers(need_netns, tmp_path, sig):
    """Ctrl-C (rollback) or SIGKILL (no rollback: `down` after) during `up` of 10 netns nodes: every namespace,
    the one caught between `ip netns add` and its marker included, is removed; nothing else is."""
    import signal as signals
    import time

    name = "hd-intr"
    swarm(["down", name], tmp_path)
    (tmp_path / "s.yaml").write_text(f"name: {name}\nnodes: 10\nbackend: netns\ndefaults: {{command: [sleep, \"600\"]}}\n"
                                     f"{nets_yaml(NET[0])}\n")
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "up", "s.yaml"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "SWARM_WORKDIR": str(tmp_path)}, preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and len(leftover_namespaces(name)) < 4:
            time.sleep(0.02)
        proc.send_signal(getattr(signals, sig))
        proc.communicate(timeout=180)
        if sig == "SIGKILL":
            assert leftover_namespaces(name), "killed before anything was made: nothing to test"
        res = swarm(["down", name], tmp_path)
        assert res.returncode == 0, res.stderr
        assert leftover_namespaces(name) == [] and not (tmp_path / ".swarm" / name).exists()
    finally:
        swarm(["down", name], tmp_path)
        for ns in leftover_namespaces(name):
            subprocess.run(["ip", "netns", "del", ns], check=False)
