"""analysis.traffic.write_report on small synthetic flow tables."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from analysis.traffic import per_test_table, per_test_warnings, write_report

NAN = float("nan")
HOST = {"cpus": 2, "kernel": "6.18", "iperf3": "3.12", "memory": {"total_gib": 24}}


def flow_rows(test_id, size, protocol, rate_bps, losses=None, window_s=9.5, ok_count=None):
    n = size * (size - 1)
    rows = []
    for i in range(n):
        loss = losses[i % len(losses)] if losses else NAN
        bps = 1e9 / size if protocol == "tcp" else rate_bps * (1 - loss / 100)
        rows.append({
            "run_id": "r1", "test_id": test_id, "size": size, "protocol": protocol, "rate_bps": rate_bps,
            "repeat": 0, "src": f"n{i}", "dst": "n0", "port": 5201 + i, "spawn_ts": 0.0, "exit_ts": 10.0,
            "ok": ok_count is None or i < ok_count, "error": "", "bits_per_second": bps, "lost_percent": loss,
            "lost_packets": NAN, "packets": NAN, "window_bits_per_second": bps, "window_lost_percent": loss,
            "skew_s": 10.0 - window_s, "window_s": window_s, "duration_s": 10.0,
        })
    return rows


def sweep(tcp=True, udp=True):
    rows = []
    for size in (2, 3, 4):
        if tcp:
            rows += flow_rows(f"tcp-{size}", size, "tcp", NAN, window_s=9.5 if size < 4 else 7.0)
        if udp:
            for rate in (1e6, 1e8):
                losses = [0.0] if rate == 1e6 else [0.0, 1.5, 3.0]
                rows += flow_rows(f"udp-{size}-{rate:g}", size, "udp", rate, losses)
    return pd.DataFrame(rows)


def test_writes_every_file_and_a_self_contained_html(tmp_path):
    tests = pd.DataFrame({"test_id": ["tcp-2", "tcp-3"], "cpu_busy_pct": [40.0, 97.0]})
    paths = write_report(tmp_path, sweep(), HOST, tests=tests)
    expected = {"report_md", "report_html", "fig5", "fig6", "fig7a", "fig7b"} | {
        f"{name}_{ext}" for ext in ("csv", "md")
        for name in ("summary", "tests", "tcp_bandwidth", "udp_largest_lossfree", "udp_loss_max", "udp_loss_median",
                     "udp_lossfree_by_size")
    } | {f"links_{test_id}" for test_id in sweep()["test_id"].unique()}  # per-link matrices (no raw/: no worst-link series)
    assert set(paths) == expected
    for path in paths.values():
        assert path.parent == tmp_path / "report" and path.stat().st_size > 0
    for name in ("fig5", "fig6", "fig7a", "fig7b"):
        assert paths[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    page = paths["report_html"].read_text()
    assert page.count('<img src="data:image/png;base64,') == 4 + sweep()["test_id"].nunique()
    assert not re.search(r"https?://", page)
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)
    assert "cpus" in page and "6.18" in page

    md = paths["report_md"].read_text()
    assert "![Per-connection TCP bandwidth (window)](fig5_tcp_per_connection.png)" in md
    assert "test tcp-3 (tcp n=3, repeat 0): host CPU 97% busy" in md
    assert "test tcp-4 (tcp n=4, repeat 0): concurrent window 7.00 s is under 80% of the 10 s test" in md
    assert "test tcp-2" not in md.split("## Warnings")[1].split("##")[0]


def test_tables_have_hand_computed_values(tmp_path):
    paths = write_report(tmp_path, sweep(), HOST)
    tcp = pd.read_csv(paths["tcp_bandwidth_csv"])
    assert tcp["connections"].tolist() == [2, 6, 12]
    assert tcp["median_gbps"].tolist() == pytest.approx([0.5, 1 / 3, 0.25])
    assert tcp["system_gbps"].tolist() == pytest.approx([1.0, 2.0, 3.0])
    worst = pd.read_csv(paths["udp_loss_max_csv"])
    assert list(worst.columns) == ["nodes", "1Mbps", "100Mbps"]
    assert worst["100Mbps"].tolist() == [1.5, 3.0, 3.0]   # n=2 has only 2 flows: losses 0, 1.5
    lossfree = pd.read_csv(paths["udp_largest_lossfree_csv"], dtype=str, keep_default_na=False)
    assert lossfree.to_dict("list") == {
        "rate": ["1Mbps", "100Mbps"],
        "largest_lossfree_nodes": ["4", ""],
        "note": [">= 4 (largest tested)", "no lossless network"],
    }
    assert "| 4 | 12 | 0.25 | 0.25 | 3 |" in paths["tcp_bandwidth_md"].read_text()


@pytest.mark.parametrize("tcp, udp", [(True, False), (False, True)])
def test_one_protocol_only(tmp_path, tcp, udp):
    paths = write_report(tmp_path, sweep(tcp=tcp, udp=udp), HOST, overlay_reference=False)
    assert ("fig5" in paths) == tcp and ("fig7a" in paths) == udp
    md = paths["report_md"].read_text()
    assert ("TCP bandwidth" in md) == tcp and ("UDP" in md) == udp
    images = 2 + sweep(tcp=tcp, udp=udp)["test_id"].nunique()  # the two figures, one link matrix per test
    assert paths["report_html"].read_text().count('<img src="data:image/png;base64,') == images


def test_per_test_table_and_warnings():
    df = pd.DataFrame(flow_rows("t1", 2, "udp", 1e6, [0.0], window_s=9.0, ok_count=1))
    tests = pd.DataFrame({"run_id": ["r1"], "test_id": ["t1"], "cpu_busy_pct": [95.0]})
    per_test = per_test_table(df, tests)
    assert per_test.loc[0, ["flows", "flows_in_error", "rate", "skew_s", "window_s"]].tolist() == [
        2, 1, "1Mbps", 1.0, 9.0]
    assert per_test_warnings(per_test) == [
        "test t1 (udp n=2 1Mbps, repeat 0): host CPU 95% busy: the host, not the network, may limit "
        "these figures; 1 of 2 flows failed"
    ]


def test_warning_when_senders_could_not_offer_the_load():
    rows = flow_rows("t2", 2, "udp", 10e6, [0.0])
    for row in rows:
        row["sent_bits_per_second"] = 4e6
    per_test = per_test_table(pd.DataFrame(rows))
    assert per_test.loc[0, "offered_fraction"] == 0.4
    assert per_test_warnings(per_test) == [
        "test t2 (udp n=2 10Mbps, repeat 0): senders put only 40% of the offered rate on the wire (median): "
        "the host could not offer the load, so these loss figures do not describe the offered rate"]
