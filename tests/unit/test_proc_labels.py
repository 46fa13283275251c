"""Every process the framework starts for a swarm names the swarm and node in `ps -eo args` (issue 29 #12):
the label rules of flightsw.protocol, run for real (the processes' /proc/<pid>/cmdline), and the argv each
backend builds. The live check over a whole swarm is tests/integration/test_reliability_live.py."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from flightsw import protocol as proto

TAG = proto.label("relu", "sat01")


def cmdline(pid: int) -> list[str]:
    """The process's argv once it has exec'd past any wrapper shell (ps -eo args shows the same, joined)."""
    for _ in range(100):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        if argv and argv[0] not in ("sh", "bash", "/bin/sh"):
            return argv
        time.sleep(0.02)
    return argv


@pytest.mark.parametrize("argv", [
    ["sleep", "5"],                                                  # any program: argv[0] carries the label
    ["sh", "-c", 'cd / && exec "$@"', "wrapper-arg", "sleep", "5"],  # a wrapper: the program it becomes does
    [sys.executable, "-c", "import time; time.sleep(5)"],            # Python: -X label, sys.executable intact
])
def test_a_labelled_process_shows_its_swarm_and_node_in_ps(argv):
    proc = subprocess.Popen(proto.labelled(argv, TAG))
    try:
        shown = " ".join(cmdline(proc.pid))
        assert TAG in shown.split(), shown
        assert Path(f"/proc/{proc.pid}/exe").resolve().name in ("sleep", Path(sys.executable).resolve().name)
    finally:
        proc.kill()
        proc.wait()


def test_unlabelled_argv_does_not_name_the_swarm():
    proc = subprocess.Popen(["sleep", "5"])
    try:
        assert TAG not in " ".join(cmdline(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_python_keeps_its_interpreter_and_gets_the_label_back():
    out = subprocess.run(proto.labelled([sys.executable, "-c", "import sys; from flightsw import protocol as p; "
                                         "print(sys.executable); print(p.own_label())"], TAG),
                         capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.split() == [sys.executable, TAG]


def test_popen_label_without_a_shell():
    args, program = proto.labelled_popen_args(["sleep", "5"], TAG)
    proc = subprocess.Popen(args, executable=program)
    try:
        assert cmdline(proc.pid)[0] == f"sleep {TAG}"
    finally:
        proc.kill()
        proc.wait()


def test_labelling_is_idempotent_and_none_leaves_argv_alone():
    once = proto.labelled(["sleep", "5"], TAG)
    assert proto.labelled(once, TAG) == once
    assert proto.labelled(["sleep", "5"], None) == ["sleep", "5"]


def test_an_image_without_bash_still_runs_the_program(tmp_path):
    """A user's image may lack bash: the program runs, unlabelled, rather than not at all."""
    (tmp_path / "sh").symlink_to("/bin/sh")
    (tmp_path / "true").symlink_to("/bin/true")
    res = subprocess.run(proto.labelled(["true"], TAG), env={"PATH": str(tmp_path)})
    assert res.returncode == 0


def test_backends_label_what_they_start(tmp_path):
    from compose.render import render_compose
    from swarm.caps import Capabilities
    from swarm.runtime.backends.netns.backend import NetnsBackend
    from swarm.runtime.runner import RecordingRunner
    from swarm.spec.model import plan_nodes, spec_from_dict
    spec = spec_from_dict({"name": "relu", "nodes": 2, "networks": {"isl": {"subnet": "10.161.0.0/24"},
                                                                     "ground": {"subnet": "10.162.0.0/24"}}})
    caps = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                        netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True, iperf3_version="",
                        batmand=True, ddsperf=True, htb=True)
    backend = NetnsBackend(RecordingRunner(), caps, tmp_path)
    node = plan_nodes(spec)[0]
    assert TAG in backend.launch_plan(spec, node)["argv"]
    assert TAG in backend.agent_argv("relu", "sat01", "servers")
    doc = render_compose(spec, "img")
    assert TAG in doc["services"]["sat01"]["command"]


LOOP_DOLLAR_ZERO = 'while :; do "$0" "$@"; sleep 0.5; done'  # the link engine's restart loop until 6758a76


@pytest.mark.parametrize("script, head", [
    (LOOP_DOLLAR_ZERO, []),                                   # $0 is the program: its arguments stay put
    ('while :; do "$@"; sleep 0.5; done', ["swarm-linkd"]),  # a loop running "$@" ($0 its name): a wrapper
])
def test_a_shell_loop_still_runs_its_program(script, head):
    """A restart loop `sh -c LOOP [NAME] BINARY ARGS` runs BINARY ARGS after labelling (labelling a "$0" "$@"
    loop's "$@" as a wrapper's made the engine run `BINARY sh -c ...` and restart forever)."""
    proc = subprocess.Popen(proto.labelled(["sh", "-c", script, *head, "/bin/sleep", "30"], TAG), start_new_session=True)
    try:
        child, sleep = None, Path("/bin/sleep").resolve()
        for _ in range(150):  # the loop's child, once it has exec'd past any wrapper shell
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            try:
                if kids and Path(f"/proc/{kids[0]}/exe").resolve() == sleep:
                    child = int(kids[0])
                    break
            except OSError:
                pass
            time.sleep(0.02)
        assert child is not None, "the loop never ran its program"
        shown = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        assert shown[-2:] == [b"30", b""]
        if head:  # the program itself carries the label
            assert shown[0].decode() == f"/bin/sleep {TAG}"
        else:  # the supervising shell does
            assert TAG in " ".join(cmdline(proc.pid)).split()
    finally:
        import os
        import signal
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
