"""The lock and registry folders root writes into (issue 40, item 1): /run/lock/swarm-emu sits in the world-writable
/run/lock, $SWARM_LOCK_DIR and the per-user temp folder anywhere, the host engine's queue registry in /run. A user
who made the folder first, or planted a link in it, must not get root to write through it: a link is never
followed (its target unchanged, one clear error), a folder owned by another uid or writable by group/others is
refused, never repaired. The other uid is made with os.chown (root only)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from swarm.errors import RuntimeFailure, SwarmError
from swarm.runtime import locks
from swarm.runtime.backends.compose import hostengine as he

OTHER_UID = 65534  # nobody
need_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_text("precious\n")
    path.chmod(0o600)
    return path


def lock_folder(tmp_path: Path, monkeypatch, mode: int = 0o700) -> Path:
    d = tmp_path / "locks"
    d.mkdir()
    d.chmod(mode)
    monkeypatch.setenv("SWARM_LOCK_DIR", str(d))
    return d


def test_a_planted_link_in_the_lock_folder_is_not_followed(tmp_path, monkeypatch, victim):
    d = lock_folder(tmp_path, monkeypatch)
    (d / "swarm-rel-x.lock").symlink_to(victim)
    with pytest.raises(RuntimeFailure, match=r"swarm-rel-x\.lock.*symbolic link"):
        with locks.swarm_operation("rel-x", "down"):
            pass
    assert victim.read_text() == "precious\n"
    (d / "host.lock").symlink_to(victim)
    with pytest.raises(RuntimeFailure, match=r"host\.lock"):
        with locks.host_lock():
            pass
    assert victim.read_text() == "precious\n"


def test_a_hard_link_in_the_lock_folder_is_not_written_through(tmp_path, monkeypatch, victim):
    d = lock_folder(tmp_path, monkeypatch)
    os.link(victim, d / "swarm-rel-x.lock")
    with pytest.raises(RuntimeFailure, match=r"swarm-rel-x\.lock.*one link"):
        with locks.swarm_operation("rel-x", "up"):
            pass
    assert victim.read_text() == "precious\n"


@need_root
def test_a_lock_folder_of_another_user_is_refused_and_left_alone(tmp_path, monkeypatch, victim):
    d = lock_folder(tmp_path, monkeypatch)
    (d / "swarm-rel-x.lock").symlink_to(victim)
    os.chown(d, OTHER_UID, OTHER_UID)
    with pytest.raises(RuntimeFailure, match=rf"lock folder {d}: is owned by uid {OTHER_UID}, not by this user"):
        with locks.swarm_operation("rel-x", "down"):
            pass
    assert victim.read_text() == "precious\n"
    st = d.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (OTHER_UID, 0o700)  # never chowned nor chmodded


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_lock_folder_writable_by_others_is_refused(tmp_path, monkeypatch, victim, mode):
    d = lock_folder(tmp_path, monkeypatch, mode)
    with pytest.raises(RuntimeFailure, match=rf"{d}: is writable by group or others \(mode {mode:04o}\)"):
        with locks.host_lock():
            pass
    assert not (d / "host.lock").exists() and (d.stat().st_mode & 0o7777) == mode


def test_a_lock_folder_that_is_a_link_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "locks").symlink_to(real)
    monkeypatch.setenv("SWARM_LOCK_DIR", str(tmp_path / "locks"))
    with pytest.raises(RuntimeFailure, match=r"locks: is a symbolic link"):
        with locks.run_lock(tmp_path):
            pass
    assert list(real.iterdir()) == []


def test_a_lock_folder_in_a_folder_anyone_may_rename_in_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # not sticky: anyone could swap our folder for theirs
    monkeypatch.setenv("SWARM_LOCK_DIR", str(parent / "locks"))
    with pytest.raises(RuntimeFailure, match=r"parent is writable by others and not sticky"):
        with locks.host_lock():
            pass


@need_root
def test_the_run_lock_folder_made_first_by_a_user_is_refused(tmp_path, monkeypatch, victim):
    """/run/lock as it is on a host (root, 1777) with swarm-emu made by a local user after a reboot."""
    run_lock = tmp_path / "run-lock"
    run_lock.mkdir()
    run_lock.chmod(0o1777)
    planted = run_lock / "swarm-emu"
    planted.mkdir(mode=0o755)
    (planted / "swarm-rel-x.lock").symlink_to(victim)
    os.chown(planted, OTHER_UID, OTHER_UID)
    monkeypatch.delenv("SWARM_LOCK_DIR", raising=False)
    monkeypatch.setattr(locks, "RUN_LOCK", run_lock)
    with pytest.raises(RuntimeFailure, match=rf"{planted}: is owned by uid {OTHER_UID}"):
        with locks.swarm_operation("rel-x", "down"):
            pass
    assert victim.read_text() == "precious\n"


def test_a_fresh_lock_folder_is_made_0700_and_works(tmp_path, monkeypatch):
    d = tmp_path / "fresh" / "locks"
    monkeypatch.setenv("SWARM_LOCK_DIR", str(d))
    with locks.swarm_operation("rel-x", "up"):
        assert (d / "swarm-rel-x.lock").read_text().split()[0] == "up"
    assert d.stat().st_mode & 0o777 == 0o700 and (d / "swarm-rel-x.lock").stat().st_mode & 0o777 == 0o600


def test_the_queue_registry_never_writes_through_a_planted_link(tmp_path, monkeypatch, victim):
    q = tmp_path / "run"
    q.mkdir(mode=0o700)
    (q / "linkd-queues.lock").symlink_to(victim)
    monkeypatch.setattr(he, "QUEUE_DIR", q)
    with pytest.raises(SwarmError, match=r"linkd-queues\.lock.*symbolic link"):
        with he.queue_registry():
            pass
    assert victim.read_text() == "precious\n"


@need_root
def test_a_queue_registry_folder_of_another_user_is_refused(tmp_path, monkeypatch, victim):
    q = tmp_path / "run"
    q.mkdir(mode=0o755)
    (q / "linkd-queues.json").symlink_to(victim)
    os.chown(q, OTHER_UID, OTHER_UID)
    monkeypatch.setattr(he, "QUEUE_DIR", q)
    with pytest.raises(SwarmError, match=rf"{q}: is owned by uid {OTHER_UID}"):
        with he.queue_registry() as reg:
            reg["x"] = {"base": 1000, "count": 1}
    assert victim.read_text() == "precious\n"


@need_root
def test_a_swarm_state_folder_of_another_user_is_refused(tmp_path, victim):
    from swarm.runtime.state import write_state
    folder = tmp_path / ".swarm" / "rel-x"
    folder.mkdir(parents=True, mode=0o755)
    (folder / f".state.json.{os.getpid()}.tmp").symlink_to(victim)
    os.chown(folder, OTHER_UID, OTHER_UID)
    with pytest.raises(RuntimeFailure, match=rf"swarm state folder {folder}: is owned by uid {OTHER_UID}"):
        write_state(tmp_path, "rel-x", {"backend": "netns"})
    assert victim.read_text() == "precious\n" and not (folder / "state.json").exists()
    assert folder.stat().st_mode & 0o777 == 0o755


def test_the_state_file_is_not_written_through_a_planted_link(tmp_path, victim):
    from swarm.runtime.state import write_state
    folder = tmp_path / ".swarm" / "rel-x"
    folder.mkdir(parents=True, mode=0o755)
    (folder / f".state.json.{os.getpid()}.tmp").symlink_to(victim)
    write_state(tmp_path, "rel-x", {"backend": "netns"})
    assert victim.read_text() == "precious\n"
    assert folder.stat().st_mode & 0o777 == 0o700 and (folder / "state.json").read_text().startswith("{")


def test_swarm_down_through_a_planted_link_is_one_line_and_changes_nothing(tmp_path, monkeypatch, victim):
    from test_reliability import cli
    d = lock_folder(tmp_path, monkeypatch)
    (d / "swarm-rel-lockx.lock").symlink_to(victim)
    code, _out, err = cli("down", "rel-lockx")
    assert code == 1 and err.strip().splitlines() == [
        f"error: {d}/swarm-rel-lockx.lock: cannot open it (a symbolic link); refusing to use it"], err
    assert victim.read_text() == "precious\n"
