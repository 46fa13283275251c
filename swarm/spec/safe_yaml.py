"""Bounded, safe reading of the files a user hands the framework (specs, experiments, orbits, contact plans).

Why: a 1 KB YAML alias bomb passed 3 GB; `/dev/zero` as a spec passed 3 GB; a
FIFO blocked forever; a non-UTF-8 file, a 5,000-digit integer or 2,000 nested `[` ended in a traceback; and
`/proc/self/environ` given as a contact plan printed the environment. So: only regular files, at most
`limit` bytes read, UTF-8 text without control characters, and the YAML node graph is checked (expanded
size with aliases, depth, list length, digits) BEFORE any Python object is built from it. Every refusal is
a one-line SpecError naming the file and the line, never the file's text.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from swarm.errors import SpecError

SPEC_LIMIT = 1 << 20  # bytes: a 1,000-node node_list with environments is ~150 KB
PLAN_LIMIT = 16 << 20  # bytes: a contact plan of 100,000 contacts is ~6 MB
EXPANDED_LIMIT = 200_000  # YAML nodes after alias expansion (a 1,000-node spec is ~20,000)
DEPTH_LIMIT = 64
LIST_LIMIT = 20_000
DIGITS_LIMIT = 40  # digits in one number: float range is 1e308, nothing here counts past 1e40
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_DIGITS = re.compile(r"\d{%d,}" % (DIGITS_LIMIT + 1))
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def read_text(path: str | Path, what: str, limit: int = SPEC_LIMIT) -> str:
    """The text of the regular file `path` (at most `limit` bytes, UTF-8, no control characters but tab and
    line ends); SpecError naming the file and, for bad bytes, the line. Never blocks on a FIFO."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecError(f"{p}: cannot read {what} file ({exc.strerror})") from None
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise SpecError(f"{p}: {what} file is {_KINDS.get(kind, 'not a regular file')}, not a regular file")
        chunks, size = [], 0
        while size <= limit:  # st_size is 0 for /proc files: read, counting
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SpecError(f"{p}: cannot read {what} file ({exc.strerror})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise SpecError(f"{p}: {what} file is larger than {limit // 1024} KiB; refused unread")
    data = b"".join(chunks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{p}: line {line}: not UTF-8 text "
                        f"(byte 0x{data[exc.start]:02x}); a {what} file is UTF-8") from None
    bad = _CONTROL.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise SpecError(f"{p}: line {line}: control character "
                        f"0x{ord(bad.group()):02x}; a {what} file is text")
    return text


def check_node_graph(root: yaml.Node, source: str) -> None:
    """SpecError (naming the line) when the composed YAML, aliases expanded, has more than EXPANDED_LIMIT
    nodes, is nested deeper than DEPTH_LIMIT, has a list or mapping longer than LIST_LIMIT, or a number
    longer than DIGITS_LIMIT digits. Iterative, memoized by node identity: a bomb costs its size, not its
    expansion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        line = node.start_mark.line + 1
        if depth > DEPTH_LIMIT:
            raise SpecError(f"{source}: line {line}: nested deeper than {DEPTH_LIMIT} levels")
        if isinstance(node, yaml.ScalarNode):
            if _DIGITS.search(node.value):
                raise SpecError(f"{source}: line {line}: a number with more than {DIGITS_LIMIT} digits")
            sizes[id(node)] = 1
            continue
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else list(node.value))
        if len(node.value) > LIST_LIMIT:
            raise SpecError(f"{source}: line {line}: more than {LIST_LIMIT} items in one list or mapping")
        if done:
            sizes[id(node)] = total = 1 + sum(sizes[id(c)] for c in children)
            if total > EXPANDED_LIMIT:
                raise SpecError(f"{source}: line {line}: more than {EXPANDED_LIMIT} values once aliases are "
                                "expanded (an alias bomb?)")
            continue
        if id(node) in sizes:
            continue
        sizes[id(node)] = 0  # a cycle (`&a [*a]`) counts once; the constructor refuses it later
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def load_yaml(text: str, source: str, loader: type = yaml.SafeLoader) -> Any:
    """Parse one YAML document with `loader` (a SafeLoader), checking its node graph before constructing it."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # the parser is iterative; the composer recurses
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > DEPTH_LIMIT:
                raise SpecError(f"{source}: line {event.start_mark.line + 1}: nested deeper than {DEPTH_LIMIT} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    ld = loader(text)
    try:
        try:
            node = ld.get_single_node()
        except RecursionError:
            raise SpecError(f"{source}: nested too deeply to parse") from None
        if node is None:
            return None
        check_node_graph(node, source)
        return ld.construct_document(node)
    finally:
        ld.dispose()
