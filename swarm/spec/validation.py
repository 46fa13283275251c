"""What every spec model shares (pure): the strict base model, and readable locations for validation errors so
every model (swarm, links, orbits, experiments) names the field of a one-line error the same way."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from swarm.errors import VALUE_LIMIT


class Strict(BaseModel):
    """The base of every spec model: unknown fields are errors (a typo is never ignored), values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def show(value: Any, limit: int = VALUE_LIMIT) -> str:
    """repr() of a value for an error line, cut to `limit` characters with its length (a 10 KB value
    echoed in an error helps no one)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def error_location(loc: tuple[Any, ...], data: Any) -> str:
    """Turn a pydantic error location into a readable path, naming list items by their `name`."""
    parts: list[str] = []
    cur = data
    for at, key in enumerate(loc):
        if isinstance(key, int) and isinstance(cur, list) and key < len(cur):
            item = cur[key]
            label = item.get("name") if isinstance(item, dict) else None
            if at < len(loc) - 1 and loc[at + 1] == "name":  # the error is about the name: said once, there
                label = None
            parts[-1] = f"{parts[-1]}[{key}]" + (f" ({show(label)})" if label else "") if parts else f"[{key}]"
            cur = item
            continue
        if isinstance(key, str) and key.startswith(("function-", "value_error")):
            continue
        parts.append(str(key))
        cur = cur.get(key) if isinstance(cur, dict) else None
    return ".".join(parts)
