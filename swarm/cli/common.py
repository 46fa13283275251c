"""What the `swarm` commands share: the progress bar fed by backends, the usage error with its exit code, and the
choices and help text that come from the registries (backends, link engines), so a new one shows up by itself."""
from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from netem.engines import ENGINES
from swarm.cli.console import err
from swarm.errors import SwarmError
from swarm.runtime.backends import REGISTRY, TRAITS


class ProgressBar:
    """A rich progress bar fed by backends' (done, total, what) callbacks; quiet when not a terminal."""

    def __init__(self, title: str):
        self.bar = Progress(TextColumn(f"[bold]{title}[/] {{task.description}}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=err, transient=False)
        self.task: TaskID | None = None

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.task is None:
            self.task = self.bar.add_task(what, total=total)
        self.bar.update(self.task, completed=done, total=total, description=what)


def _either(names: list[str]) -> str:
    """'a, b or c': choices named in help text, from a registry."""
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)



BACKENDS = sorted(REGISTRY)
ONE_HOST_BACKENDS = _either([n for n in BACKENDS if not TRAITS[n].multi_host])
ENGINE_CHOICES = _either(list(ENGINES))


class SwarmErrorExit(SwarmError):
    """A CLI usage error with its own exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code

