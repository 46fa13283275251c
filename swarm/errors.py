"""One exception family for the framework.

`SpecError` means bad input (exit code 2, nothing was started); `RuntimeFailure` means something went
wrong while acting on a valid spec (exit code 1); `CommandError` is a RuntimeFailure raised by the
runner with the argv, exit code and output of the failed command.
"""
from __future__ import annotations

import re
import shlex

VALUE_LIMIT = 100  # characters of an input value an error line echoes (paths fit; a 10 KB blob does not)
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_LONG_TOKEN = re.compile(r"[^\s'\"]{%d,}" % (VALUE_LIMIT + 21))


def clip(message: str, limit: int = VALUE_LIMIT) -> str:
    """One line, every quoted value longer than `limit` cut to `limit` characters and its length, and a long
    value that comes back later in the line said once: an error that echoes a 10 KB input helps no one."""
    seen: set[str] = set()

    def cut(match: re.Match) -> str:
        text = match.group(0)
        if len(text) <= limit + 2:
            return text
        if text in seen:
            return "(the same value)"
        seen.add(text)
        return f"{text[:limit]}... ({len(text)} characters)"

    line = " ".join(str(message).split("\n"))
    return _LONG_TOKEN.sub(cut, _QUOTED.sub(cut, line))


class SwarmError(Exception):
    """Base of every error the framework raises on purpose."""

    exit_code = 1


class SpecError(SwarmError):
    """Bad input: a spec field, a CLI argument or an environment requirement. Exit code 2. Its message is
    one line with long values cut (clip)."""

    exit_code = 2

    def __init__(self, message: str = ""):
        super().__init__(clip(message))


class RuntimeFailure(SwarmError):
    """A valid request failed while running. Exit code 1."""

    exit_code = 1


class CommandError(RuntimeFailure):
    """An external command exited non-zero (or could not be started)."""

    def __init__(self, argv: list[str], returncode: int, stdout: str = "", stderr: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = (stderr or stdout).strip().splitlines()
        detail = tail[-1] if tail else "no output"
        super().__init__(f"command failed (exit {returncode}): {shlex.join(self.argv)}: {detail}")


class NodeFailed(RuntimeFailure):
    """A node did not become ready; carries its logs."""

    def __init__(self, node: str, reason: str, logs: str):
        self.node = node
        self.logs = logs
        super().__init__(f"node {node!r} failed to start: {reason}")
