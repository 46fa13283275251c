"""The report never misleads (issue 11): a test without a concurrent window says so in every table it is
missing from, Table 2 tells loss-free, lossy, not measured and could-not-offer apart, units are Mbit/s."""
from __future__ import annotations

import math

import pandas as pd

from analysis.tables import NO_WINDOW, table_largest_lossfree, table_lossfree_by_size
from analysis.traffic import write_report
from experiments.traffic.run import window_note

NAN = math.nan
HOST = {"cpus": 2}


def rows(test_id, size, protocol, rate, loss=0.0, window_s=2.8, sent_fraction=1.0):
    out = []
    for i in range(size * (size - 1)):
        measured = window_s > 0
        bps = 1e9 / size if protocol == "tcp" else rate * (1 - loss / 100)
        out.append({
            "run_id": "r1", "test_id": test_id, "size": size, "protocol": protocol, "rate_bps": rate, "repeat": 1,
            "src": f"sat{i % size + 1:02d}", "dst": f"sat{(i + 1 + i // size) % size + 1:02d}", "port": 5201 + i,
            "spawn_ts": 0.0, "exit_ts": 3.0, "ok": True, "error": "", "bits_per_second": bps,
            "sent_bits_per_second": rate * sent_fraction if protocol == "udp" else NAN,
            "lost_percent": loss if protocol == "udp" else NAN, "lost_packets": NAN, "packets": NAN,
            "window_bits_per_second": bps if measured else NAN,
            "window_lost_percent": (loss if protocol == "udp" else NAN) if measured else NAN,
            "skew_s": 3.0 - window_s if measured else 3.6, "window_s": window_s if measured else 0.0, "duration_s": 3.0,
        })
    return out


def demo_like():
    """make demo on a loaded host: n=4 UDP tests without a concurrent window, n=2 fine."""
    return pd.DataFrame(
        rows("n002-tcp-r1", 2, "tcp", NAN) + rows("n004-tcp-r1", 4, "tcp", NAN)
        + rows("n002-udp-1M-r1", 2, "udp", 1e6) + rows("n004-udp-1M-r1", 4, "udp", 1e6, window_s=0)
        + rows("n002-udp-10M-r1", 2, "udp", 1e7, loss=0.5) + rows("n004-udp-10M-r1", 4, "udp", 1e7, window_s=0))


def test_no_window_is_said_in_every_table_never_a_blank(tmp_path):
    paths = write_report(tmp_path, demo_like(), HOST)
    for name in ("udp_loss_max", "udp_loss_median", "summary", "tests"):
        md = paths[f"{name}_md"].read_text()
        assert NO_WINDOW in md, name
        for line in md.splitlines()[2:]:
            assert "|  |" not in line.replace(" | ", "|  |", 0) and "||" not in line.replace(" ", ""), (name, line)
    lossfree = paths["udp_largest_lossfree_md"].read_text()
    assert "n=4 not measured: no concurrent window" in lossfree
    report = paths["report_md"].read_text()
    assert "no concurrent window (start skew 3.60 s >= the 3 s test)" in report  # in the warnings


def test_table2_tells_the_four_outcomes_apart():
    df = pd.DataFrame(rows("a", 2, "udp", 1e6) + rows("b", 3, "udp", 1e6, loss=1.0) + rows("c", 4, "udp", 1e6, window_s=0)
                      + rows("d", 5, "udp", 1e6, sent_fraction=0.5))
    by_size = table_lossfree_by_size(df)
    row = by_size.iloc[0].to_dict()
    assert row["n=2"] == "loss-free" and row["n=3"].startswith("lossy (max 1%")
    assert row["n=4"] == NO_WINDOW and row["n=5"].startswith("sender could not offer the load (50%")
    assert table_largest_lossfree(df).loc[0, "largest_lossfree_nodes"] == 2


def test_bandwidth_in_mbit_per_s_never_raw_bit_per_s(tmp_path):
    paths = write_report(tmp_path, demo_like(), HOST)
    summary = paths["summary_md"].read_text().splitlines()[0]
    assert "median_mbps" in summary and "_bps" not in summary and "rate_bps" not in summary
    assert "bit/s)" not in paths["report_md"].read_text().replace("Mbit/s)", "").replace("Gbit/s)", "")


def test_per_link_heatmap_for_every_test(tmp_path):
    paths = write_report(tmp_path, demo_like(), HOST)
    for test_id in demo_like()["test_id"].unique():
        assert paths[f"links_{test_id}"].read_bytes()[:4] == b"\x89PNG"


def test_console_says_when_a_test_had_no_window():
    row = {"test_id": "n004-udp-1M-r1", "window_s": 0.0, "skew_s": 3.6}
    note = window_note(row, 3.0)
    assert note.startswith("n004-udp-1M-r1: no concurrent window (start skew 3.6 s >= 3 s duration)")
    assert window_note({"test_id": "x", "window_s": 2.5, "skew_s": 0.5}, 3.0) == ""


def test_a_receiver_that_read_late_is_said_not_hidden():
    """Seen in a compose sweep on a busy host: all 863 datagrams arrived, the sender sent at 0.9997 of 5 Mbit/s,
    but the starved receiver read the last ones 0.18 s late, so iperf3's bits/s (bytes over the receiver's
    seconds) said 0.917. The per-test table gives the lateness and the report warns."""
    from analysis.traffic import per_test_table, per_test_warnings
    df = pd.DataFrame(rows("n002-udp-5M-r1", 2, "udp", 5e6) + rows("n002-udp-1M-r1", 2, "udp", 1e6))
    df["receiver_s"], df["sender_s"] = 3.0, 3.0
    df.loc[1, "receiver_s"] = 3.18
    per_test = per_test_table(df)
    assert list(per_test["receiver_late_max_s"]) == [0.18, 0.0]
    warnings = per_test_warnings(per_test)
    assert len(warnings) == 1 and "n002-udp-5M-r1" in warnings[0] and "0.18 s past its sender" in warnings[0]
    assert per_test_warnings(per_test_table(pd.DataFrame(rows("n002-udp-1M-r1", 2, "udp", 1e6)))) == []
