"""Pure parts of swarm.observe: what a capture runs and filters, the event log's lines and the view's state."""
from __future__ import annotations

from pathlib import Path

import pytest

from swarm.errors import SpecError
from swarm.observe.capture import check_output, dumpcap_argv, link_ends, node_end
from swarm.spec.model import plan_nodes, spec_from_dict


@pytest.fixture
def nodes():
    return plan_nodes(spec_from_dict({"name": "obs-u", "nodes": 3}))


def test_a_link_is_taken_at_the_senders_egress_and_the_receivers_ingress_with_one_filter(nodes):
    a, b = nodes[0], nodes[1]
    ends = link_ends(a, b)
    assert [e.node for e in ends] == ["sat01", "sat02"]
    assert ends[0].filter == ends[1].filter == f"ether src {a.isl_mac.lower()} and ether dst {b.isl_mac.lower()}"
    assert "egress" in ends[0].label and "ingress" in ends[1].label
    with pytest.raises(SpecError, match="twice"):
        link_ends(a, a)


def test_node_capture_names_the_interface_by_network(nodes):
    assert node_end(nodes[2], "ground").network == "ground"
    with pytest.raises(SpecError, match="eth1"):
        node_end(nodes[2], "eth1")


def test_dumpcap_argv():
    assert dumpcap_argv("eth1", "/x.pcapng") == ["dumpcap", "-i", "eth1", "-w", "/x.pcapng", "-n"]
    argv = dumpcap_argv("eth1", "/x.pcapng", filt="icmp", snaplen=96, duration=2.4, ring=(1024, 4))
    assert argv[6:] == ["-f", "icmp", "-s", "96", "-a", "duration:2", "-b", "filesize:1024", "-b", "files:4"]


def test_an_unwritable_output_is_refused_before_anything_starts(tmp_path):
    check_output(tmp_path / "ok.pcapng")
    assert not (tmp_path / "ok.pcapng").exists()  # probed, not left behind
    for bad, why in ((tmp_path / "no" / "x.pcapng", "no such directory"), (tmp_path, "is a directory")):
        with pytest.raises(SpecError, match=why):
            check_output(bad)



def test_an_existing_output_is_refused_without_force_and_never_opened(tmp_path):
    """`capture -o` (issue 40, item 3): an existing name, a link (to a victim, or dangling) is refused without
    --force and never opened, so no victim changes and no empty file appears at a dangling link's target; a FIFO
    or a device is no capture file, with --force too (a FIFO would hang dumpcap)."""
    import os
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "old.pcapng").write_text("old")
    (tmp_path / "link.pcapng").symlink_to(victim)
    (tmp_path / "dangling.pcapng").symlink_to(tmp_path / "ab")
    for name, why in (("old.pcapng", "already exists; give --force"), ("link.pcapng", r"\(a symbolic link\)"),
                      ("dangling.pcapng", "already exists")):
        with pytest.raises(SpecError, match=why):
            check_output(tmp_path / name)
        check_output(tmp_path / name, force=True)  # replaced at the end, by a rename
    assert victim.read_text() == "precious" and (tmp_path / "old.pcapng").read_text() == "old"
    assert not (tmp_path / "ab").exists()
    os.mkfifo(tmp_path / "fifo")
    reader = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # so that a writer's open would not block
    try:
        for force in (False, True):
            with pytest.raises(SpecError, match="already exists" if not force else "not a regular file"):
                check_output(tmp_path / "fifo", force=force)
        with pytest.raises(SpecError, match="not a regular file"):
            check_output(Path("/dev/null"), force=True)
    finally:
        os.close(reader)


def test_the_capture_replaces_a_link_with_force_and_never_clobbers_without(tmp_path, nodes):
    from swarm.errors import RuntimeFailure
    from swarm.observe.capture import Capture
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out.pcapng"
    out.symlink_to(victim)
    made = tmp_path / "made"
    made.write_text("pcapng")
    Capture(None, [node_end(nodes[0], "isl")], out, force=True)._publish(made)
    assert victim.read_text() == "precious" and not out.is_symlink() and out.read_text() == "pcapng"
    made.write_text("second")
    with pytest.raises(RuntimeFailure, match="appeared during the capture; the capture is in"):
        Capture(None, [node_end(nodes[0], "isl")], out)._publish(made)  # someone took the name meanwhile
    assert out.read_text() == "pcapng"
    assert [p.read_text() for p in tmp_path.glob("out.pcapng.*.pcapng")] == ["second"]


@pytest.mark.parametrize("duration", ["nan", "inf", "-inf", "0.2", "2.5", "0", "-1"])
def test_a_capture_duration_dumpcap_cannot_keep_is_one_line(duration):
    """--duration nan|inf was a traceback and 0.2 silently captured 1 s (issue 40, item 11): dumpcap stops on
    whole seconds."""
    from test_reliability import cli, one_line
    code, _out, err = cli("capture", "obs-nosuch", "--node", "sat01", "-o", "/nonexistent-dir/x.pcapng",
                          "--duration", duration)
    assert code == 2 and "--duration" in one_line(err), err


# ------------------------------------------------------------------------------------------------ events
from netem.spec.links import NONE, Impairment, impairment  # noqa: E402
from swarm.observe.events import (EVENTS_FILE, LogWatch, NodeWatch, emit, follow, format_event,  # noqa: E402
                                  link_changes, link_view)


def test_link_view_and_changes_name_cuts_downs_and_conditions():
    base = {("a", "b"): impairment(loss="10%"), ("b", "a"): NONE.merge(Impairment(up=False)), ("a", "c"): NONE}
    before = link_view(base, set())
    assert before == {("a", "b"): ("up", "loss 10%"), ("b", "a"): ("down", "")}
    after = link_view(base, {("a", "b"), ("b", "a")})
    changes = link_changes(before, after)
    assert [(c["src"], c["dst"], c["state"], c["conditions"]) for c in changes] == [
        ("a", "b", "cut", "loss 10%"), ("b", "a", "cut", "")]
    assert changes[0]["was"] == {"state": "up", "conditions": "loss 10%"}
    healed = link_changes(after, {})
    assert [(c["src"], c["state"]) for c in healed] == [("a", "up"), ("b", "up")]


def test_emit_appends_json_lines_that_follow_reads_back_in_order(tmp_path):
    emit(tmp_path, "fault", kind="cut", args=["a", "b"])
    emit(tmp_path, "link", src="a", dst="b", state="cut", conditions="", cause="fault timeline")
    emit(tmp_path / "gone", "link", src="a")  # no state directory: nothing written, no error
    lines = (tmp_path / EVENTS_FILE).read_text().splitlines()
    assert len(lines) == 2
    got = list(follow(tmp_path, once=True))
    assert [e["type"] for e in got] == ["fault", "link"] and got[0]["t"] <= got[1]["t"]
    assert got[1]["cause"] == "fault timeline" and got[0]["cause"] != "fault timeline"
    assert "a -> b: cut" in format_event(got[1]) and "cut a b" in format_event(got[0])


def test_follow_ends_with_down_when_the_state_directory_goes(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    emit(d, "swarm", state="up", nodes=2)
    stream = follow(d, poll=0.01)
    assert next(stream)["state"] == "up"
    (d / EVENTS_FILE).unlink()
    d.rmdir()
    last = next(stream)
    assert (last["type"], last["state"], last["cause"]) == ("swarm", "down", "observed")


def test_watches_see_engine_restarts_and_node_state_changes(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "sat01.linkd.log").write_text("swarm-linkd: engine exited with status 1; restarting\n")
    watch = LogWatch(tmp_path)
    assert watch() == []  # before it watched
    with open(logs / "sat01.linkd.log", "a") as f:
        f.write("swarm-linkd: engine exited with status 137; restarting\n")
    assert [(e["type"], e["node"]) for e in watch()] == [("engine", "sat01")]
    states = iter([{"sat01": "running"}, {"sat01": "exited"}])
    nodes = NodeWatch(lambda: next(states), every=0)
    assert nodes() == [] and [(e["node"], e["was"], e["state"]) for e in nodes()] == [("sat01", "running", "exited")]


# ------------------------------------------------------------------------------------------------ view
def test_view_refuses_a_port_in_use_in_one_line():
    import socket

    from swarm.observe.view import STATIC, bind

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SpecError, match=f"--port {port}: in use"):
            bind("127.0.0.1", port, state=None)
    assert {p.name for p in STATIC.iterdir()} >= {"view.html", "view.js", "view.css"}  # shipped, no CDN
    assert "http" not in (STATIC / "view.html").read_text().replace("http://www.w3.org", "")


def test_link_comments_say_what_became_of_each_frame():
    from swarm.observe.capture import link_comments

    frames = [(1, 0, 10.0, "a"), (2, 0, 10.1, "b"), (3, 1, 10.105, "a"), (4, 0, 10.2, "c"), (5, 1, 10.21, "c"),
              (6, 1, 10.22, "c"), (7, 1, 10.3, "zz")]
    comments, counts = link_comments(frames, "sat01", "sat02")
    assert counts == {"sent": 3, "arrived": 2, "lost": 1, "duplicated": 1, "unmatched": 1}
    assert "never reached" in comments[2] and "after 105.000 ms" in comments[1] and "egress frame 1" in comments[3]
    assert "duplicate" in comments[6] and "corrupted" in comments[7] and "egress frame 4" in comments[5]
