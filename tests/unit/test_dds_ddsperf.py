"""ddsperf sweep: parsing recorded real ddsperf 0.10.2 output, the experiment spec and the command plan."""
from __future__ import annotations

import math

import pytest

from conftest import REPO
from experiments.ddsperf.model import experiment_from_dict, parse_sample_size
from experiments.ddsperf.parse import parse_ping, parse_sub, participant_name
from experiments.ddsperf.plan import ddsperf_argv, plan_tests
from swarm.units import rate_hz
from swarm.errors import SpecError
from swarm.spec.model import plan_nodes

DATA = REPO / "tests" / "data" / "ddsperf"


def test_parse_sub_at_a_fixed_rate_uses_whole_seconds():
    fig = parse_sub((DATA / "sub-1k-1000Hz.txt").read_text())
    # 5 lines with data; the first and the last are left out (partial seconds): 2.000, 3.000, 4.000
    assert fig["seconds"] == 3
    assert fig["samples_per_s"] == pytest.approx(1000)
    assert fig["mbps"] == pytest.approx((8.20 + 8.19 + 8.18) / 3)
    assert fig["received"] == 1005 + 1001 + 999 + 998 + 1002 and fig["lost"] == 0
    assert fig["lost_percent"] == 0


def test_parse_sub_unlimited_rate():
    fig = parse_sub((DATA / "sub-8k-inf.txt").read_text())
    assert fig["seconds"] == 2
    assert fig["mbps"] == pytest.approx((1982.38 + 2163.97) / 2)
    assert fig["received"] == 22467 + 30236 + 33019 + 33495


def test_parse_sub_without_data():
    fig = parse_sub((DATA / "pong.txt").read_text())
    assert fig["received"] == 0 and math.isnan(fig["mbps"]) and math.isnan(fig["lost_percent"])


def test_parse_ping_per_peer_weighted():
    text = (DATA / "ping-1k-100Hz.txt").read_text()
    peers = parse_ping(text)
    assert list(peers) == ["vm:2957"]
    p = peers["vm:2957"]
    assert p["count"] == 300  # seconds 2..4; the first (discovery) second is left out
    assert p["p50_us"] == pytest.approx((58.396 + 57.235 + 60.985) / 3)
    assert p["max_us"] == 1507.459 and p["min_us"] == 38.151
    assert participant_name((DATA / "pong.txt").read_text()) == "vm:2957"  # how a pong is matched to its row
    assert participant_name(text) == "vm:2958"


def test_sizes_and_rates():
    assert parse_sample_size("1k") == 1024 and parse_sample_size("8KiB") == 8192 and parse_sample_size(64) == 64
    assert parse_sample_size("1MB") == 1_000_000 and parse_sample_size(0) == 0
    with pytest.raises(ValueError, match="at least 12"):
        parse_sample_size(8)
    with pytest.raises(ValueError, match="expected bytes"):
        parse_sample_size("1 GB")
    assert rate_hz("2kHz") == 2000 and rate_hz("100Hz") == 100 and rate_hz("inf") == math.inf


EXP = {"type": "ddsperf", "name": "dp", "sizes": [2, 4], "sample_sizes": ["64", "1k"], "rates": ["1kHz", "inf"],
       "measures": ["throughput", "latency"], "duration": 4, "domain_id": 7,
       "swarm": {"networks": {"isl": {"subnet": "10.156.0.0/24"}, "ground": {"subnet": "10.157.0.0/24"}}}}


def test_plan_tests_size_major():
    tests = plan_tests(experiment_from_dict(EXP))
    assert len(tests) == 2 * 2 * 2 * 2
    assert [t.size for t in tests] == [2] * 8 + [4] * 8
    assert tests[0].test_id == "n002-throughput-64-1kHz-r1"
    assert len({t.test_id for t in tests}) == len(tests)


def test_argv_of_sender_and_receivers():
    exp = experiment_from_dict(EXP)
    tests = {t.test_id: t for t in plan_tests(exp)}
    nodes = plan_nodes(exp.swarm_spec(4))
    pub = ddsperf_argv(exp, tests["n004-throughput-1k-1kHz-r1"], nodes[0], sender=True)
    assert pub[:2] == ["env", "CYCLONEDDS_URI=<CycloneDDS><Domain id=\"any\"><General><Interfaces><NetworkInterface "
                              "address=\"10.156.0.2\"/></Interfaces></General></Domain></CycloneDDS>"]
    assert pub[2:] == ["ddsperf", "-i", "7", "-u", "-D", "4", "-Qminmatch:3", "-Qinitwait:10.8", "pub", "1kHz", "size", "1k"]
    sub = ddsperf_argv(exp, tests["n004-throughput-1k-1kHz-r1"], nodes[2], sender=False)
    assert sub[2:] == ["ddsperf", "-i", "7", "-u", "-D", "24.8", "sub"]
    ping = ddsperf_argv(exp, tests["n004-latency-64-inf-r1"], nodes[0], sender=True)
    assert ping[-3:] == ["ping", "size", "64"] and "-u" not in ping  # inf: ping-pong as fast as answers come
    assert ddsperf_argv(exp, tests["n004-latency-64-1kHz-r1"], nodes[1], sender=False)[-1] == "pong"
    # compose: multicast off, unicast discovery of the test's nodes
    uni = ddsperf_argv(exp, tests["n004-latency-64-1kHz-r1"], nodes[1], False, [n.isl_ip for n in nodes])[1]
    assert "<AllowMulticast>false</AllowMulticast>" in uni and uni.count("<Peer address=") == 4
    assert '<Peer address="10.156.0.5"/>' in uni


@pytest.mark.parametrize("change, message", [
    ({"domain_id": 233}, "domain_id 233: a DDS domain id is an integer 0..232"),
    ({"domain_id": -1}, "domain_id -1"),
    ({"rates": ["fast"]}, "rate 'fast'"),
    ({"sample_sizes": ["4"]}, "sample size '4'"),
    ({"sizes": [1]}, "size 1: a swarm has 2"),
    ({"duration": 1}, "duration"),
    ({"swarm": {"nodes": 3}}, "swarm.nodes: set by the sweep"),
    ({"colour": "red"}, "unknown field 'colour'"),
])
def test_bad_experiments_are_one_line_errors(change, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(".", r"\.")) as exc:
        experiment_from_dict({**EXP, **change}, "dp.yaml")
    assert "\n" not in str(exc.value)


def test_receivers_are_stopped_by_the_pid_they_wrote(tmp_path):
    import subprocess
    import time

    from experiments.ddsperf.plan import remembering_pid, stop_remembered

    pidfile = str(tmp_path / "r.pid")
    proc = subprocess.Popen(remembering_pid(pidfile, ["sleep", "30"]))
    deadline = time.monotonic() + 5
    while not (tmp_path / "r.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert int((tmp_path / "r.pid").read_text()) == proc.pid  # exec'd: the pid is the program's own
    time.sleep(0.1)
    subprocess.run(stop_remembered(pidfile), check=True)
    assert proc.wait(timeout=5) == -15 and not (tmp_path / "r.pid").exists()


def test_shipped_form_of_sizes_and_duration_is_accepted():
    """Issue 29 defect 2: YAML reads `64` as an int and the shipped file says `duration: 5s`; both were refused."""
    exp = experiment_from_dict({"type": "ddsperf", "name": "dp", "sizes": [2], "sample_sizes": [64, "1k"],
                                "duration": "5s", "swarm": {}}, "dp.yaml")
    assert exp.sample_sizes == ["64", "1k"] and exp.duration == 5.0
