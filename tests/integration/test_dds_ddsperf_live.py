"""A small real ddsperf sweep (netns): result rows per receiver as tests finish, a report, resume."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from conftest import require
from experiments.ddsperf.model import experiment_from_dict
from experiments.ddsperf.run import run_ddsperf_sweep
from analysis.ddsperf import write_ddsperf_report
from experiments.store import ResultsStore, host_facts
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture
def need_ddsperf():
    require("ddsperf", shutil.which("ddsperf") is not None, "ddsperf (Debian cyclonedds-tools) not installed")


def test_small_ddsperf_sweep_rows_report_and_resume(tmp_path, need_netns, need_ddsperf):
    exp = experiment_from_dict({
        "type": "ddsperf", "name": "dd-perf", "sizes": [2, 3], "sample_sizes": ["1k"], "rates": ["500Hz"],
        "measures": ["throughput", "latency"], "duration": 3, "settle": 0, "backend": "netns",
        "swarm": {"networks": nets(NET[0])}})
    store = ResultsStore.create(tmp_path, exp, host_facts())
    written = run_ddsperf_sweep(exp, store)
    assert len(written) == 4
    rows = pd.read_csv(store.dir / "ddsperf.csv")
    # one row per receiver: size 2 -> 1, size 3 -> 2, for each measure
    assert rows.groupby("test_id").size().to_dict() == {
        "n002-throughput-1k-500Hz-r1": 1, "n002-latency-1k-500Hz-r1": 1,
        "n003-throughput-1k-500Hz-r1": 2, "n003-latency-1k-500Hz-r1": 2}
    assert rows["ok"].all(), rows[["test_id", "node", "error"]]
    thr = rows[rows["measure"] == "throughput"]
    assert thr["samples_per_s"].between(450, 550).all(), thr  # the offered 500 Hz arrives
    assert (thr["mbps"] > 3.5).all() and (thr["lost_percent"] == 0).all()
    lat = rows[rows["measure"] == "latency"]
    assert (lat["count"] > 500).all() and (lat["p50_us"] > 0).all() and (lat["p50_us"] < 20_000).all()
    assert (store.dir / "raw" / "n003-latency-1k-500Hz-r1" / "sat01.txt").read_text().count("size 1024 mean") >= 4
    paths = write_ddsperf_report(store.dir)
    assert paths["throughput_png"].exists() and paths["latency_png"].exists()
    assert "DDS throughput" in paths["report_md"].read_text()
    assert run_ddsperf_sweep(exp, store) == []  # resume: nothing left to run
