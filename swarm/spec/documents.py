"""Documents (pure): a YAML file read safely into a mapping, and a mapping validated into a pydantic model, each
failure one SpecError line naming the file, the field and the value. The swarm spec (swarm.spec.model) and every
experiment type's model load through here.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from swarm.errors import SpecError
from swarm.spec.safe_yaml import load_yaml, read_text
from swarm.spec.validation import error_location, show


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, Union, list, dict, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found at `loc` inside `model` (list indexes and dict keys stepped over)."""
    models = [model]
    for key in loc:
        if isinstance(key, str):
            inner = [m.model_fields[key].annotation for m in models if key in m.model_fields]
            if inner:
                models = [m for a in inner for m in _models_in(a)]
    return sorted({f for m in models for f in m.model_fields})


def format_validation_error(exc: ValidationError, data: Any, source: str, model: type[BaseModel] | None = None) -> str:
    """One line: where, which field, what value, what is wrong (the first error only, an unknown field
    first: a misspelt `subent:` also makes `subnet` missing, and the misspelling is the news), with the
    closest known field of that level when one is near (`did you mean 'subnet'?`)."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    where = error_location(tuple(err["loc"]), data)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        key = err["loc"][-1]
        msg = f"unknown field {show(key)}"
        if model is not None:
            close = difflib.get_close_matches(str(key), known_fields(model, tuple(err["loc"][:-1])), n=1, cutoff=0.6)
            msg += f"; did you mean {close[0]!r}?" if close else ""
        where = error_location(tuple(err["loc"][:-1]), data) or "top level"
    elif err["type"] in ("int_parsing", "float_parsing", "literal_error", "missing", "int_type", "string_type"):
        msg = f"{msg} (got {err.get('input')!r})" if err["type"] != "missing" else msg
    prefix = f"{source}: " if source else ""
    return f"{prefix}{where + ': ' if where else ''}{msg}"


def validate_document(model: type[BaseModel], data: Any, source: str, what: str) -> Any:
    """Validate a parsed YAML/JSON mapping into `model`, raising SpecError with one line."""
    if not isinstance(data, dict):
        raise SpecError(f"{source or what}: expected a mapping at the top level, got {type(data).__name__}")
    fields = getattr(model, "model_fields", {})
    if data and fields and not any(isinstance(k, str) and k in fields for k in data):
        # no key is a field: not this kind of file at all (/etc/shadow parses as a mapping); its keys, which
        # may be its secrets, are not echoed
        raise SpecError(f"{source or what}: not a {what} file: none of its {len(data)} top-level keys is a "
                        f"{what} field (such as {', '.join(list(fields)[:3])})")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, data, source, model)) from None
    except SpecError as exc:  # raised by a nested spec (e.g. an experiment's swarm template)
        raise SpecError(f"{source}: {exc}" if source and not str(exc).startswith(source) else str(exc)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (YAML says keys are unique; PyYAML
    silently keeps the last, so `nodes: 3` then `nodes: 4` would run 4 nodes without a word)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden on purpose
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKey(key, line, seen[key])
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


class DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first: int):
        super().__init__(f"line {line}: duplicate key {show(key)} (first on line {first})")


def unique(field: str, values: list, key=lambda v: v) -> list:
    """`values` if no two are the same (after `key`, e.g. a parsed rate); ValueError naming the repeat."""
    seen: dict[Any, Any] = {}
    for v in values:
        k = key(v)
        if k in seen:
            raise ValueError(f"{field}: {show(v)} is given twice" if seen[k] == v
                             else f"{field}: {show(v)} is {show(seen[k])} again")
        seen[k] = v
    return values


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file, bounded (swarm.spec.safe_yaml: regular files only, size, aliases, depth); unreadable
    or malformed files are one-line SpecErrors naming the file and line, never its text."""
    p = Path(path)
    text = read_text(p, what)
    try:
        return load_yaml(text, str(p), _UniqueKeyLoader)
    except DuplicateKey as exc:
        raise SpecError(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{p}:{where}: malformed YAML: {problem}") from None
