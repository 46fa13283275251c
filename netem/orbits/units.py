"""Unit parsers for the `orbits:` spec: lengths, angles, durations, rates, propagation speed.

Strings as users write them; a bare number is the unit in brackets. Every parser raises ValueError naming
the field and the value, which the spec layer turns into one line (exit 2).
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any

C_KM_S = 299_792.458  # speed of light in vacuum, km/s

_NUM = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_LENGTH_RE = re.compile(rf"^{_NUM}\s*(km|m)?$")
_ANGLE_RE = re.compile(rf"^{_NUM}\s*(deg|°|rad)?$")
_DURATION_RE = re.compile(rf"^{_NUM}\s*(us|ms|s|sec|min|m|h|d)?$")
_RATE_RE = re.compile(rf"^{_NUM}\s*([kmgt]?)(bit/s|bit|bps)?$", re.IGNORECASE)
_FREQ_RE = re.compile(rf"^{_NUM}\s*([kmg]?)(hz)?$", re.IGNORECASE)
_DB_RE = re.compile(rf"^{_NUM}\s*(db)?$", re.IGNORECASE)
_SPEED_RE = re.compile(rf"^{_NUM}?\s*(c|km/s|m/s)$")
_RATE_MULT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def _text(value: Any, field: str, example: str) -> str:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{field} {value!r}: expected {example}")
    return str(value).strip().lower()


def parse_length_km(value: Any, field: str = "length") -> float:
    """'550km', '550 km', '400m', 550 (km) -> kilometres."""
    match = _LENGTH_RE.match(_text(value, field, "a length like 550km or 400m"))
    if not match:
        raise ValueError(f"{field} {value!r}: expected a length like 550km or 400m")
    km = float(match.group(1)) * (0.001 if match.group(2) == "m" else 1.0)
    if not math.isfinite(km):
        raise ValueError(f"{field} {value!r}: not a finite length")
    return km


def parse_angle_deg(value: Any, field: str = "angle") -> float:
    """'53', '53deg', '0.92rad', 53.0 -> degrees."""
    match = _ANGLE_RE.match(_text(value, field, "an angle in degrees like 53 or 53deg"))
    if not match:
        raise ValueError(f"{field} {value!r}: expected an angle in degrees like 53 or 53deg")
    deg = float(match.group(1))
    if match.group(2) == "rad":
        deg = math.degrees(deg)
    if not math.isfinite(deg):
        raise ValueError(f"{field} {value!r}: not a finite angle")
    return deg


def parse_duration_s(value: Any, field: str = "duration") -> float:
    """'1s', '500ms', '10min', '95m', '1.5h', 60 (s) -> seconds (may be <= 0: callers decide)."""
    match = _DURATION_RE.match(_text(value, field, "a duration like 1s, 500ms or 10min"))
    if not match:
        raise ValueError(f"{field} {value!r}: expected a duration like 1s, 500ms, 10min or 1.5h")
    mult = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    return float(match.group(1)) * mult[match.group(2) or "s"]


def parse_rate_bps(value: Any, field: str = "rate") -> int:
    """'100Mbit', '10M', '500kbps', 0 -> bit/s (decimal units, bits; 'Mbps' = megabits)."""
    text = _text(value, field, "a rate like 100Mbit")
    match = _RATE_RE.match(text)
    if not match:
        raise ValueError(f"{field} {value!r}: expected a rate like 100Mbit, 10M or 500k")
    bps = float(match.group(1)) * _RATE_MULT[match.group(2).lower()]
    if bps < 0 or not math.isfinite(bps):
        raise ValueError(f"{field} {value!r}: must be a non-negative rate")
    return int(round(bps))


def parse_frequency_hz(value: Any, field: str = "bandwidth") -> float:
    """'20MHz', '500kHz', 1e6 -> Hz (> 0)."""
    match = _FREQ_RE.match(_text(value, field, "a bandwidth like 20MHz"))
    if not match:
        raise ValueError(f"{field} {value!r}: expected a bandwidth like 20MHz or 500kHz")
    hz = float(match.group(1)) * _RATE_MULT[match.group(2).lower()]
    if not hz > 0:
        raise ValueError(f"{field} {value!r}: must be positive")
    return hz


def parse_db(value: Any, field: str = "snr") -> float:
    """'10dB', 10 -> decibels."""
    match = _DB_RE.match(_text(value, field, "a ratio in dB like 10dB"))
    if not match:
        raise ValueError(f"{field} {value!r}: expected a ratio in dB like 10dB")
    return float(match.group(1))


def parse_speed_km_s(value: Any, field: str = "propagation_speed") -> float:
    """'c', '0.59c' (StarryNet's choice), '200000km/s', '2e8m/s' -> km/s, in (0, c]."""
    text = _text(value, field, "a speed like c, 0.59c or 200000km/s")
    match = _SPEED_RE.match(text.replace(" ", ""))
    if not match:
        raise ValueError(f"{field} {value!r}: expected a speed like c, 0.59c or 200000km/s")
    number = float(match.group(1)) if match.group(1) is not None else 1.0
    km_s = number * {"c": C_KM_S, "km/s": 1.0, "m/s": 0.001}[match.group(2)]
    if not 0 < km_s <= C_KM_S * (1 + 1e-12):
        raise ValueError(f"{field} {value!r}: must be above 0 and at most c")
    return km_s


def parse_epoch(value: Any, field: str = "epoch") -> datetime:
    """ISO 8601 ('2026-03-20T12:00:00Z', a YAML timestamp) -> an aware UTC datetime (naive = UTC)."""
    if isinstance(value, datetime):
        dt = value
    else:
        text = _text(value, field, "a UTC time like 2026-03-20T12:00:00Z")
        try:
            dt = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{field} {value!r}: expected a UTC time like 2026-03-20T12:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def format_rate(bps: float) -> str:
    for mult, unit in ((10**9, "Gbit"), (10**6, "Mbit"), (10**3, "kbit")):
        if bps >= mult:
            return f"{bps / mult:g}{unit}"
    return f"{bps:g}bit"
