"""cFS nodes, pure parts: spec validation, per-node IDs, Compose rendering, ulimit clamping, image tag,
and the CLI's bad-input lines (exit 2, nothing created)."""
from swarm.runtime.backends import TRAITS
import os
import subprocess
import sys

import pytest

from swarm.cfs.node import CfsRuntime, check_cfs, clamp_ulimits, ci_lab_port, core_command, node_ids
from swarm.runtime.cfs_image import cfs_image_tag
from compose.render import render_compose
from swarm.errors import SpecError
from swarm.spec.model import plan_nodes, spec_from_dict


def fake_install(root):
    """A directory shaped like build/exe/cpu1 (contents are not run by these tests)."""
    (root / "cf").mkdir(parents=True)
    (root / "core-cpu1").write_bytes(b"\x7fELF core")
    (root / "cf" / "cfe_es_startup.scr").write_text("CFE_APP, ci_lab, CI_LAB_AppMain, CI_LAB_APP, 60, 16384, 0x0, 0;\n!\n")
    (root / "cf" / "ci_lab.so").write_bytes(b"\x7fELF app")
    return root


def spec(install, **extra):
    return spec_from_dict({"name": "cfx", "nodes": 4, "defaults": {"cfs": {"install": str(install), **extra}}})


def test_ids_are_base_plus_index_and_ci_lab_port_follows_cpu_id(tmp_path):
    nodes = plan_nodes(spec(tmp_path, cpu_id=10, spacecraft_id=100))
    assert [node_ids(n) for n in nodes] == [(10, 100), (11, 101), (12, 102), (13, 103)]
    assert ci_lab_port(1) == 1234 and ci_lab_port(13) == 1246
    assert core_command(nodes[2]) == ["swarm-cfs-entry", "./core-cpu1", "--cpuid", "12", "--scid", "102",
                                      "--cpuname", "sat03", "--reset", "PO"]


def test_defaults_are_cpu_1_and_the_sample_mission_scid(tmp_path):
    assert [node_ids(n) for n in plan_nodes(spec(tmp_path))][:2] == [(1, 0x42), (2, 0x43)]


def test_relative_install_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert spec("build/exe/cpu1").defaults.cfs.install == str(tmp_path / "build/exe/cpu1")


@pytest.mark.parametrize("cfs, needle", [
    ({"install": ""}, "install ''"),
    ({"install": "/x", "cpu_id": 0}, "cfs.cpu_id"),
    ({"install": "/x", "spacecraft_id": -1}, "cfs.spacecraft_id"),
    ({"install": "/x", "reset": "cold"}, "cfs.reset"),
    ({"install": "/x", "path": "/y"}, "unknown field 'path'"),
])
def test_bad_cfs_fields_name_field_and_value(cfs, needle):
    with pytest.raises(SpecError) as err:
        spec_from_dict({"name": "cfx", "nodes": 2, "defaults": {"cfs": cfs}})
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cfs_excludes_image_and_command():
    with pytest.raises(SpecError, match="cfs and image 'mine:1'"):
        spec_from_dict({"name": "cfx", "nodes": 2, "defaults": {"image": "mine:1", "cfs": {"install": "/x"}}})


def test_ids_must_differ_between_groups_and_fit():
    groups = [{"prefix": "a", "count": 3, "cfs": {"install": "/x", "cpu_id": 5}},
              {"prefix": "b", "count": 2, "cfs": {"install": "/y", "spacecraft_id": 1000}}]  # b01, b02: CPU 4, 5
    with pytest.raises(SpecError, match="node 'b02': cfs.cpu_id 5 is already node 'a01'"):
        spec_from_dict({"name": "cfx", "groups": groups})
    with pytest.raises(SpecError, match="cfs.cpu_id 64302 \\+ index 2 - 1 = 64303 is above 64302"):
        spec_from_dict({"name": "cfx", "nodes": 2, "defaults": {"cfs": {"install": "/x", "cpu_id": 64302}}})


def test_groups_with_disjoint_bases_mix_with_plain_nodes(tmp_path):
    groups = [{"prefix": "cf", "count": 2, "cfs": {"install": str(tmp_path), "spacecraft_id": 7}}, {"prefix": "relay", "count": 1}]
    nodes = plan_nodes(spec_from_dict({"name": "cfx", "groups": groups}))
    assert [n.spec.cfs is not None for n in nodes] == [True, True, False]
    assert node_ids(nodes[1]) == (2, 8)


def test_check_cfs_needs_core_cpu1_and_startup_script_and_compose(tmp_path):
    s = spec(tmp_path / "empty")
    with pytest.raises(SpecError, match=r"node 'sat01': cfs.install '.*/empty': no core-cpu1 in it"):
        check_cfs(s, plan_nodes(s), TRAITS["compose"])
    inst = fake_install(tmp_path / "cpu1")
    (inst / "cf" / "cfe_es_startup.scr").unlink()
    s = spec(inst)
    with pytest.raises(SpecError, match="no cf/cfe_es_startup.scr in it"):
        check_cfs(s, plan_nodes(s), TRAITS["compose"])
    inst = fake_install(tmp_path / "ok")
    s = spec(inst)
    check_cfs(s, plan_nodes(s), TRAITS["compose"])
    with pytest.raises(SpecError, match="cfs runs only on the compose backend .* got backend 'netns'"):
        check_cfs(s, plan_nodes(s), TRAITS["netns"])


def test_compose_service_of_a_cfs_node(tmp_path):
    s = spec(tmp_path, cpu_id=5)
    runtime = CfsRuntime(images={str(tmp_path): "swarm-emu/cfs:abc"}, ulimits={"rtprio": 99, "msgqueue": -1})
    doc = render_compose(s, "swarm-emu/node:x", runtime)
    svc = doc["services"]["sat02"]
    assert svc["image"] == "swarm-emu/cfs:abc"
    assert svc["working_dir"] == "/opt/cfs/cpu1"
    assert svc["command"] == ["swarm-cfs-entry", "./core-cpu1", "--cpuid", "6", "--scid", "67", "--cpuname", "sat02", "--reset", "PO"]
    assert svc["sysctls"]["fs.mqueue.msg_max"] == "256" and svc["sysctls"]["net.ipv4.ip_forward"] == "1"
    assert svc["ulimits"] == {"rtprio": 99, "msgqueue": -1}
    assert svc["environment"]["SWARM_CFS_CPU_ID"] == "6" and svc["environment"]["SWARM_CFS_CI_PORT"] == "1239"
    assert svc["environment"]["SWARM_NODE"] == "sat02"
    assert svc["cap_add"] == ["NET_ADMIN", "NET_RAW", "SYS_NICE"] and "privileged" not in svc
    plain = render_compose(spec_from_dict({"name": "cfx", "nodes": 2}), "swarm-emu/node:x", runtime)["services"]["sat01"]
    assert "ulimits" not in plain and "working_dir" not in plain and "fs.mqueue.msg_max" not in plain["sysctls"]


def test_ulimits_clamped_to_hard_limits_without_cap_sys_resource():
    wanted = {"rtprio": 99, "msgqueue": -1}
    assert clamp_ulimits(wanted, True, {"rtprio": 0, "msgqueue": 819200}) == (wanted, [])
    got, notes = clamp_ulimits(wanted, False, {"rtprio": 0, "msgqueue": 819200})
    assert got == {"msgqueue": 819200} and notes == ["rtprio 99 -> 0", "msgqueue unlimited -> 819200"]
    assert clamp_ulimits(wanted, False, {"rtprio": -1, "msgqueue": -1}) == (wanted, [])
    assert clamp_ulimits(wanted, False, {"rtprio": 50, "msgqueue": -1}) == ({"rtprio": 50, "msgqueue": -1}, ["rtprio 99 -> 50"])


def test_image_tag_follows_install_content_but_not_psp_runtime_files(tmp_path):
    inst = fake_install(tmp_path / "cpu1")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tag = cfs_image_tag(repo, "swarm-emu/node:aaa", inst)
    assert tag.startswith("swarm-emu/cfs:") and len(tag.split(":")[1]) == 12
    assert cfs_image_tag(repo, "swarm-emu/node:aaa", inst) == tag
    (inst / "EEPROM.DAT").write_bytes(b"\0" * 64)  # written by a native run in place
    (inst / ".cdskeyfile").write_bytes(b"")
    assert cfs_image_tag(repo, "swarm-emu/node:aaa", inst) == tag
    assert cfs_image_tag(repo, "swarm-emu/node:bbb", inst) != tag
    (inst / "cf" / "ci_lab.so").write_bytes(b"\x7fELF app v2")
    assert cfs_image_tag(repo, "swarm-emu/node:aaa", inst) != tag


def test_image_tag_follows_dockerfile_and_entry_but_not_the_readme(tmp_path):
    inst = fake_install(tmp_path / "cpu1")
    repo = tmp_path / "repo"
    (repo / "images" / "cfs").mkdir(parents=True)
    for name in ("Dockerfile", "cfs-entry.sh", "README.md"):
        (repo / "images" / "cfs" / name).write_text(name)
    tag = cfs_image_tag(repo, "n", inst)
    (repo / "images" / "cfs" / "README.md").write_text("edited")
    assert cfs_image_tag(repo, "n", inst) == tag
    for name in ("Dockerfile", "cfs-entry.sh"):
        (repo / "images" / "cfs" / name).write_text("edited")
        assert cfs_image_tag(repo, "n", inst) != tag
        tag = cfs_image_tag(repo, "n", inst)


def swarm_cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "SWARM_WORKDIR": str(cwd)}, timeout=60)


@pytest.mark.parametrize("case", ["no_core", "netns", "with_command"])
def test_cli_bad_cfs_input_exit_2_one_line_nothing_created(case, tmp_path):
    inst = tmp_path / "build"
    inst.mkdir()
    cfs = f"{{install: {inst}}}"
    text = {
        "no_core": f"name: cfx\nnodes: 2\nbackend: compose\ndefaults: {{cfs: {cfs}}}\n",
        "netns": f"name: cfx\nnodes: 2\nbackend: netns\ndefaults: {{cfs: {cfs}}}\n",
        "with_command": f"name: cfx\nnodes: 2\ndefaults: {{cfs: {cfs}, command: [sleep, '9']}}\n",
    }[case]
    needle = {"no_core": f"cfs.install '{inst}': no core-cpu1", "netns": "got backend 'netns'",
              "with_command": "cfs and command"}[case]
    (tmp_path / "s.yaml").write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    res = swarm_cli(["up", "s.yaml"], tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_cli_cfs_commands_on_a_swarm_that_is_not_up(tmp_path):
    res = swarm_cli(["cfs", "tlm", "cfx"], tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"error: swarm 'cfx': not up (no state in {tmp_path}/.swarm/cfx); see `swarm list`"], res.stderr
    res = swarm_cli(["cfs", "cmd", "cfx", "sat01", "--mid", "0x1880"], tmp_path)
    assert res.returncode == 2 and "not up" in res.stderr
