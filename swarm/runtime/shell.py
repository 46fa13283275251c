"""Long-lived command shells: one `tc -force -batch -` or `nft -i` process per node, fed a whole batch of lines
through its stdin, instead of a process per change (at load 16 a process inside a node costs ~250 ms).

The process is started through the runner (`Runner.popen`, the one place processes start) inside the node
(the backend's exec prefix: `ip netns exec`, `docker exec -i`) the first time a batch goes to it, and stays
until `close()`. Neither tool says when it has finished a line or whether it succeeded on stdout, so each batch
is followed by a **sentinel**: a line that fails in a way the tool reports on stderr and that names the batch:

- tc (`-force`: it goes on after a failed line) prints `Command failed -:N` after the reason of every failed
  line, N counting the lines it has read since it started. The sentinel `qdisc show dev swarm-emu-ack` is line
  `first + len(batch)`; its `Command failed` marks the batch done; any other `Command failed -:K` in the batch's
  range is a failure of batch line K - first.
- nft -i runs each line as its own command buffer (one transaction: a one-line script that replaces a table is
  atomic, as `nft -f` is) and prints `Error: ...`, the line, and a caret line for a failed one. The sentinel is a
  word that is no command (`swarm_ack_<seq>`, a syntax error that never reaches the kernel); its echo marks the
  batch done; any other `Error:` before it is a failure, attributed by the echoed line.

The dialects (framing and parsing) are pure; `PersistentShell` does the I/O (select on stdin and stderr, so a
tool that writes much to stderr while we still write cannot deadlock); `Shells` keeps one per (node, tool).
"""
from __future__ import annotations

import os
import select
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from swarm.errors import CommandError
from swarm.runtime.runner import Runner

#: a batch not finished (sentinel seen) within this many seconds: the process is ended, the batch failed
BATCH_TIMEOUT_S = 60.0
TC_ACK_DEV = "swarm-emu-ack"  # no such device (15 characters at most): the tc sentinel fails on it
NFT_ACK = "swarm_ack_"


@dataclass
class BatchResult:
    """What one batch did: per failed line, the line and what the tool said about it."""

    lines: list[str]
    errors: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors


def one_line_nft(script: str) -> str:
    """An nft script (a table replaced in one transaction, netem.tc.plan_nft) as one line for `nft -i`, which
    reads a line at a time: statements joined with `;`, a block's opening brace joined with a space (pure)."""
    out = ""
    for raw in script.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if out and not out.endswith(("{ ", "; ")):
            out += "; "
        out += line + (" " if line.endswith(("{", ";")) else "")
    return out


def _check_lines(lines: Sequence[str]) -> list[str]:
    out = []
    for line in lines:
        line = str(line).strip()
        if "\n" in line or "\r" in line:
            raise ValueError(f"batch line {line!r}: one line per command")
        if line.endswith("\\"):
            raise ValueError(f"batch line {line!r}: a trailing backslash would join it to the next line")
        if line and not line.startswith("#"):
            out.append(line)
    return out


class Dialect:
    """How one tool is fed and read (pure)."""

    name: str = ""
    argv: tuple[str, ...] = ()

    def frame(self, lines: list[str], first: int, seq: int) -> tuple[str, int]:
        """The text to write for a batch whose first line is the tool's line `first` (1-based, counted since
        it started) and the lines it takes (batch + sentinel)."""
        raise NotImplementedError

    def parse(self, stderr_lines: list[str], lines: list[str], first: int, seq: int
              ) -> Optional[list[tuple[str, str]]]:
        """None while the batch's sentinel has not come back yet; then the failed lines with their reasons."""
        raise NotImplementedError


class TcBatch(Dialect):
    """`tc -force -batch -`: reads stdin a line at a time and runs each as it comes."""

    name = "tc"
    argv = ("tc", "-force", "-batch", "-")

    def frame(self, lines: list[str], first: int, seq: int) -> tuple[str, int]:
        return "".join(f"{line}\n" for line in lines) + f"qdisc show dev {TC_ACK_DEV}\n", len(lines) + 1

    def parse(self, stderr_lines: list[str], lines: list[str], first: int, seq: int
              ) -> Optional[list[tuple[str, str]]]:
        sentinel = first + len(lines)
        errors: list[tuple[str, str]] = []
        said: list[str] = []
        for text in stderr_lines:
            if text.startswith("Command failed -:"):
                try:
                    n = int(text.rsplit(":", 1)[1])
                except ValueError:
                    said.append(text)
                    continue
                if n == sentinel:
                    return errors
                if first <= n < sentinel:
                    errors.append((lines[n - first], " ".join(said).strip() or "failed"))
                said = []
            elif text.strip():
                said.append(text.strip())
        return None


class NftInteractive(Dialect):
    """`nft -i`: reads stdin a line at a time, each line one command buffer (one transaction)."""

    name = "nft"
    argv = ("nft", "-i")

    def frame(self, lines: list[str], first: int, seq: int) -> tuple[str, int]:
        return "".join(f"{line}\n" for line in lines) + f"{NFT_ACK}{seq}\n", len(lines) + 1

    def parse(self, stderr_lines: list[str], lines: list[str], first: int, seq: int
              ) -> Optional[list[tuple[str, str]]]:
        sentinel = f"{NFT_ACK}{seq}"
        errors: list[tuple[str, str]] = []
        message: Optional[str] = None
        for text in stderr_lines:
            body = text.rstrip()
            if not body.strip() or set(body.strip()) <= {"^", "~"}:
                continue  # the caret line under an echoed command
            if body == sentinel:
                return errors
            if "Error:" in body:
                if message is not None:  # an error with no echoed line after it
                    errors.append(("?", message))
                message = body.strip()
                continue
            if message is not None:  # the echoed command the error is about
                match = next((line for line in lines if line == body or body in line), body)
                errors.append((match, message))
                message = None
        return None


TC, NFT = TcBatch(), NftInteractive()


class PersistentShell:
    """One long-lived tool process (argv = exec prefix + the dialect's argv), fed batches; thread-safe (one
    batch at a time). Started on the first batch and again after it died (`starts` counts both)."""

    def __init__(self, runner: Runner, argv: Sequence[str], dialect: Dialect, label: str = "",
                 timeout: float = BATCH_TIMEOUT_S):
        self.runner, self.argv, self.dialect = runner, [str(a) for a in argv], dialect
        self.label = label or shlex.join(self.argv)
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None
        self.lineno = 0  # lines the current process has been given
        self.seq = 0
        self.starts = 0
        self.batches = 0
        self.durations: list[float] = []  # seconds each batch took (written .. sentinel back)
        self._lock = threading.Lock()
        self._pending = b""  # stderr read past the last complete line

    def _start(self) -> subprocess.Popen:
        self.proc = self.runner.popen(self.argv, stdout=False)
        self.starts += 1
        self.lineno = 0
        self._pending = b""
        return self.proc

    def ensure_started(self) -> None:
        """Start the process now (off the clock) if it is not running."""
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()

    def run(self, lines: Sequence[str], check: bool = True) -> BatchResult:
        """Feed `lines` to the process and wait for its sentinel. A failed line (check: CommandError naming
        it), a process that died or a batch not done within `timeout` (the process is ended and started again
        with the next batch) are failures."""
        batch = _check_lines(lines)
        with self._lock:
            started = time.monotonic()
            result = BatchResult(batch)
            if batch:
                result.errors = self._exchange(batch)
            result.seconds = time.monotonic() - started
            self.batches += 1
            self.durations.append(result.seconds)
        if check and result.errors:
            line, said = result.errors[0]
            more = f" (and {len(result.errors) - 1} more line(s))" if len(result.errors) > 1 else ""
            raise CommandError(self.argv, 1, "", f"{self.dialect.name} batch line {line!r}: {said}{more}")
        return result

    def _exchange(self, batch: list[str]) -> list[tuple[str, str]]:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stderr is not None
        self.seq += 1
        first = self.lineno + 1
        text, taken = self.dialect.frame(batch, first, self.seq)
        self.lineno += taken
        out = text.encode()
        win, ein = proc.stdin.fileno(), proc.stderr.fileno()
        got: list[str] = []
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._end()
                return [(batch[0], f"no answer within {self.timeout:g} s (process ended)")]
            try:
                readable, writable, _ = select.select([ein], [win] if out else [], [], left)
            except ValueError:  # a pipe closed under us
                readable, writable = [ein], []
            if writable:
                try:
                    n = os.write(win, out[:select.PIPE_BUF])
                except (BrokenPipeError, OSError):
                    out = b""
                else:
                    out = out[n:]
            if readable:
                chunk = os.read(ein, 65536)
                if not chunk:  # EOF: the process is gone
                    code = proc.wait()
                    said = " ".join(x.strip() for x in got if x.strip())[-300:]
                    self.proc = None
                    return [(batch[0], f"{self.dialect.name} exited with {code} before the batch was done"
                             + (f": {said}" if said else ""))]
                data = self._pending + chunk
                *complete, rest = data.split(b"\n")
                self._pending = rest
                got += [c.decode(errors="replace") for c in complete]
                errors = self.dialect.parse(got, batch, first, self.seq)
                if errors is not None:
                    return errors

    def _end(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self, timeout: float = 5.0) -> None:
        """End of input: the tool exits; ended if it does not within `timeout`."""
        with self._lock:
            proc, self.proc = self.proc, None
            if proc is None:
                return
            for f in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Shells:
    """One PersistentShell per (node, dialect), made on first use; `command(node, argv)` is the argv that runs
    `argv` inside the node with stdin open (the backend's exec prefix, the process label)."""

    def __init__(self, runner: Runner, command: Callable[[str, list[str]], list[str]],
                 timeout: float = BATCH_TIMEOUT_S):
        self.runner, self.command, self.timeout = runner, command, timeout
        self._shells: dict[tuple[str, str], PersistentShell] = {}
        self._lock = threading.Lock()

    def get(self, node: str, dialect: Dialect) -> PersistentShell:
        with self._lock:
            key = (node, dialect.name)
            if key not in self._shells:
                self._shells[key] = PersistentShell(self.runner, self.command(node, list(dialect.argv)), dialect,
                                                    f"{node}: {dialect.name}", self.timeout)
            return self._shells[key]

    def run(self, node: str, dialect: Dialect, lines: Sequence[str], check: bool = True) -> BatchResult:
        return self.get(node, dialect).run(lines, check=check)

    def stats(self) -> dict[str, int | float]:
        """Processes started (restarts included), shells, batches fed, and the batches' duration (written ..
        sentinel back) p50 / p90 / max in ms."""
        with self._lock:
            shells = list(self._shells.values())
        took = sorted(d for s in shells for d in s.durations)

        def q(p: float) -> float:
            return round(took[min(len(took) - 1, int(p * len(took)))] * 1000, 3) if took else 0.0

        return {"shell_processes": sum(s.starts for s in shells), "shells": len(shells),
                "shell_batches": sum(s.batches for s in shells), "shell_batch_ms_p50": q(0.5),
                "shell_batch_ms_p90": q(0.9), "shell_batch_ms_max": q(1.0)}

    def close(self) -> None:
        with self._lock:
            shells = list(self._shells.values())
        for s in shells:
            s.close()
