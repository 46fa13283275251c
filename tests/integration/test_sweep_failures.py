"""A sweep on nodes that cannot run iperf3 records every flow as an error row and carries on."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.traffic.model import experiment_from_dict
from experiments.store import ResultsStore, host_facts
from experiments.traffic.run import run_sweep
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.docker]


def test_image_without_iperf3_gives_error_rows_and_the_sweep_continues(tmp_path, need_docker):
    # The plain Debian base has neither python3 (the agent) nor iperf3.
    exp = experiment_from_dict({
        "name": "it-noiperf", "sizes": [2, 3], "protocols": ["udp"], "rates": ["1M"], "duration": "1s",
        "settle": 0, "backend": "compose",
        "swarm": {"defaults": {"image": "debian:bookworm-slim", "command": ["sleep", "infinity"]},
                  "networks": nets(NET[0])},
    })
    store = ResultsStore.create(tmp_path, exp, host_facts())
    rows = run_sweep(exp, store)
    assert [(r["test_id"], r["flows"], r["flows_ok"]) for r in rows] == [
        ("n002-udp-1Mbps-r1", 2, 0), ("n003-udp-1Mbps-r1", 6, 0)]
    flows = pd.read_csv(store.dir / "flows.csv")
    assert len(flows) == 8 and not flows["ok"].any()
    assert flows["error"].str.contains("servers on sat0").all(), flows["error"].tolist()
