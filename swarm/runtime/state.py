"""A swarm's state on disk and what `down NAME`, `wipe` and `wipe --dry-run` do knowing only names.

State lives in <workdir>/.swarm/<name>/state.json, written (atomically) before anything is created, so `down`
works after a crash; backends can also find what they made from labels and name prefixes alone. Apart from
the `Swarm` facade so that the CLI's down/wipe/list and the facade share one reader and writer.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator

from swarm.errors import RuntimeFailure, SpecError
from swarm.runtime.backends import REGISTRY, get_backend, swarm_dir
from swarm.runtime.probe import capabilities
from swarm.runtime.runner import Runner
from swarm.spec.model import check_swarm_name
from swarm.runtime.locks import swarm_operation


#: Who starts the swarms this process brings up: the folder of the experiment run in progress ("" outside one).
#: Recorded in each swarm's state, so that `--resume` of that run knows a swarm its crash left up as its own
#: and replaces it, and never touches a swarm somebody else started.
OWNER: ContextVar[str] = ContextVar("swarm_owner", default="")


def default_workdir() -> Path:
    """The project checkout (holds images/, flightsw/, compose/): $SWARM_WORKDIR, the source tree, or cwd."""
    if os.environ.get("SWARM_WORKDIR"):
        return Path(os.environ["SWARM_WORKDIR"]).resolve()
    src = Path(__file__).resolve().parents[2]
    return src if (src / "flightsw").is_dir() else Path.cwd()


def _state_file(workdir: Path, name: str) -> Path:
    return swarm_dir(workdir, name) / "state.json"


def write_state(workdir: Path, name: str, state: dict) -> None:
    """Atomically: a temporary file in the same directory, fsynced, renamed over state.json, the directory
    fsynced; a crash leaves either the old or the new state, never a partial one."""
    path = _state_file(workdir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".state.json.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(state, indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateError(SpecError):
    """A state file that cannot be read or is not a state (corrupt, partial, edited by hand)."""


def _load_state(path: Path, name: str) -> dict:
    try:
        state = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"{path}: unreadable swarm state ({type(exc).__name__}: {str(exc)[:80]}); "
                         f"`swarm down {name}` removes what the swarm's labels name") from None
    if not isinstance(state, dict) or not isinstance(state.get("spec"), dict) or state.get("backend") not in REGISTRY:
        raise StateError(f"{path}: not a swarm state (no spec or backend); "
                         f"`swarm down {name}` removes what the swarm's labels name")
    return state


def read_state(workdir: Path, name: str) -> dict | None:
    """The state of swarm `name`, None when it has none; StateError (one line naming the file) when it is
    unreadable."""
    path = _state_file(workdir, name)
    return _load_state(path, name) if path.exists() else None


def _warn(message: str) -> None:
    logging.getLogger("swarm").warning(message)


def all_states(workdir: Path, warn: Callable[[str], None] = _warn) -> Iterator[tuple[str, dict]]:
    """(name, state) of every swarm with a readable state file; an unreadable one is reported through `warn`
    (one line naming the file) and skipped, so it cannot hide the other swarms."""
    root = workdir / ".swarm"
    for path in sorted(root.glob("*/state.json")) if root.exists() else []:
        try:
            yield path.parent.name, _load_state(path, path.parent.name)
        except StateError as exc:
            warn(str(exc))


def forget_state(workdir: Path, name: str) -> bool:
    """Delete the swarm's state directory; True if there was one."""
    d = swarm_dir(workdir, name)
    if not d.exists():
        return False
    for attempt in range(5):  # a node process that is still exiting may write one last file
        try:
            shutil.rmtree(d)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.2 * (attempt + 1))
    shutil.rmtree(d)
    return True


def state_names(workdir: Path) -> list[str]:
    """Names of the swarms with a state directory holding a state file, readable or not."""
    root = workdir / ".swarm"
    return sorted(p.parent.name for p in root.glob("*/state.json")) if root.exists() else []


def leftovers(runner: Runner | None = None, workdir: Path | None = None) -> dict[str, list[str]]:
    """{swarm: [what]} of everything `wipe` would remove: every backend's labelled or marked resources and
    every swarm's state (nothing is removed)."""
    runner = runner or Runner()
    caps = capabilities()
    workdir = workdir or default_workdir()
    found: dict[str, list[str]] = {}
    for name in REGISTRY:
        for swarm, what in get_backend(name, runner, caps, workdir).leftovers(None):
            found.setdefault(swarm, []).append(f"{name} {what}")
    for swarm in state_names(workdir):
        found.setdefault(swarm, []).append(f"state {swarm_dir(workdir, swarm)}")
    return dict(sorted(found.items()))


def down_by_name(name: str, runner: Runner | None = None, workdir: Path | None = None,
                 warn: Callable[[str], None] = _warn, keep_compose: bool = False) -> list[str]:
    """Remove everything of swarm `name` knowing only its name: its state's backend (every backend when the
    state is missing or unreadable, reported through `warn`), then its state."""
    runner = runner or Runner()
    workdir = workdir or default_workdir()
    check_swarm_name(name)  # before any path or label filter is built from it
    with swarm_operation(name, "down", cancel_up=True, message=warn):  # an `up` in progress is cancelled first
        return _down_backends(name, runner, workdir, warn, keep_compose)


def _down_backends(name: str, runner: Runner, workdir: Path, warn: Callable[[str], None],
                   keep_compose: bool) -> list[str]:
    try:
        state = read_state(workdir, name)
    except StateError as exc:  # removed all the same: the backends find the swarm's resources by its labels
        warn(str(exc))
        state = None
    caps = capabilities()
    removed: list[str] = []
    for name_ in [state["backend"]] if state else list(REGISTRY):
        backend = get_backend(name_, runner, caps, workdir)
        if keep_compose:
            backend.keep_compose = True  # the compose backend's; ignored by the others
        removed += backend.down(name)
    if forget_state(workdir, name):
        removed.append("state")
    return removed


def wipe(runner: Runner | None = None, workdir: Path | None = None) -> list[str]:
    """Remove everything every backend made for any swarm, and all swarm state."""
    runner = runner or Runner()
    caps = capabilities()
    workdir = workdir or default_workdir()
    removed: list[str] = []
    failures: list[str] = []
    for name in REGISTRY:  # one backend failing must not keep the others' leftovers in place
        try:
            removed += [f"{name}: {r}" for r in get_backend(name, runner, caps, workdir).wipe()]
        except RuntimeFailure as exc:
            failures.append(f"{name}: {exc}")
    for other in state_names(workdir):
        forget_state(workdir, other)  # unreadable states too: wipe is what clears them
        removed.append(f"state of {other}")
    if failures:
        raise RuntimeFailure(f"wipe removed {', '.join(removed) or 'nothing'} but failed: {'; '.join(failures)}")
    return removed
