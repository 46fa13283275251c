"""µD3TN (the user's own build, SWARM_UD3TN_INSTALL=<its install prefix>) in swarm nodes, live with real Docker
(compose).

- Four µD3TN nodes over MTCP: bundles cross between the pairs the tests send on (`swarm dtn send/recv`: µD3TN's AAP
  through the user's ud3tn-utils underneath), `swarm dtn` counts them and lists each node's started contacts,
  `swarm dtn config` prints the contacts a node got, and a second `up` reuses the image (its tag is the tree's hash).
- A mixed swarm: a µD3TN ground station and two dtn7 satellites over MTCP, bundles both ways.
- The `dtn` experiment type on µD3TN nodes (all-to-ground): every bundle sent is delivered.
- Bad input: a configuration line of the user's that µD3TN refuses stops `up` with µD3TN's own message, the file
  and the line (exit 1); a program in the tree needing a library the node image lacks is refused by the image's
  ldd check (exit 2); neither leaves a container.
One bring-up per swarm (module-scoped fixtures). Skipped with the reason where SWARM_UD3TN_INSTALL is not set (also
under CI, which has no µD3TN build). Subnets from tests/alloc.py; swarm names u3-it-*.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alloc import nets_yaml, octets
from conftest import swarm_containers, user_build, REPO
from dtn_runs import run_experiment, table

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NET = octets(__file__)  # this file's subnets (tests/alloc.py)
INSTALL = os.environ.get("SWARM_UD3TN_INSTALL", "")
SWARM = [sys.executable, "-m", "swarm"]
ENV = {**os.environ, "SWARM_WORKDIR": str(REPO)}
UD3TN = "{agent: ud3tn, cla: mtcp}"
DTN7 = "{agent: dtn7, cla: mtcp}"


def swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(SWARM + list(args), capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.fixture(scope="module")
def ud3tn_install():
    return user_build("SWARM_UD3TN_INSTALL", "bin/ud3tn",
                      "no µD3TN build: set SWARM_UD3TN_INSTALL to the install prefix of µD3TN built from its sources, "
                      "with bin/ud3tn and its Python packages (docs/DTN.md)")


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ud3tn")


def bring_up(spec_dir: Path, name: str, body: str, octet: int):
    """A swarm `name` up for the module (yields its name and what `up` said), down afterwards, no container left."""
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\n{body}{nets_yaml(octet)}\n")
    swarm("down", name)
    try:
        res = swarm("up", str(spec))
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-2500:]
        yield name, spec
    finally:
        res = swarm("down", name, timeout=180)
        assert res.returncode == 0, res.stderr
        assert not swarm_containers(name)


@pytest.fixture(scope="module")
def four(ud3tn_install, spec_dir):
    yield from bring_up(spec_dir, "u3-it-four", f"nodes: 4\ndefaults:\n  dtn: {UD3TN}\n", NET[0])


@pytest.fixture(scope="module")
def mixed(ud3tn_install, spec_dir):
    body = (f"node_list:\n  - {{name: ground, dtn: {UD3TN}}}\n  - {{name: sat01, dtn: {DTN7}}}\n"
            f"  - {{name: sat02, dtn: {DTN7}}}\n")
    yield from bring_up(spec_dir, "u3-it-mixed", body, NET[1])


def send_recv(name: str, src: str, dst: str, text: str) -> dict:
    sent = swarm("dtn", "send", name, src, dst, text, timeout=120)
    assert sent.returncode == 0, sent.stdout + sent.stderr[-1000:]
    got = swarm("dtn", "recv", name, dst, "--timeout", "30", timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr[-1000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


PAIRS = (("sat01", "sat04"), ("sat04", "sat01"), ("sat02", "sat03"))


@pytest.mark.parametrize("src, dst", PAIRS)
def test_four_ud3tn_nodes_deliver_over_mtcp(four, src, dst):
    name, _ = four
    got = send_recv(name, src, dst, f"ud3tn {src} to {dst}")
    assert got["payload"] == f"ud3tn {src} to {dst}" and got["dst"] == f"dtn://{dst}/in"
    assert got["src"].startswith(f"dtn://{src}/src-"), got


def status_rows(name: str) -> dict:
    status = swarm("dtn", "status", name, "--json")
    assert status.returncode == 0, status.stderr
    return {r["node"]: r for r in json.loads(status.stdout)}


def test_four_ud3tn_status_and_config(four):
    name, spec = four
    before = status_rows(name)
    assert all(r["state"] == "ok" and r["eid"] == f"dtn://{n}/" for n, r in before.items()), before
    assert before["sat01"]["peers"] == ["sat02", "sat03", "sat04"] and before["sat01"]["clas"] == ["mtcp"]
    assert send_recv(name, "sat03", "sat02", "counted")["payload"] == "counted"
    after = status_rows(name)
    assert after["sat02"]["delivered"] == before["sat02"]["delivered"] + 1, (before["sat02"], after["sat02"])
    assert all(after[n]["delivered"] == before[n]["delivered"] for n in ("sat01", "sat03", "sat04"))
    config = swarm("dtn", "config", name, "sat02")
    assert config.returncode == 0, config.stderr
    assert "# /var/lib/swarm-dtn/node.ud3tnrc" in config.stdout
    contacts = [ln for ln in config.stdout.splitlines() if ln.startswith("1(dtn://")]
    assert [c.split(")")[0] for c in contacts] == ["1(dtn://sat01/", "1(dtn://sat03/", "1(dtn://sat04/"]
    again = swarm("up", str(spec))  # already up: the same image, nothing rebuilt
    assert "building DTN image" not in again.stdout + again.stderr


@pytest.mark.parametrize("src, dst", [("ground", "sat01"), ("sat01", "ground"), ("sat02", "ground"),
                                      ("ground", "sat02")])
def test_ud3tn_ground_and_dtn7_satellites_over_mtcp(mixed, src, dst):
    name, _ = mixed
    got = send_recv(name, src, dst, f"mtcp {src} to {dst}")
    assert got["payload"] == f"mtcp {src} to {dst}"
    if src == "ground":  # dtn7 decodes µD3TN's bundle: its source is µD3TN's sending agent
        assert got["src"].startswith("dtn://ground/src-"), got
    else:  # µD3TN hands over the source dtn7 set
        assert got["src"].startswith(f"dtn://{src}/"), got


def test_the_dtn_experiment_runs_on_ud3tn(ud3tn_install, spec_dir):
    name = "u3-it-exp"
    exp = spec_dir / "exp.yaml"
    exp.write_text(f"type: dtn\nname: {name}\nbackend: compose\npattern: all-to-ground\nsizes: [2]\n"
                   "bundle_sizes: [1kB]\nrates: [5]\nclas: [mtcp]\nroutings: [static]\nduration: 4s\ndrain: 15s\n"
                   f"dtn: {{agent: ud3tn}}\nswarm: {{{nets_yaml(NET[2])}}}\n")
    try:
        rows = table(run_experiment(exp, spec_dir / "results") / "tests.csv")
        assert rows and all(int(r["bundles_sent"]) >= 10 for r in rows), rows
        assert all(int(r["bundles_delivered"]) == int(r["bundles_sent"]) for r in rows), rows
    finally:
        swarm("down", name)
        assert not swarm_containers(name)


def test_a_line_ud3tn_refuses_stops_up_and_leaves_nothing(ud3tn_install, spec_dir):
    name = "u3-it-bad"
    user = spec_dir / "mine.ud3tnrc"
    # a contact that ends before it starts: µD3TN's router refuses the command
    user.write_text("# the user's own contacts\n\n1(dtn://moon/):(mtcp:192.0.2.8:4224)::[{+100,+10,500}];\n")
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 2\ndefaults:\n"
                    f"  dtn: {{agent: ud3tn, cla: mtcp, config: {user}}}\n{nets_yaml(NET[3])}\n")
    swarm("down", name)
    res = swarm("up", str(spec))
    lines = [ln for ln in res.stderr.splitlines() if "µD3TN start:" in ln]
    assert res.returncode == 1 and lines, res.stderr[-2000:]
    assert f"{user}: line 3: Router: Command (T = 1) is invalid!" in lines[0], lines
    assert not swarm_containers(name)


def test_a_program_needing_a_library_the_node_image_lacks_is_refused(ud3tn_install, spec_dir):
    """The image's ldd check: a tree whose bin/ holds a program linked against a library that is nowhere in the node
    image is refused with one line naming program and library (exit 2), before any container."""
    if subprocess.run(["sh", "-c", "command -v cc"], capture_output=True).returncode != 0:
        pytest.skip("no C compiler to make the program")
    name = "u3-it-ldd"
    broken = spec_dir / "ud3tn-needs-a-library"
    shutil.copytree(ud3tn_install, broken, symlinks=True)
    lib = spec_dir / "libswarmnowhere.so"
    (spec_dir / "f.c").write_text("int swarm_nowhere(void) { return 0; }\n")
    (spec_dir / "m.c").write_text("int swarm_nowhere(void);\nint main(void) { return swarm_nowhere(); }\n")
    for argv in (["cc", "-shared", "-fPIC", "-o", str(lib), str(spec_dir / "f.c")],
                 ["cc", "-o", str(broken / "bin" / "ud3tn-tool"), str(spec_dir / "m.c"), f"-L{spec_dir}",
                  "-lswarmnowhere"]):
        subprocess.run(argv, check=True, capture_output=True)
    spec = spec_dir / f"{name}.yaml"
    spec.write_text(f"name: {name}\nbackend: compose\nnodes: 2\ndefaults:\n"
                    f"  dtn: {{agent: ud3tn, cla: mtcp, install: {broken}}}\n{nets_yaml(NET[3])}\n")
    swarm("down", name)
    res = swarm("up", str(spec))
    assert res.returncode == 2, res.stderr[-2000:]
    said = [ln for ln in res.stderr.splitlines() if "dtn.install" in ln]
    assert said and "bin/ud3tn-tool needs libswarmnowhere.so, which the node image lacks" in said[0], res.stderr[-2000:]
    assert not swarm_containers(name)
