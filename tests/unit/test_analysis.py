"""analysis.tables on small synthetic flow tables with hand-computed expectations."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.tables import load_reference, offered_fraction, summarize, table_largest_lossfree, table_tcp_bandwidth, table_udp_loss
from swarm.units import parse_rate, rate_label
from swarm.errors import SpecError

NAN = float("nan")


def flows(test_id, size, protocol, rate_bps, repeat, values, losses=None, ok=None, whole=None):
    """Rows for one test: `values` are window bits/s, `losses` window loss %, `whole` whole-test bits/s."""
    rows = []
    for i, bps in enumerate(values):
        rows.append({
            "run_id": "r1", "test_id": test_id, "size": size, "protocol": protocol, "rate_bps": rate_bps,
            "repeat": repeat, "src": f"n{i}", "dst": "n0", "port": 5201 + i,
            "spawn_ts": 100.0 + i, "exit_ts": 111.0 + i,
            "ok": True if ok is None else ok[i], "error": "",
            "bits_per_second": whole[i] if whole else bps,
            "lost_percent": losses[i] if losses else NAN, "lost_packets": NAN, "packets": NAN,
            "window_bits_per_second": bps, "window_lost_percent": losses[i] if losses else NAN,
            "skew_s": 0.5, "window_s": 9.0, "duration_s": 10.0,
        })
    return rows


def table(*groups):
    return pd.DataFrame([row for group in groups for row in group])


@pytest.fixture
def df():
    return table(
        # TCP n=2, two repeats: system 3 Gbps and 5 Gbps -> median 4 Gbps
        flows("t2a", 2, "tcp", NAN, 0, [1e9, 2e9], whole=[0.5e9, 1.5e9]),
        flows("t2b", 2, "tcp", NAN, 1, [2e9, 3e9], whole=[1e9, 1e9]),
        # TCP n=3, one repeat, one failed flow (its figure is not used)
        flows("t3", 3, "tcp", NAN, 0, [1e9, 2e9, 3e9, 4e9, 5e9, 99e9],
              ok=[True] * 5 + [False]),
        # UDP 1 Mbit/s: n=2 loss-free, n=3 losses 0, 1.5, 3.0 (+ three zeros)
        flows("u2", 2, "udp", 1e6, 0, [1e6, 1e6], losses=[0.0, 0.0]),
        flows("u3", 3, "udp", 1e6, 0, [1e6] * 6, losses=[0.0, 1.5, 3.0, 0.0, 0.0, 0.0]),
        # UDP 10 kbit/s: loss-free at n=2 and n=3 (largest tested)
        flows("k2", 2, "udp", 1e4, 0, [1e4, 1e4], losses=[0.0, 0.0]),
        flows("k3", 3, "udp", 1e4, 0, [1e4] * 6, losses=[0.0] * 6),
        # UDP 1 Gbit/s: loss everywhere
        flows("g2", 2, "udp", 1e9, 0, [5e8, 5e8], losses=[50.0, 40.0]),
    )


@pytest.mark.parametrize("text, bps", [
    ("10k", 10_000), ("10kbps", 10_000), ("1M", 1_000_000), ("1Mbps", 1_000_000), ("1G", 10**9),
    ("500k", 500_000), ("2.5M", 2_500_000), ("100", 100), ("10 Gbps", 10**10), ("1m", 1_000_000),
])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["10x", "", "k", "-1M", "1MB"])
def test_parse_rate_rejects(text):
    with pytest.raises(SpecError, match=f"rate '{text}'"):
        parse_rate(text)


@pytest.mark.parametrize("bps, label", [
    (1e4, "10kbps"), (1e5, "100kbps"), (5e5, "500kbps"), (1e6, "1Mbps"), (5e6, "5Mbps"), (5e7, "50Mbps"),
    (1e9, "1Gbps"), (1e10, "10Gbps"), (1.5e6, "1.5Mbps"), (300, "300bps"), (NAN, ""),
])
def test_rate_label(bps, label):
    assert rate_label(bps) == label


def test_labels_round_trip_reference_columns():
    columns = [c for c in load_reference("udp_loss_max").columns if c != "nodes"]
    assert [rate_label(parse_rate(c)) for c in columns] == columns


def test_summarize_udp_loss_statistics(df):
    s = summarize(df).set_index(["protocol", "size", "rate_bps"])
    u3 = s.loc[("udp", 3, 1e6)]
    assert u3["flows"] == 6 and u3["flows_in_error"] == 0
    assert u3["median_loss_pct"] == 0.0   # losses 0,0,0,0,1.5,3.0
    assert u3["max_loss_pct"] == 3.0
    assert u3["rate"] == "1Mbps"


def test_median_of_three_losses():
    s = summarize(table(flows("x", 2, "udp", 1e6, 0, [1e6] * 3, losses=[0.0, 1.5, 3.0])))
    assert s.loc[0, "median_loss_pct"] == 1.5 and s.loc[0, "max_loss_pct"] == 3.0


def test_summarize_tcp_bandwidth(df):
    s = summarize(df).set_index(["protocol", "size"])
    t2 = s.loc[("tcp", 2)]
    assert t2["tests"] == 2 and t2["flows"] == 4
    assert t2["median_bps"] == 2e9          # pooled 1, 2, 2, 3 Gbps
    assert t2["lowest_bps"] == 1e9 and t2["highest_bps"] == 3e9
    assert t2["system_bps"] == 4e9          # per repeat 3 and 5 Gbps
    assert math.isnan(t2["max_loss_pct"])
    t3 = s.loc[("tcp", 3)]
    assert t3["flows"] == 6 and t3["flows_in_error"] == 1 and t3["flows_measured"] == 5
    assert t3["median_bps"] == 3e9 and t3["highest_bps"] == 5e9 and t3["system_bps"] == 15e9


def test_summarize_whole_basis(df):
    s = summarize(df, basis="whole").set_index(["protocol", "size"])
    assert s.loc[("tcp", 2), "system_bps"] == 2e9    # per repeat 2 and 2 Gbps
    assert s.loc[("tcp", 2), "median_bps"] == 1e9    # pooled 0.5, 1, 1, 1.5


def test_summarize_rejects_unknown_basis(df):
    with pytest.raises(SpecError, match="basis 'mean'"):
        summarize(df, basis="mean")


def test_table_tcp_bandwidth_matches_reference_columns(df):
    t = table_tcp_bandwidth(df)
    assert list(t.columns) == list(load_reference("tcp_bandwidth").columns)
    assert t.to_dict("list") == {
        "nodes": [2, 3], "connections": [2, 6],
        "median_gbps": [2.0, 3.0], "lowest_gbps": [1.0, 1.0], "system_gbps": [4.0, 15.0],
    }


def test_table_udp_loss(df):
    worst = table_udp_loss(df, "max")
    assert list(worst.columns) == ["nodes", "10kbps", "1Mbps", "1Gbps"]
    assert worst["nodes"].tolist() == [2, 3]
    assert worst["1Mbps"].tolist() == [0.0, 3.0]
    assert worst["1Gbps"].tolist()[0] == 50.0 and math.isnan(worst["1Gbps"].tolist()[1])
    median = table_udp_loss(df, "median")
    assert median["1Gbps"].tolist()[0] == 45.0
    with pytest.raises(SpecError, match="stat 'mean'"):
        table_udp_loss(df, "mean")


def test_table_largest_lossfree(df):
    t = table_largest_lossfree(df)
    assert list(t.columns) == list(load_reference("udp_largest_lossfree").columns)
    rows = {r.rate: (r.largest_lossfree_nodes, r.note) for r in t.itertuples()}
    assert rows["10kbps"] == (3, ">= 3 (largest tested)")
    assert rows["1Mbps"] == (2, "")
    assert pd.isna(rows["1Gbps"][0]) and rows["1Gbps"][1] == "no lossless network"
    assert t["rate"].tolist() == ["10kbps", "1Mbps", "1Gbps"]


def test_lossfree_ignores_loss_at_smaller_sizes_like_the_thesis():
    t = table_largest_lossfree(table(
        flows("a", 2, "udp", 5e6, 0, [5e6] * 2, losses=[0.0, 0.2]),
        flows("b", 3, "udp", 5e6, 0, [5e6] * 6, losses=[0.0] * 6),
        flows("c", 4, "udp", 5e6, 0, [5e6] * 12, losses=[0.0] * 11 + [0.1]),
    ))
    assert t.loc[0, "largest_lossfree_nodes"] == 3 and t.loc[0, "note"] == ""


def test_failed_flow_is_not_lossfree():
    t = table_largest_lossfree(table(
        flows("a", 2, "udp", 1e6, 0, [1e6] * 2, losses=[0.0, 0.0]),
        flows("b", 3, "udp", 1e6, 0, [1e6] * 6, losses=[0.0] * 6, ok=[True] * 5 + [False]),
    ))
    assert t.loc[0, "largest_lossfree_nodes"] == 2


def test_load_reference():
    tcp = load_reference("tcp_bandwidth")
    assert tcp.loc[tcp["nodes"] == 4, "lowest_gbps"].item() == pytest.approx(12.9940)
    lossfree = load_reference("udp_largest_lossfree.csv")
    assert lossfree.loc[lossfree["rate"] == "10Mbps", "largest_lossfree_nodes"].item() == 15
    assert load_reference("udp_loss_median").shape == (31, 11)
    with pytest.raises(SpecError, match="reference table 'nope'"):
        load_reference("nope")


def test_lossfree_without_any_figure_says_so():
    t = table_largest_lossfree(table(flows("a", 2, "udp", 1e6, 0, [1e6] * 2, losses=[NAN, NAN])))
    assert pd.isna(t.loc[0, "largest_lossfree_nodes"]) and t.loc[0, "note"] == "no loss figures"


def test_size_whose_senders_could_not_offer_the_load_is_not_lossfree():
    small = flows("a", 2, "udp", 10e6, 0, [10e6] * 2, losses=[0.0, 0.0])
    big = flows("b", 3, "udp", 10e6, 0, [2e6] * 6, losses=[0.0] * 6)
    for row in small:
        row["sent_bits_per_second"] = 10e6
    for row in big:  # zero loss, but the host put only a fifth of the offer on the wire
        row["sent_bits_per_second"] = 2e6
    t = table_largest_lossfree(table(small, big))
    assert t.loc[0, "largest_lossfree_nodes"] == 2 and t.loc[0, "note"] == ""
    assert list(offered_fraction(table(small, big))) == [1.0] * 2 + [0.2] * 6
