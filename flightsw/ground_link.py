"""CCSDS space packets of the reference swarm app, as cFS frames them, over UDP on the ground network.

The primary header (version, type, secondary-header flag, APID, sequence, length) is packed and parsed by the
`spacepackets` library. The secondary headers are cFS's (CFE_MSG v1): a command carries a function code
byte and a checksum byte (every byte of the packet XORed together gives 0xFF); telemetry carries a 6-byte
time stamp (seconds, 1/65536 subseconds). Ports are cFS's lab apps': CI_LAB receives commands on UDP 1234,
TO_LAB sends telemetry to UDP 1235 of the address given in its "enable output" command, so a cFS ground
tool (e.g. cFS-GroundSystem) can talk to a node.

Message ids are cFS-style (MID = type << 12 | secondary-header << 11 | APID): commands to the app use
MID 0x18F0, its housekeeping telemetry MID 0x08F0.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from spacepackets.ccsds.spacepacket import SpacePacket, SpacePacketHeader, PacketType

CI_LAB_PORT = 1234  # commands in
TO_LAB_PORT = 1235  # telemetry out
APP_APID = 0x0F0
CMD_MID = 0x1800 | APP_APID
HK_MID = 0x0800 | APP_APID

# Function codes of CMD_MID.
CC_NOOP = 0
CC_RESET_COUNTERS = 1
CC_SET_RATE = 2  # payload: uint32 rate in millihertz
CC_ENABLE_OUTPUT = 3  # payload: char[16] destination IPv4 (TO_LAB_EnableOutput's cDestIP)

HK_FORMAT = "!IIIQIHHHH"  # cmd count, cmd errors, rate mHz, cycle, samples rx, peers heard, peers, delivery‰, agreement‰
HK_FIELDS = ("command_count", "command_errors", "rate_mhz", "cycle", "samples_received", "peers_heard", "peers",
             "delivery_permille", "agreement_permille")


class PacketError(ValueError):
    """A datagram that is not a well-formed packet of this app."""


def _checksum(data: bytes) -> int:
    x = 0
    for b in data:
        x ^= b
    return x ^ 0xFF


def command_packet(function_code: int, payload: bytes = b"", seq: int = 0, apid: int = APP_APID) -> bytes:
    """A cFS command packet: primary header, function code, checksum, payload."""
    body = bytes([function_code & 0x7F, 0]) + payload
    header = SpacePacketHeader(packet_type=PacketType.TC, apid=apid, seq_count=seq & 0x3FFF,
                               data_len=len(body) - 1, sec_header_flag=True)
    raw = bytearray(SpacePacket(header, sec_header=body[:2], user_data=body[2:] or None).pack())
    raw[7] = _checksum(bytes(raw))
    return bytes(raw)


@dataclass(frozen=True)
class Command:
    apid: int
    seq: int
    function_code: int
    payload: bytes


def _header(data: bytes) -> tuple[SpacePacketHeader, int]:
    """The primary header of `data` and the packet's total length in bytes."""
    try:
        header = SpacePacketHeader.unpack(data)
    except ValueError as exc:
        raise PacketError(f"not a space packet: {exc}") from None
    return header, 6 + header.data_len + 1


def parse_command(data: bytes) -> Command:
    """The command in `data`; PacketError if it is not a complete command with a valid checksum."""
    header, total = _header(data)
    if header.packet_type != PacketType.TC or not header.sec_header_flag:
        raise PacketError("not a command with a secondary header")
    if len(data) < total or total < 8:
        raise PacketError(f"truncated: {len(data)} bytes, header says {total}")
    data = data[:total]
    if _checksum(data) != 0:
        raise PacketError("bad checksum")
    return Command(header.apid, header.seq_count, data[6] & 0x7F, data[8:])


def telemetry_packet(payload: bytes, t: float, seq: int = 0, apid: int = APP_APID) -> bytes:
    """A cFS telemetry packet: primary header, 6-byte time (seconds, 16-bit subseconds), payload."""
    seconds = int(t)
    sec_header = struct.pack("!IH", seconds & 0xFFFFFFFF, int((t - seconds) * 65536) & 0xFFFF)
    header = SpacePacketHeader(packet_type=PacketType.TM, apid=apid, seq_count=seq & 0x3FFF,
                               data_len=len(sec_header) + len(payload) - 1, sec_header_flag=True)
    return SpacePacket(header, sec_header=sec_header, user_data=payload or None).pack()


@dataclass(frozen=True)
class Telemetry:
    apid: int
    seq: int
    time: float
    payload: bytes


def parse_telemetry(data: bytes) -> Telemetry:
    """The telemetry packet in `data`; PacketError if it is not one."""
    header, total = _header(data)
    if header.packet_type != PacketType.TM or not header.sec_header_flag or len(data) < total or total < 12:
        raise PacketError("not a complete telemetry packet with a time stamp")
    seconds, sub = struct.unpack("!IH", data[6:12])
    return Telemetry(header.apid, header.seq_count, seconds + sub / 65536, bytes(data[12:total]))


def hk_payload(**values: int) -> bytes:
    """Housekeeping payload from HK_FIELDS values (clamped to their field widths)."""
    limits = [0xFFFFFFFF] * 3 + [2**64 - 1, 0xFFFFFFFF] + [0xFFFF] * 4
    return struct.pack(HK_FORMAT, *(max(0, min(int(values.get(k, 0)), lim)) for k, lim in zip(HK_FIELDS, limits)))


def parse_hk(payload: bytes) -> dict[str, int]:
    """HK_FIELDS of a housekeeping payload."""
    return dict(zip(HK_FIELDS, struct.unpack(HK_FORMAT, payload[:struct.calcsize(HK_FORMAT)])))


def enable_output_payload(ip: str) -> bytes:
    """TO_LAB_EnableOutput's payload: the destination address as a NUL-padded char[16]."""
    return ip.encode()[:15].ljust(16, b"\0")


def set_rate_payload(rate_hz: float) -> bytes:
    return struct.pack("!I", round(rate_hz * 1000))
