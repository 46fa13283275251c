"""The generated Compose file is valid for every Compose CLI on this host (v1 and v2 where present)."""
import subprocess

import pytest

from compose.render import compose_yaml, render_compose
from swarm.spec.model import spec_from_dict

pytestmark = pytest.mark.docker

SPEC = {"name": "cfg", "groups": [
    {"prefix": "relay", "count": 2, "role": "relay", "resources": {"cpus": 0.5, "memory": "128m"}},
    {"prefix": "obs", "count": 3, "image": "user/obs:1", "command": ["/bin/obs", "--rate", "10"], "env": {"K": "v"}},
]}


@pytest.mark.parametrize("cli", [["docker-compose"], ["docker", "compose"]], ids=["v1", "v2"])
def test_config_accepts_generated_file(cli, tmp_path):
    if subprocess.run([*cli, "version"], capture_output=True).returncode != 0:
        pytest.skip(f"{' '.join(cli)} is not installed on this host")
    path = tmp_path / "cfg.yml"
    path.write_text(compose_yaml(render_compose(spec_from_dict(SPEC), "swarm-emu/node:latest")))
    res = subprocess.run([*cli, "-f", str(path), "config", "-q"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    normalized = subprocess.run([*cli, "-f", str(path), "config"], capture_output=True, text=True).stdout
    assert "cap_add" in normalized and "privileged" not in normalized
