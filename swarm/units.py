"""Every unit the specs and the CLI accept, parsed in one place (pure).

- durations of a link (delay, jitter): parse_time_ms -> milliseconds; format_time back
- durations of an experiment (duration, warmup, fault times): parse_duration -> seconds
- percentages (loss, corrupt, ...): parse_percent
- link rates (`rate:` of a link): parse_link_rate -> bit/s (0: unlimited); format_rate back
- sweep rates (the thesis's '10k', '1Mbps'): parse_rate -> bit/s; rate_label back ('10kbps')
- sample rates ('100Hz', '2kHz', 'inf'): rate_hz -> samples per second
- orbits (netem/orbits): parse_length_km, parse_angle_deg, parse_frequency_hz, parse_db, parse_speed_km_s
  (propagation speed, 'c' / '0.59c'), parse_epoch (UTC instants)

Link parsers raise ValueError (they run inside pydantic validators, which name the field); the sweep's
rate parser raises SpecError (it is called on already-validated lists).
"""
from __future__ import annotations

import math
import re
from typing import Any

from swarm.errors import SpecError

_TIME_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(us|ms|s)?\Z")
_PERCENT_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*%?\Z")
_RATE_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([kmgt]?)(bit/s|bit|bps)?\Z", re.IGNORECASE)
_RATE_MULT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
MAX_DELAY_MS = 3_600_000.0  # an hour: beyond this a number is a typo, not a link


# -------------------------------------------------------------------------------- link conditions
def parse_time_ms(value: Any, field: str = "delay") -> float:
    """'250ms', '1.3s', '500us', 250 (ms) -> milliseconds (>= 0)."""
    if isinstance(value, bool):
        raise ValueError(f"{field} {value!r}: expected a duration like 250ms or 1.3s")
    match = _TIME_RE.match(str(value).strip().lower())
    if not match:
        raise ValueError(f"{field} {value!r}: expected a duration like 250ms, 1.3s or 500us")
    ms = float(match.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2) or "ms"]
    if ms < 0:
        raise ValueError(f"{field} {value!r}: must not be negative")
    if ms > MAX_DELAY_MS:
        raise ValueError(f"{field} {value!r}: more than an hour")
    return round(ms, 6)


def parse_percent(value: Any, field: str = "loss") -> float:
    """'1%', '0.5%', 1 -> percent in [0, 100]."""
    if isinstance(value, bool):
        raise ValueError(f"{field} {value!r}: expected a percentage like 1%")
    match = _PERCENT_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"{field} {value!r}: expected a percentage like 1% or 0.5%")
    pct = float(match.group(1))
    if not 0 <= pct <= 100:
        raise ValueError(f"{field} {value!r}: must be between 0 and 100 %")
    return pct


def parse_link_rate(value: Any, field: str = "rate") -> int:
    """'10Mbit', '10M', '10Mbps', '500k', '1.5G', 0 -> bit/s (0: unlimited). Decimal units, bits."""
    if isinstance(value, bool):
        raise ValueError(f"{field} {value!r}: expected a rate like 10Mbit, 10M or 500k")
    text = str(value).strip()
    if text.lower() in ("unlimited", "none", "off"):
        return 0
    match = _RATE_RE.match(text)
    if not match:
        raise ValueError(f"{field} {value!r}: expected a rate like 10Mbit, 10M, 500k or 0 (unlimited)")
    bps = float(match.group(1)) * _RATE_MULT[match.group(2).lower()]
    if bps < 0:
        raise ValueError(f"{field} {value!r}: must not be negative")
    if 0 < bps < 8:
        raise ValueError(f"{field} {value!r}: below 8 bit/s")
    if bps > 10**13:
        raise ValueError(f"{field} {value!r}: above 10 Tbit/s")
    return int(round(bps))


def format_time(ms: float) -> str:
    if ms >= 1000 and (ms / 1000) == round(ms / 1000, 3):
        return f"{ms / 1000:g}s"
    if ms < 1:
        return f"{ms * 1000:g}us"
    return f"{ms:g}ms"


def format_rate(bps: int) -> str:
    for mult, unit in ((10**9, "Gbit"), (10**6, "Mbit"), (10**3, "kbit")):
        if bps >= mult:
            return f"{bps / mult:g}{unit}"
    return f"{bps}bit"


# ---------------------------------------------------------------------------- experiments and sweeps
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\Z")
_DURATION_MULT = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def duration_seconds(value: Any) -> float | None:
    """'10s', '500ms', '2m', '10min', '1.5h', '1d', 10 -> seconds (>= 0); None when it is no duration. The one
    table of duration units: every duration field reads it."""
    match = _DURATION_RE.match(str(value).strip())
    return float(match.group(1)) * _DURATION_MULT[match.group(2) or "s"] if match else None


def parse_duration(value: Any, field: str = "duration") -> float:
    """'10s', '500ms', '2m', '10min', '1.5h', '1d', 10 -> seconds (> 0)."""
    seconds = duration_seconds(value)
    if seconds is None:
        raise ValueError(f"{field} {value!r}: expected seconds, e.g. 10, 10s, 500ms, 2m or 1.5h")
    if seconds <= 0:
        raise ValueError(f"{field} {value!r}: must be positive")
    return seconds


_SWEEP_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmg]?)(?:bps|bit/s)?\Z", re.IGNORECASE)
_MULTIPLIERS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
_UNITS = ((10**9, "Gbps"), (10**6, "Mbps"), (10**3, "kbps"))


def parse_rate(text: str) -> int:
    """'10k', '10kbps', '1M', '1Mbps', '1G', '500k', '2.5M', '100' -> bits per second (decimal units)."""
    match = _SWEEP_RATE_RE.match(str(text).strip())
    if not match:
        raise SpecError(f"rate {text!r}: expected a number with optional k/M/G suffix (e.g. 10k, 1Mbps, 1G)")
    number, prefix = match.groups()
    return round(float(number) * _MULTIPLIERS[prefix.lower()])


def rate_label(bps: float) -> str:
    """Bits per second -> label as in the thesis tables: 10000 -> '10kbps', 1e9 -> '1Gbps'; NaN -> ''."""
    if bps is None or (isinstance(bps, float) and math.isnan(bps)):
        return ""
    for multiplier, unit in _UNITS:
        if bps >= multiplier:
            return f"{bps / multiplier:g}{unit}"
    return f"{bps:g}bps"


def rate_hz(value: str) -> float:
    """'100Hz', '2kHz', '500' -> samples per second; 'inf' -> inf."""
    v = str(value)
    if v == "inf":
        return math.inf
    if v.endswith("kHz"):
        return float(v[:-3]) * 1000
    return float(v.removesuffix("Hz"))


# ------------------------------------------------------------------------------------------- orbits
C_KM_S = 299_792.458  # speed of light in vacuum, km/s
_NUM = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_LENGTH_RE = re.compile(rf"^{_NUM}\s*(km|m)?\Z")
_ANGLE_RE = re.compile(rf"^{_NUM}\s*(deg|°|rad)?\Z")
_FREQ_RE = re.compile(rf"^{_NUM}\s*([kmg]?)(hz)?\Z", re.IGNORECASE)
_DB_RE = re.compile(rf"^{_NUM}\s*(db)?\Z", re.IGNORECASE)
_SPEED_RE = re.compile(rf"^{_NUM}?\s*(c|km/s|m/s)\Z")


def _text(value: Any, field: str, example: str) -> str:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{field} {value!r}: expected {example}")
    return str(value).strip().lower()


def parse_length_km(value: Any, field: str = "length") -> float:
    """'550km', '550 km', '400m', 550 (km) -> kilometres (sign kept: callers decide what is sane)."""
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


def parse_epoch(value: Any, field: str = "epoch"):
    """ISO 8601 ('2026-03-20T12:00:00Z', a YAML timestamp) -> an aware UTC datetime (naive = UTC)."""
    from datetime import datetime, timezone

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
