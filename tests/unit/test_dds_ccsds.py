"""CCSDS commands and telemetry of the reference app (flightsw/ground_link.py) through the spacepackets library."""
from __future__ import annotations

import pytest
from spacepackets.ccsds.spacepacket import PacketType, SpacePacketHeader

from flightsw import ground_link as gl


def test_command_round_trip_and_cfs_framing():
    raw = gl.command_packet(gl.CC_SET_RATE, gl.set_rate_payload(2.5), seq=7)
    header = SpacePacketHeader.unpack(raw)
    assert header.packet_type == PacketType.TC and header.sec_header_flag and header.apid == gl.APP_APID
    assert header.seq_count == 7 and header.data_len == len(raw) - 7
    assert int.from_bytes(raw[:2], "big") == gl.CMD_MID == 0x18F0  # cFS message id in the first two bytes
    x = 0
    for b in raw:
        x ^= b
    assert x == 0xFF  # cFS command checksum: all bytes XOR to 0xFF
    cmd = gl.parse_command(raw)
    assert (cmd.apid, cmd.seq, cmd.function_code) == (gl.APP_APID, 7, gl.CC_SET_RATE)
    assert int.from_bytes(cmd.payload, "big") == 2500


def test_noop_without_payload():
    raw = gl.command_packet(gl.CC_NOOP)
    assert len(raw) == 8
    assert gl.parse_command(raw).payload == b""


def test_corrupt_or_foreign_commands_are_rejected():
    raw = bytearray(gl.command_packet(gl.CC_NOOP))
    raw[6] ^= 0x01
    with pytest.raises(gl.PacketError, match="checksum"):
        gl.parse_command(bytes(raw))
    with pytest.raises(gl.PacketError, match="truncated"):
        gl.parse_command(gl.command_packet(gl.CC_SET_RATE, b"\0\0\0\1")[:9])
    with pytest.raises(gl.PacketError):
        gl.parse_command(b"\x18")
    with pytest.raises(gl.PacketError, match="not a command"):
        gl.parse_command(gl.telemetry_packet(b"x", 1.0))


def test_telemetry_round_trip():
    payload = gl.hk_payload(command_count=3, command_errors=1, rate_mhz=10000, cycle=17953251739, peers_heard=3,
                            peers=3, delivery_permille=1000, agreement_permille=667)
    raw = gl.telemetry_packet(payload, 1795325186.5, seq=42)
    assert int.from_bytes(raw[:2], "big") == gl.HK_MID == 0x08F0
    tlm = gl.parse_telemetry(raw)
    assert (tlm.apid, tlm.seq) == (gl.APP_APID, 42)
    assert tlm.time == pytest.approx(1795325186.5)
    hk = gl.parse_hk(tlm.payload)
    assert hk["command_count"] == 3 and hk["agreement_permille"] == 667
    assert hk["cycle"] == 17953251739
    assert gl.parse_hk(gl.hk_payload(peers=70000))["peers"] == 0xFFFF  # clamped to the field's width, not wrapped


def test_enable_output_payload_is_to_lab_char16():
    assert gl.enable_output_payload("10.151.0.1") == b"10.151.0.1" + b"\0" * 6
