"""Readable locations for validation errors (pure): every spec model (swarm, orbits, experiments) names the
field of a one-line error the same way."""
from __future__ import annotations

from typing import Any


def error_location(loc: tuple[Any, ...], data: Any) -> str:
    """Turn a pydantic error location into a readable path, naming list items by their `name`."""
    parts: list[str] = []
    cur = data
    for key in loc:
        if isinstance(key, int) and isinstance(cur, list) and key < len(cur):
            item = cur[key]
            label = item.get("name") if isinstance(item, dict) else None
            parts[-1] = f"{parts[-1]}[{key}]" + (f" ({label!r})" if label else "") if parts else f"[{key}]"
            cur = item
            continue
        if isinstance(key, str) and key.startswith(("function-", "value_error")):
            continue
        parts.append(str(key))
        cur = cur.get(key) if isinstance(cur, dict) else None
    return ".".join(parts)
