"""cFS ground packets: commands as CI_LAB/cFE expect them, and telemetry recorded from a real cFS node."""
import json
from functools import reduce
from pathlib import Path

import pytest

from swarm.cfs.ground import (CFE_EVS_LONG_EVENT_MID, TO_LAB_CMD_MID, TO_LAB_HK_TLM_MID, PacketError, command_packet,
                              enable_output_command, parse_event, parse_telemetry, to_lab_counters)

RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "cfs" / "packets.json").read_text())["packets"]


def test_command_header_fields_and_cfe_checksum():
    pkt = enable_output_command("10.161.0.1", seq=1)
    assert len(pkt) == 8 + 16
    assert pkt[0:2] == bytes.fromhex("1880")  # v1 message id: command, secondary header, APID 0x080
    assert pkt[2:4] == bytes.fromhex("c001")  # unsegmented, sequence count 1
    assert int.from_bytes(pkt[4:6], "big") == len(pkt) - 7  # CCSDS length: total - 7
    assert pkt[6] == 6  # TO_LAB_OUTPUT_ENABLE_CC
    assert reduce(lambda a, b: a ^ b, pkt, 0xFF) == 0  # CFE_MSG_ValidateChecksum: XOR from 0xFF over all bytes
    assert pkt[8:] == b"10.161.0.1".ljust(16, b"\0")


def test_sent_commands_match_what_the_real_node_accepted():
    # The recorded node answered these two with "output enabled" and "NOOP" events (see the event test).
    assert enable_output_command("10.161.0.1", seq=1).hex() == RECORDED["sent_enable_output"]
    assert command_packet(TO_LAB_CMD_MID, 0, seq=2).hex() == RECORDED["sent_noop"]


def test_bad_commands_are_refused():
    with pytest.raises(PacketError, match="0x0880: not a command id"):
        command_packet(TO_LAB_HK_TLM_MID, 0)
    with pytest.raises(PacketError, match="longer than"):
        enable_output_command("1234:5678:9abc::1")


def test_recorded_to_lab_housekeeping():
    tlm = parse_telemetry(bytes.fromhex(RECORDED["to_lab_hk"]))
    assert tlm.mid == TO_LAB_HK_TLM_MID
    assert to_lab_counters(tlm) == {"command_count": 2, "command_errors": 0}  # enable output + NOOP


def test_recorded_event_names_the_nodes_ids():
    tlm = parse_telemetry(bytes.fromhex(RECORDED["evs_noop_event"]))
    event = parse_event(tlm)
    assert tlm.mid == CFE_EVS_LONG_EVENT_MID
    assert event["app"] == "TO_LAB_APP" and event["cpu_id"] == 4 and event["spacecraft_id"] == 69
    assert event["message"].startswith("TO: NOOP command.")
    with pytest.raises(PacketError, match="not an EVS long event"):
        parse_event(parse_telemetry(bytes.fromhex(RECORDED["to_lab_hk"])))


def test_truncated_and_non_telemetry_are_refused():
    raw = bytes.fromhex(RECORDED["to_lab_hk"])
    with pytest.raises(PacketError, match="truncated"):
        parse_telemetry(raw[:-3])
    with pytest.raises(PacketError, match="not telemetry"):
        parse_telemetry(enable_output_command("10.0.0.1"))
    with pytest.raises(PacketError, match="not a space packet"):
        parse_telemetry(b"\x08")
