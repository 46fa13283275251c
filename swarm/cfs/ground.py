"""Ground side of cFS nodes: CCSDS command packets to CI_LAB, telemetry from TO_LAB, over UDP.

Packets are cFS's (CFE_MSG with message id v1): the CCSDS primary header (packed and parsed by the
`spacepackets` library), then for a command a function-code byte and a checksum byte (all bytes XORed
give 0xFF), for telemetry a 6-byte time (seconds, 1/65536 s) and 4 spare bytes (cFE's default
CFE_MSG_TelemetryHeader_t pads to 16 bytes). Payload fields are in the flight computer's byte order
(little-endian for a native x86-64 or ARM build); the headers are big-endian. A v1 message id is the first 16 bits of
the primary header less the version: type (command 1) << 12 | secondary header << 11 | APID.

`GroundStation` binds the swarm's ground gateway address (the host's side of the ground network) on
TO_LAB's port, sends commands to a node's CI_LAB (UDP 1234 at the node's ground address: the cFS image
redirects it to the node's CI_LAB port) and collects what TO_LAB sends after "enable output".
"""
from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass

from spacepackets.ccsds.spacepacket import PacketType, SpacePacket, SpacePacketHeader

from swarm.cfs.node import CI_LAB_BASE_PORT, TO_LAB_PORT

# Message ids and function codes of the cFS lab apps' default configuration (to_lab/config).
TO_LAB_CMD_MID = 0x1880
TO_LAB_HK_TLM_MID = 0x0880
TO_LAB_NOOP_CC = 0  # increments TO_LAB's command counter
TO_LAB_OUTPUT_ENABLE_CC = 6
CFE_ES_HK_TLM_MID = 0x0800
CFE_EVS_LONG_EVENT_MID = 0x0808
_PRIMARY = 6
_TLM_SECONDARY = 6
_TLM_SPARE = 4
_EVENT_FORMAT = "<20sHHII122s"  # CFE_EVS_LongEventTlm_Payload_t: AppName, EventID, EventType, SCID, CPU ID, Message


class PacketError(ValueError):
    """Bytes that are not the packet they should be."""


def _xor_checksum(data: bytes) -> int:
    value = 0xFF
    for byte in data:
        value ^= byte
    return value


def command_packet(mid: int, function_code: int, payload: bytes = b"", seq: int = 0) -> bytes:
    """A cFS command: primary header for message id `mid`, function code, checksum, payload."""
    if not mid & 0x1000 or not mid & 0x0800:
        raise PacketError(f"message id 0x{mid:04x}: not a command id with a secondary header (0x18xx-0x1fff)")
    body = bytes([function_code & 0x7F, 0]) + payload
    header = SpacePacketHeader(packet_type=PacketType.TC, apid=mid & 0x7FF, seq_count=seq & 0x3FFF,
                               data_len=len(body) - 1, sec_header_flag=True)
    raw = bytearray(SpacePacket(header, sec_header=body[:2], user_data=body[2:] or None).pack())
    raw[_PRIMARY + 1] = _xor_checksum(bytes(raw))
    return bytes(raw)


def enable_output_command(dest_ip: str, seq: int = 0) -> bytes:
    """TO_LAB's "output enable": send telemetry to UDP TO_LAB_PORT at `dest_ip` (char[16])."""
    encoded = dest_ip.encode("ascii")
    if len(encoded) > 15:
        raise PacketError(f"destination {dest_ip!r}: longer than TO_LAB's 16-byte field allows")
    return command_packet(TO_LAB_CMD_MID, TO_LAB_OUTPUT_ENABLE_CC, encoded.ljust(16, b"\0"), seq)


@dataclass(frozen=True)
class Telemetry:
    """One telemetry packet: message id, sequence count, cFE time (seconds) and payload."""

    mid: int
    seq: int
    time: float
    payload: bytes


def parse_telemetry(data: bytes) -> Telemetry:
    """The telemetry packet at the start of `data`; PacketError if it is not a complete one."""
    try:
        header = SpacePacketHeader.unpack(data)
    except ValueError as exc:
        raise PacketError(f"not a space packet: {exc}") from None
    total = _PRIMARY + header.data_len + 1
    if header.packet_type != PacketType.TM or not header.sec_header_flag:
        raise PacketError("not telemetry with a secondary header")
    start = _PRIMARY + _TLM_SECONDARY + _TLM_SPARE
    if len(data) < total or total < start:
        raise PacketError(f"truncated: {len(data)} bytes, header says {total} (at least {start})")
    seconds, subseconds = struct.unpack(">IH", data[_PRIMARY:_PRIMARY + _TLM_SECONDARY])
    mid = 0x0800 | header.apid
    return Telemetry(mid, header.seq_count, seconds + subseconds / 65536, bytes(data[start:total]))


def parse_event(tlm: Telemetry) -> dict:
    """An EVS long event packet: app name, event id and type, spacecraft and processor ID, message text."""
    size = struct.calcsize(_EVENT_FORMAT)
    if tlm.mid != CFE_EVS_LONG_EVENT_MID or len(tlm.payload) < size:
        raise PacketError(f"message id 0x{tlm.mid:04x} with {len(tlm.payload)} bytes: not an EVS long event")
    app, event_id, event_type, scid, cpu_id, text = struct.unpack(_EVENT_FORMAT, tlm.payload[:size])
    return {"app": app.split(b"\0")[0].decode(errors="replace"), "event_id": event_id, "event_type": event_type,
            "spacecraft_id": scid, "cpu_id": cpu_id, "message": text.split(b"\0")[0].decode(errors="replace")}


def to_lab_counters(tlm: Telemetry) -> dict[str, int]:
    """TO_LAB housekeeping: its command and command-error counters."""
    if tlm.mid != TO_LAB_HK_TLM_MID or len(tlm.payload) < 2:
        raise PacketError(f"message id 0x{tlm.mid:04x} with {len(tlm.payload)} bytes: not TO_LAB housekeeping")
    return {"command_count": tlm.payload[0], "command_errors": tlm.payload[1]}


class GroundStation:
    """A UDP socket on the host's ground address: commands out to CI_LAB, telemetry in from TO_LAB."""

    def __init__(self, bind_ip: str, port: int = TO_LAB_PORT):
        self.address = bind_ip
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((bind_ip, port))
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "GroundStation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, node_ip: str, packet: bytes, port: int = CI_LAB_BASE_PORT) -> None:
        """Send one command packet to a node's CI_LAB."""
        self.sock.sendto(packet, (node_ip, port))

    def enable_telemetry(self, node_ip: str) -> None:
        """Tell the node's TO_LAB to send its telemetry here."""
        self._seq += 1
        self.send(node_ip, enable_output_command(self.address, self._seq))

    def receive(self, seconds: float) -> list[tuple[str, Telemetry]]:
        """(sender address, packet) of every telemetry datagram arriving within `seconds`; datagrams
        that are not telemetry are skipped."""
        out: list[tuple[str, Telemetry]] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                break
            data, (sender, _port) = self.sock.recvfrom(65535)
            try:
                out.append((sender, parse_telemetry(data)))
            except PacketError:
                continue
        return out
