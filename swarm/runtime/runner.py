"""The one subprocess runner: every external command of the framework goes through `Runner.run`.

Commands are argv lists (never a shell string), each is logged with `shlex.join`, and a failure raises
`CommandError` carrying argv, exit code, stdout and stderr. A secret goes on a command's stdin (`input`), never
on its line, where `ps` shows it (the Docker Swarm join token: an Engine API request through `docker system
dial-stdio`); a command that handles one names it in `secrets`: the log line and any CommandError show `REDACTED`
in its place. Tests hand in `RecordingRunner` to check the commands a piece of code would run (and what it would
write to their stdin) without running them.
"""
from __future__ import annotations

import ctypes
import logging
import os
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from typing import IO, Callable, Sequence

from swarm.errors import CommandError

log = logging.getLogger("swarm.run")


@dataclass
class Result:
    """Outcome of one command."""

    argv: list[str]
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner:
    """Runs argv lists with subprocess; raises CommandError on failure when `check` is true."""

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
        capture: bool = True,
        env_extra: dict[str, str] | None = None,
        secrets: Sequence[str] = (),
    ) -> Result:
        argv = [str(a) for a in argv]
        log.debug("run: %s", redact(shlex.join(argv), secrets))
        try:
            return self._run(argv, check, input, timeout, capture, env_extra)
        except CommandError as exc:
            if not secrets:
                raise
            raise redacted_error(exc, secrets) from None

    def _run(self, argv: list[str], check: bool, input: str | None, timeout: float | None, capture: bool,
             env_extra: dict[str, str] | None) -> Result:
        try:
            proc = subprocess.run(
                argv,
                input=input,
                text=True,
                capture_output=capture,
                timeout=timeout,
                env={**os.environ, **env_extra} if env_extra else None,
            )
        except FileNotFoundError as exc:
            raise CommandError(argv, 127, "", f"{argv[0]}: not found ({exc.strerror})") from None
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            raise CommandError(argv, 124, out, f"timed out after {timeout} s") from None
        result = Result(argv, proc.returncode, proc.stdout or "", proc.stderr or "")
        if check and proc.returncode != 0:
            raise CommandError(argv, proc.returncode, result.stdout, result.stderr)
        return result

    def pipe(self, producer: Sequence[str], consumer: Sequence[str], *, timeout: float | None = None) -> Result:
        """`producer | consumer` without a shell (e.g. `docker save` into another host's `docker load`);
        the bytes never touch Python. Raises CommandError naming whichever side failed."""
        a, b = [str(x) for x in producer], [str(x) for x in consumer]
        log.debug("pipe: %s | %s", shlex.join(a), shlex.join(b))
        try:
            src = subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError as exc:
            raise CommandError(a, 127, "", f"{a[0]}: not found ({exc.strerror})") from None
        try:
            dst = subprocess.Popen(b, stdin=src.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError as exc:
            src.kill()
            src.wait()
            raise CommandError(b, 127, "", f"{b[0]}: not found ({exc.strerror})") from None
        assert src.stdout is not None and src.stderr is not None  # both were asked for as pipes
        src.stdout.close()  # the consumer holds the only reader: a dying consumer stops the producer
        try:
            out, err = dst.communicate(timeout=timeout)
            src_err = src.stderr.read()
            src.wait(timeout=30)
        except subprocess.TimeoutExpired:
            src.kill()
            dst.kill()
            src.wait()
            dst.wait()
            raise CommandError(b, 124, "", f"timed out after {timeout} s") from None
        finally:
            src.stderr.close()
        if src.returncode != 0:
            raise CommandError(a, src.returncode, "", src_err.decode(errors="replace"))
        if dst.returncode != 0:
            raise CommandError(b, dst.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
        return Result(b, 0, out.decode(errors="replace"), err.decode(errors="replace"))

    def popen(self, argv: Sequence[str], *, stdout: bool = True) -> subprocess.Popen:
        """Start a command with pipes on stdin, stdout and stderr (text mode), for a conversation with it.
        `stdout=False`: its stdout goes to /dev/null (a tool that answers on stderr only, swarm.runtime.shell)."""
        argv = [str(a) for a in argv]
        log.debug("popen: %s", shlex.join(argv))
        try:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, bufsize=1)
        except FileNotFoundError as exc:
            raise CommandError(argv, 127, "", f"{argv[0]}: not found ({exc.strerror})") from None

    def start(self, argv: Sequence[str], *, stdout_path: str | None = None,
              env_extra: dict[str, str] | None = None, die_with_parent: bool = False) -> subprocess.Popen:
        """Start a long-running process in its own session (so it survives our Ctrl-C) and return it.

        `die_with_parent`: the kernel sends it SIGTERM when the thread that started it ends, whatever ends
        it (SIGKILL included; PR_SET_PDEATHSIG, kept across the exec of `ip netns exec` and `nsenter`), for a
        helper that must not outlive the command that owns it (`swarm capture`'s dumpcaps). Start such a
        process from a thread that lives as long as it should."""
        argv = [str(a) for a in argv]
        log.debug("start: %s", shlex.join(argv))
        out: IO[bytes] | int = open(stdout_path, "ab") if stdout_path else subprocess.DEVNULL
        try:
            return subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, **env_extra} if env_extra else None,
                preexec_fn=_death_signal(os.getpid()) if die_with_parent else None,
            )
        except FileNotFoundError as exc:
            raise CommandError(argv, 127, "", f"{argv[0]}: not found ({exc.strerror})") from None
        finally:
            if not isinstance(out, int):
                out.close()


PR_SET_PDEATHSIG = 1  # prctl(2)


def _death_signal(parent: int) -> Callable[[], None]:
    """A preexec_fn that asks the kernel for SIGTERM when the parent dies, and ends the child at once if the
    parent already died between fork and prctl (the child was then adopted: its parent pid changed)."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only calls it

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every non-empty secret replaced by `REDACTED`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "REDACTED")
    return text


def redacted_error(exc: CommandError, secrets: Sequence[str]) -> CommandError:
    """The same failure with the secrets out of its argv, stdout and stderr (and so out of its message)."""
    return CommandError([redact(a, secrets) for a in exc.argv], exc.returncode, redact(exc.stdout, secrets),
                        redact(exc.stderr, secrets))


@dataclass
class RecordingRunner(Runner):
    """A runner for unit tests: records argv lists and answers from a table instead of running them.

    `answers` maps a predicate on argv to a Result factory; unmatched commands succeed with no output.
    """

    calls: list[list[str]] = field(default_factory=list)
    stdins: list[str | None] = field(default_factory=list)  # each call's stdin (`input`), in the order of `calls`
    answers: list[tuple[Callable[[list[str]], bool], Callable[[list[str]], Result]]] = field(default_factory=list)

    def pipe(self, producer, consumer, *, timeout=None) -> Result:
        return self.run([*producer, "|", *consumer], timeout=timeout)

    def run(self, argv, *, check=True, input=None, timeout=None, capture=True, env_extra=None, secrets=()) -> Result:
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        self.stdins.append(input)
        for match, answer in self.answers:
            if match(argv):
                result = answer(argv)
                break
        else:
            result = Result(argv, 0)
        if check and result.returncode != 0:
            raise redacted_error(CommandError(argv, result.returncode, result.stdout, result.stderr), secrets)
        return result
