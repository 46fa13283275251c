"""One exception family for the framework.

`SpecError` means bad input (exit code 2, nothing was started); `RuntimeFailure` means something went
wrong while acting on a valid spec (exit code 1); `CommandError` is a RuntimeFailure raised by the
runner with the argv, exit code and output of the failed command.
"""
from __future__ import annotations

import shlex


class SwarmError(Exception):
    """Base of every error the framework raises on purpose."""

    exit_code = 1


class SpecError(SwarmError):
    """Bad input: a spec field, a CLI argument or an environment requirement. Exit code 2."""

    exit_code = 2


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
