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
from pathlib import Path
from typing import Callable, Iterator

from swarm.errors import RuntimeFailure, SpecError
from swarm.observe.events import EVENTS_FILE
from swarm.runtime.backends import REGISTRY, get_backend, swarm_dir
from swarm.runtime.host import release_settings
from swarm.runtime.probe import capabilities
from swarm.runtime.runner import Runner
from swarm.spec.model import check_swarm_name
from swarm.runtime.locks import swarm_operation
from swarm.runtime.private import open_private, own_private_dir


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
    own_private_dir(path.parent, "swarm state folder")
    tmp = path.with_name(f".state.json.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a crashed writer's, with our pid reused
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
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
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StateError(f"{path}: unreadable swarm state ({type(exc).__name__}: {str(exc)[:80]}); "
                         f"`swarm down {name}` removes what the swarm's labels name") from None
    if (not isinstance(state, dict) or not isinstance(state.get("spec"), dict) or not isinstance(state.get("backend"), str)
            or state["backend"] not in REGISTRY):
        raise StateError(f"{path}: not a swarm state (no spec or backend); "
                         f"`swarm down {name}` removes what the swarm's labels name")
    other = next((n for n in (state.get("name"), state["spec"].get("name")) if n is not None and n != name), None)
    if other is not None:  # copied from another swarm's folder: obeying it would act on that swarm
        raise StateError(f"{path}: the state of swarm {str(other)[:40]!r}, not of {name!r}; refusing to use it "
                         f"(`swarm down {name}` removes what the swarm's labels name)")
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


def keep_events(workdir: Path, name: str) -> Path | None:
    """Copy the swarm's event log into the run folder that started it (`<run>/events/<name>.jsonl`,
    appended: a sweep brings a name up once per size) before its state directory goes, so a run keeps what
    happened to its swarms. A swarm no run started keeps nothing; never fails the caller. Returns the copy."""
    try:
        state = read_state(workdir, name)
    except StateError:
        return None
    owner = (state or {}).get("owner")
    src = swarm_dir(workdir, name) / EVENTS_FILE
    if not isinstance(owner, str) or not owner or not (Path(owner) / "experiment.yaml").is_file() or not src.is_file():
        return None  # only a run folder (it holds its experiment) receives a log
    dest = Path(owner) / "events" / f"{name}.jsonl"
    try:
        dest.parent.mkdir(exist_ok=True)
        if dest.parent.is_symlink():
            return None
        fd = os.open(dest, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "ab") as out, open(src, "rb") as log:
            shutil.copyfileobj(log, out, 1 << 20)
    except OSError:
        return None
    return dest


def forget_state(workdir: Path, name: str) -> bool:
    """Delete the swarm's state directory (its event log copied to the run that started it first); True if
    there was one."""
    d = swarm_dir(workdir, name)
    if not d.exists():
        return False
    keep_events(workdir, name)
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
    removed += release_settings(runner, name)  # host settings no other swarm of ours needs: back as they were
    if forget_state(workdir, name):
        removed.append("state")
    return removed


def wipe(runner: Runner | None = None, workdir: Path | None = None,
         warn: Callable[[str], None] = _warn) -> list[str]:
    """Remove the swarms of this workdir (those whose state is in its .swarm/), each as `down NAME` does, and
    their host settings. Why not everything every backend finds: the labels and namespaces are host-wide, so that
    would take down another checkout's swarms (a CI run's) too; those are named by `leftovers` and removed only
    by name (`swarm wipe NAME`)."""
    runner = runner or Runner()
    workdir = workdir or default_workdir()
    removed: list[str] = []
    failures: list[str] = []
    for name in state_names(workdir):
        try:
            removed += [f"{name}: {r}" for r in down_by_name(name, runner, workdir, warn)]
        except (RuntimeFailure, SpecError) as exc:  # one swarm failing must not keep the others in place
            failures.append(f"{name}: {exc}")
    if failures:
        raise RuntimeFailure(f"wipe removed {', '.join(removed) or 'nothing'} but failed: {'; '.join(failures)}")
    return removed
