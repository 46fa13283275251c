"""The multiplexing traffic engine (flightsw/trafficd.py) run for real on loopback addresses: two engines,
each sending to the other, over UDP and TCP. No root needed (127.0.0.0/8 is all on `lo`)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.traffic.mux import flow_result

ENGINE = Path(__file__).resolve().parents[2] / "flightsw" / "trafficd.py"
A, B = "127.0.0.21", "127.0.0.22"


def _engines(protocol: str, port: int, rate: int | None, duration: float):
    plans = {
        A: {"protocol": protocol, "bind": A, "port": port, "interval": 0.5,
            "out": [{"id": "a__b", "index": 1, "dst": B, "port": port, "rate_bps": rate}], "in": [{"id": "b__a", "index": 2}]},
        B: {"protocol": protocol, "bind": B, "port": port, "interval": 0.5,
            "out": [{"id": "b__a", "index": 2, "dst": A, "port": port, "rate_bps": rate}], "in": [{"id": "a__b", "index": 1}]},
    }
    procs = {ip: subprocess.Popen([sys.executable, str(ENGINE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True) for ip in plans}
    try:
        for ip, proc in procs.items():
            proc.stdin.write(json.dumps(plans[ip]) + "\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline()) == {"listening": port}
        for proc in procs.values():
            proc.stdin.write("connect\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["errors"] == {}
        release = time.time() + 0.3
        for proc in procs.values():
            proc.stdin.write(f"{release} {duration}\n")
            proc.stdin.close()
        out = {ip: [json.loads(line) for line in proc.stdout] for ip, proc in procs.items()}
        for proc in procs.values():
            assert proc.wait(timeout=10) == 0
    finally:
        for proc in procs.values():
            proc.kill()
    recs = {(r["side"], r["id"]): r for lines in out.values() for r in lines if "side" in r}
    wakes = [r["release_ts"] for lines in out.values() for r in lines if "release_ts" in r]
    assert out[A][-1] == {"done": True} and len(wakes) == 2
    return release, recs, wakes


def test_udp_rate_loss_free_and_common_start():
    rate, duration = 2_000_000, 2.0
    release, recs, wakes = _engines("udp", 45001, rate, duration)
    for fid in ("a__b", "b__a"):
        send, recv = recs["send", fid], recs["recv", fid]
        expected = rate * duration / (1448 * 8)
        assert abs(send["packets"] - expected) <= 3, send["packets"]
        assert recv["packets"] == send["packets"] and recv["out_of_order"] == 0
        assert 0 <= send["first_send_ts"] - release < 0.05
        r = flow_result("udp", send, recv, release, duration, 0.5)
        assert r.ok and r.lost_percent == 0.0 and len(r.intervals) == 4
        assert r.bits_per_second == pytest.approx(rate, rel=0.03)
        assert sum(iv.packets for iv in r.intervals) == send["packets"]
    assert max(wakes) - min(wakes) < 0.05


def test_tcp_flows_carry_data_both_ways():
    release, recs, _ = _engines("tcp", 45002, None, 1.0)
    for fid in ("a__b", "b__a"):
        send, recv = recs["send", fid], recs["recv", fid]
        assert send["error"] == "" and send["bytes"] > 10 * 1024 * 1024
        assert recv["bytes"] == send["bytes"]  # every byte written arrived (the receiver reads to EOF)
        r = flow_result("tcp", send, recv, release, 1.0, 0.5)
        assert r.ok and r.bits_per_second > 50e6


def test_engine_without_release_gives_up_quietly():
    proc = subprocess.Popen([sys.executable, str(ENGINE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps({"protocol": "udp", "bind": A, "port": 45003, "out": [], "in": []}) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline()) == {"listening": 45003}
    proc.stdin.close()  # the host went away before the release: nothing is sent
    assert proc.wait(timeout=5) == 1 and proc.stdout.read() == ""
