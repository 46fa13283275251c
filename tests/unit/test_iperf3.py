"""experiments.traffic.tools.iperf3.parse against real iperf3 3.12 output (tests/fixtures/iperf3/, see record.sh there) and
synthetic interval data. Expected numbers were read out of the fixture files by hand; re-recording
the fixtures means re-reading them."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments.traffic.tools.iperf3.parse import parse_client_json
from experiments.traffic.tools.result import FlowResult, Interval, concurrent_window, start_skew, window_figures

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "iperf3"


def parse(name: str, spawn_ts: float | None = None) -> FlowResult:
    return parse_client_json((FIXTURES / name).read_text(), spawn_ts=spawn_ts)


# --- real output ------------------------------------------------------------------------------

def test_tcp_receiver_figures_come_from_server_output():
    r = parse("tcp.json")
    assert (r.protocol, r.ok, r.error, r.reverse, r.bidir) == ("tcp", True, "", False, False)
    assert r.timesecs == 1795315214
    assert r.planned_duration == 2
    # server_output_json.end.sum_received (the client's sum_sent says 3103784960 bytes: sender side)
    assert r.bytes == 3102474240
    assert r.bits_per_second == pytest.approx(12365344623.32217)
    assert r.duration == pytest.approx(2.007206)
    assert r.summary_side == "server" and r.interval_side == "server" and r.intervals_from_receiver
    assert [iv.bytes for iv in r.intervals] == [1418592256, 1677983744, 5898240]
    assert r.intervals[1] == Interval(1.000295, 2.000111, 1677983744, 13426340392.4349)
    assert sum(iv.bytes for iv in r.intervals) == r.bytes
    assert math.isnan(r.lost_percent) and r.packets is None


def test_udp_figures_and_receiver_intervals():
    r = parse("udp.json")
    assert (r.protocol, r.ok) == ("udp", True)
    assert r.bytes == 2523136
    assert r.bits_per_second == pytest.approx(10089764.26994363)
    assert (r.packets, r.lost_packets, r.lost_percent) == (77, 0, 0.0)
    assert r.jitter_ms == pytest.approx(0.029053513576454856)
    assert r.interval_side == "server"
    assert [(iv.packets, iv.lost_packets) for iv in r.intervals] == [(39, 0), (38, 0)]
    assert r.sent_seconds == pytest.approx(r.duration, abs=0.1)  # the client's sum_sent seconds


def test_udp_real_loss_on_loopback():
    r = parse("udp_loss.json")
    assert r.ok
    assert (r.packets, r.lost_packets) == (38137, 7446)
    assert r.lost_percent == pytest.approx(19.52434643522039)
    # receiver bytes, not the 1249673216 bytes the client sent
    assert r.bytes == 1005682688
    assert [(iv.lost_packets, iv.packets) for iv in r.intervals] == [(3239, 19063), (4207, 19073), (0, 1)]


def test_tcp_reverse_client_is_receiver():
    r = parse("tcp_reverse.json")
    assert r.ok and r.reverse and not r.bidir
    assert r.summary_side == "client" and r.interval_side == "client" and r.intervals_from_receiver
    assert r.bytes == 3618897920  # client's sum_received; the server sent 3624140800
    assert r.bits_per_second == pytest.approx(14471004371.6142)
    assert [iv.bytes for iv in r.intervals] == [1856372736, 1762525184]


def test_udp_reverse_loss_from_client():
    r = parse("udp_reverse.json")
    assert r.ok and r.reverse and r.interval_side == "client"
    assert (r.packets, r.lost_packets, r.lost_percent) == (77, 0, 0.0)
    assert [(iv.packets, iv.lost_packets) for iv in r.intervals] == [(39, 0), (38, 0)]


def test_tcp_bidir_both_directions():
    r = parse("tcp_bidir.json")
    assert r.ok and r.bidir and not r.reverse
    assert r.bytes == 2701131776 and r.interval_side == "server"
    assert [iv.bytes for iv in r.intervals] == [1460862923, 1239613493, 655360]
    back = r.bidir_reverse
    assert back is not None and back.ok and back.reverse and back.bidir
    assert back.bytes == 1486749696  # client's sum_received_bidir_reverse
    assert back.bits_per_second == pytest.approx(5939639570.572062)
    assert back.interval_side == "client" and back.intervals_from_receiver
    assert [iv.bytes for iv in back.intervals] == [594411520, 892338176]


def test_udp_bidir_reverse_direction_has_loss_counts():
    r = parse("udp_bidir.json")
    assert r.ok and r.bidir
    assert (r.packets, r.lost_packets) == (77, 0)
    back = r.bidir_reverse
    assert (back.packets, back.lost_packets, back.lost_percent) == (77, 0, 0.0)
    assert back.jitter_ms == pytest.approx(0.26229318657733813)
    assert [(iv.packets, iv.lost_packets) for iv in back.intervals] == [(39, 0), (38, 0)]


def test_plain_server_falls_back_to_client_report():
    r = parse("udp_server_text.json")  # server without -J: only server_output_text
    assert r.ok
    assert r.summary_side == "client"  # client's sum_received carries the receiver's counts
    assert (r.bytes, r.packets, r.lost_packets) == (2523136, 77, 0)
    assert r.interval_side == "client" and not r.intervals_from_receiver
    assert [(iv.packets, iv.lost_packets) for iv in r.intervals] == [(39, None), (38, None)]


def test_connection_refused():
    r = parse("error_refused.json")
    assert not r.ok
    assert r.error == "unable to connect to server: Connection refused"
    assert r.intervals == [] and r.bytes is None


def test_server_killed_mid_test():
    r = parse("interrupted.json")
    assert not r.ok and r.error == "the server has terminated"
    assert r.protocol == "tcp"
    # iperf3 printed the first interval twice; it is kept once
    assert [(iv.start, iv.end) for iv in r.intervals] == [(0.0, 1.000069)]


@pytest.mark.parametrize("name", ["truncated.json", "killed_client.json"])
def test_broken_output_is_an_error_not_an_exception(name):
    r = parse(name, spawn_ts=5.0)
    assert not r.ok and r.error.startswith("invalid JSON: ")
    assert r.spawn_ts == 5.0


def test_non_object_json():
    assert parse_client_json("[1, 2]").error == "invalid JSON: top level is not an object"


def test_json_missing_fields():
    r = parse_client_json('{"start": {"test_start": {"protocol": "TCP"}}, "intervals": [{"sum": {"start": 0}}]}')
    assert not r.ok and r.error == "unexpected iperf3 JSON: KeyError: 'end'"


def test_as_row_has_scalars_only():
    row = parse("udp.json", spawn_ts=1.5).as_row()
    assert row["spawn_ts"] == 1.5 and row["lost_packets"] == 0
    assert "intervals" not in row and "bidir_reverse" not in row


def test_window_on_real_udp_loss_fixture():
    spawn = 1795315229.5  # later than timesecs, so the origin is spawn_ts
    r = parse("udp_loss.json", spawn_ts=spawn)
    assert r.origin == spawn
    t0, t1 = concurrent_window([r])
    assert (t0, t1) == (pytest.approx(spawn), pytest.approx(spawn + 2.000585))
    figures = window_figures(r, spawn, spawn + 2.000232)  # ends where the 0.35 ms tail interval starts
    assert figures["intervals"] == 2
    assert figures["lost_percent"] == pytest.approx(100 * (3239 + 4207) / (19063 + 19073))
    assert figures["bits_per_second"] == pytest.approx(8 * (518520832 + 487129088) / 2.000232)


# --- synthetic intervals ------------------------------------------------------------------------

def flow(spawn_ts, byte_counts, lost=None, packets=None, timesecs=None, ok=True) -> FlowResult:
    """A UDP flow with 1 s intervals starting at 0."""
    intervals = [
        Interval(float(i), float(i + 1), b, 8.0 * b,
                 packets[i] if packets else None, lost[i] if lost else None)
        for i, b in enumerate(byte_counts)
    ]
    return FlowResult(protocol="udp", ok=ok, spawn_ts=spawn_ts, timesecs=timesecs, intervals=intervals,
                      interval_side="server")


def test_start_skew():
    assert start_skew([3.0, 1.0, 2.5]) == 2.0
    assert start_skew([1.0, float("nan"), None, 4.0]) == 3.0
    assert start_skew([5.0]) == 0.0 and start_skew([]) == 0.0


def test_concurrent_window_and_window_figures():
    a = flow(100.0, [1000, 2000, 3000, 4000], lost=[0, 10, 20, 30], packets=[100] * 4)  # 100..104
    b = flow(101.5, [500] * 4, lost=[5, 5, 0, 0], packets=[50] * 4)                   # 101.5..105.5
    t0, t1 = concurrent_window([a, b])
    assert (t0, t1) == (101.5, 104.0)
    # a: half of [101,102], all of [102,103] and [103,104]: 2.5 s
    fa = window_figures(a, t0, t1)
    assert fa["intervals"] == 3 and fa["seconds"] == 2.5
    assert fa["bits_per_second"] == 8 * (0.5 * 2000 + 3000 + 4000) / 2.5
    assert (fa["lost_packets"], fa["packets"]) == (0.5 * 10 + 20 + 30, 250)
    assert fa["lost_percent"] == pytest.approx(100 * 55 / 250)
    # b: all of [101.5,102.5] and [102.5,103.5], half of [103.5,104.5]
    fb = window_figures(b, t0, t1)
    assert fb["seconds"] == 2.5 and fb["bits_per_second"] == 8 * 1250 / 2.5
    assert fb["lost_percent"] == pytest.approx(100 * 10 / 125)


def test_failed_flows_do_not_shrink_the_window():
    a = flow(100.0, [1] * 4)
    failed = flow(103.0, [1], ok=False)
    assert concurrent_window([a, failed]) == (100.0, 104.0)
    assert math.isnan(concurrent_window([failed])[0])


def test_disjoint_flows_give_an_empty_window():
    a = flow(100.0, [1000] * 4)   # 100..104
    c = flow(110.0, [1000] * 4)   # 110..114
    t0, t1 = concurrent_window([a, c])
    assert (t0, t1) == (110.0, 110.0)
    figures = window_figures(a, t0, t1)
    assert figures["intervals"] == 0
    assert math.isnan(figures["bits_per_second"]) and math.isnan(figures["lost_percent"])


def test_origin_uses_connect_second_when_later_than_spawn():
    assert flow(100.9, [1], timesecs=101).origin == 101.0   # connected in the next second
    assert flow(100.2, [1], timesecs=100).origin == 100.2
    assert math.isnan(flow(None, [1]).origin)


def test_sender_side_intervals_give_no_window_loss():
    r = flow(0.0, [1000, 1000], packets=[10, 10])  # UDP sender intervals: packets, no loss counts
    figures = window_figures(r, 0.0, 2.0)
    assert figures["bits_per_second"] == 8000.0
    assert math.isnan(figures["lost_percent"])


@pytest.mark.parametrize("name,sent_mbps", [("udp.json", 10.092), ("udp_loss.json", 4998.465),
                                            ("udp_reverse.json", 10.091), ("tcp.json", 12404.689)])
def test_sender_rate_is_kept_beside_the_receivers(name, sent_mbps):
    r = parse_client_json((FIXTURES / name).read_text())
    assert r.sent_bits_per_second / 1e6 == pytest.approx(sent_mbps, abs=0.001)
