"""Seed 004's sweep (pure parts): `ltp_segments` x `isl_mtus` in a dtn experiment, the segment-factor table of
the report, and what `swarm dtn` shows of swarm-ltpcla's counters."""
import json

import pandas as pd
import pytest
from rich.console import Console

from analysis.dtn import segment_factors
from experiments.dtn.model import experiment_from_dict
from swarm.cli.dtn import status_table
from swarm.dtn.agents.dtn7.plan import peer_clas
from swarm.dtn.agents.ltp import ltp_summary
from swarm.runtime.dtn import AgentStatus
from swarm.errors import SpecError

BASE = {"type": "dtn", "name": "seg", "backend": "netns", "pattern": "all-to-ground", "sizes": [1], "clas": ["ltp"],
        "profiles": [{"rate": "1Gbit"}],
        "swarm": {"networks": {"isl": {"subnet": "10.150.9.0/24"}, "ground": {"subnet": "10.151.9.0/24"}}}}


def test_sweep_sets_segment_and_isl_mtu_per_test():
    exp = experiment_from_dict({**BASE, "isl_mtus": [1500, 9000], "ltp_segments": [1360, 64000]})
    tests = exp.tests()
    assert [(t.mtu, t.segment) for t in tests] == [(1500, 1360), (1500, 64000), (9000, 1360), (9000, 64000)]
    assert tests[1].test_id.endswith("-mtu1500-seg64000-r1")
    spec = exp.swarm_spec(tests[3])
    assert spec.networks.isl.mtu == 9000 and spec.defaults.dtn.ltp.segment == 64000
    assert spec.networks.isl.subnet == "10.150.9.0/24"  # the rest of the network spec stays


def test_without_sweep_test_ids_and_spec_unchanged():
    exp = experiment_from_dict({**BASE, "dtn": {"ltp": {"segment": 4000}}})
    (test,) = exp.tests()
    assert test.segment is None and test.mtu is None and "seg" not in test.test_id
    assert exp.swarm_spec(test).defaults.dtn.ltp.segment == 4000


@pytest.mark.parametrize("doc, message", [
    ({"ltp_segments": [63]}, "ltp_segments 63: must be 64..65507 bytes"),
    ({"isl_mtus": [9001]}, "isl_mtus 9001: must be 576..9000 bytes"),
    ({"ltp_segments": [1360], "clas": ["tcp"]}, "ltp_segments: sweeps the ltp CLA's segment size"),
])
def test_bad_sweep_refused_naming_field(doc, message):
    with pytest.raises(SpecError) as err:
        experiment_from_dict({**BASE, **doc})
    assert message in str(err.value)


def test_segment_factors_are_ratios_to_the_smallest_per_mtu():
    tests = pd.DataFrame({"cla": ["ltp"] * 4, "isl_mtu": [1500, 1500, 9000, 9000],
                          "ltp_segment": [1360, 64000, 1360, 8900], "goodput_bps": [100e6, 250e6, 120e6, 300e6]})
    f = segment_factors(tests)
    assert list(f["factor"]) == [1.0, 2.5, 1.0, 2.5]
    assert list(f["fragments"]) == [1, 44, 1, 1]  # 64,008 bytes of UDP in 1,480-byte fragments; 8,908 fit 9,000


def test_ltp_summary_and_peer_clas():
    s = ltp_summary({"registered": True, "send_sessions": 3, "recv_sessions": 1, "retransmitted_segments": 7,
                     "cancels": 1, "recv_cancels": 2, "blocks_sent": 9})
    assert s["sessions_open"] == 4 and s["cancels"] == 3 and s["retransmitted_segments"] == 7 and s["registered"]
    assert ltp_summary({}) ["registered"] is False
    peers = json.dumps({"ground": {"cla_list": [["ltp", 1113]]}, "sat02": {"cla_list": [["tcp", 4556], ["ltp", None]]}})
    assert peer_clas(peers) == ["ltp", "tcp"] and peer_clas("not json") == []


def test_status_table_shows_ltp_columns_only_with_ltp():
    ltp = ltp_summary({"registered": True, "send_sessions": 2, "retransmitted_segments": 5, "cancels": 1})
    rows = [AgentStatus("sat01", "dtn://sat01/", "ltp", "epidemic", ["ground"], 0, 0, 1, 0, 0, "ok", ["ltp"], ltp)]
    console = Console(width=160, record=True)
    console.print(status_table("s", rows, 160))
    text = console.export_text()
    assert "ltp sessions" in text and "rtx" in text and "cancels" in text
    line = next(row for row in text.splitlines() if "sat01" in row and "ground" in row)
    assert [c.strip() for c in line.split("│")[-5:-1]] == ["2", "5", "1", "ok"]
    plain = [AgentStatus("sat01", "dtn://sat01/", "tcp", "epidemic", ["ground"], 0, 0, 1, 0, 0, "ok", ["tcp"])]
    console = Console(width=160, record=True)
    console.print(status_table("s", plain, 160))
    assert "ltp sessions" not in console.export_text()


def test_segment_factors_with_ltp_cpu():
    tests = pd.DataFrame({"test_id": ["a", "b"], "cla": ["ltp"] * 2, "isl_mtu": [1500, 1500],
                          "ltp_segment": [1360, 64000], "goodput_bps": [100e6, 120e6]})
    ltp = pd.DataFrame({"test_id": ["a", "a", "b", "b"], "node": ["sat01", "ground"] * 2,
                        "bytes_received": [0, 100e6, 0, 100e6], "cpu_s": [3.0, 1.0, 0.5, 0.5]})
    f = segment_factors(tests, ltp)
    assert list(f["ltp_mbit_per_cpu_s"]) == [200.0, 800.0] and list(f["cpu_factor"]) == [1.0, 4.0]
