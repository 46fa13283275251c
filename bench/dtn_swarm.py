"""What the DTN benchmarks share to drive a two-node netns swarm: the `swarm` command, the bring-up of a spec, the
traffic program (flightsw/dtn_traffic.py) started in a node, and its JSON event lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}


def swarm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


def bring_up(name: str, spec: Path) -> bool:
    """Takes down what a crashed earlier run of the bench left, then brings the spec up (its error printed)."""
    swarm("down", name)
    up = swarm("up", str(spec))
    if up.returncode != 0:
        print(up.stderr, file=sys.stderr)
    return up.returncode == 0


def traffic(name: str, node: str, client: str, plan: dict, tmp: Path) -> subprocess.Popen:
    """The traffic program in `node` of swarm `name`, talking to its agent through `client` (dtn7-http, ...)."""
    path = tmp / f"{node}.json"
    path.write_text(json.dumps({"node": node, "client": client, "port": 3000, "service": "in", **plan}))
    return subprocess.Popen(SWARM + ["exec", name, node, sys.executable, str(REPO / "flightsw" / "dtn_traffic.py"),
                                     "run", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)


def events(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
