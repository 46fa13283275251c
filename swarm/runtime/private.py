"""Folders and files the framework (often as root) writes where another user might have been first.

Why: the lock folder lives under the world-writable /run/lock (or $SWARM_LOCK_DIR, or the temp folder); a
user who makes that folder first and plants `swarm-<name>.lock -> /etc/whatever` would have root overwrite
the link's target. So such a folder is used only when it is a real directory (not a link), owned by this
process's uid and not writable by group or others (mode 0700 when we make it; 0755 made by us is accepted),
in a parent that others cannot rename it out of (not world-writable, or sticky like /tmp). Anything
else is refused with one line naming the path; the framework never chmods or chowns someone else's folder.
Files in it are opened with O_NOFOLLOW and must be plain, singly linked, ours.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from swarm.errors import RuntimeFailure

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def private_dir(path: Path, what: str) -> Path:
    """`path`, made 0700 (with its parents) when missing and checked before use (see the module text); a
    folder that fails is refused: RuntimeFailure naming `what`, the path and the fault."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:  # a dangling link or a file where the folder should be
        pass
    except OSError as err:
        raise RuntimeFailure(f"{what} {path}: cannot create it ({err.strerror})") from None
    fault = dir_fault(path)
    if fault:
        raise RuntimeFailure(f"{what} {path}: {fault}; refusing to use it (remove it, or point elsewhere)")
    return path


def own_private_dir(path: Path, what: str) -> Path:
    """private_dir for a folder this user may already have made with a looser mode (the swarm's state folder in
    the checkout): a real directory of ours is set to 0700 first; anyone else's is refused as it is."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        os.chmod(path, 0o700, follow_symlinks=False)
    return private_dir(path, what)


def dir_fault(path: Path) -> str:
    """What makes `path` unsafe as a private folder of this uid ("" when nothing)."""
    try:
        st = os.lstat(path)
        parent = os.stat(path.parent)
    except OSError as err:
        return f"cannot inspect it ({err.strerror})"
    uid = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & _OTHERS_WRITE:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX:
        return f"its parent is writable by others and not sticky (mode {stat.S_IMODE(parent.st_mode):04o})"
    return ""


def open_private(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open of a file in a private folder that never follows a link (O_NOFOLLOW) nor takes a terminal, and
    refuses anything but a plain file of ours with one link (a hard link to another file would be written
    through): RuntimeFailure naming the path."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC, mode)
    except OSError as err:
        raise RuntimeFailure(f"{path}: cannot open it ({'a symbolic link' if os.path.islink(path) else err.strerror})"
                             "; refusing to use it") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
        os.close(fd)
        raise RuntimeFailure(f"{path}: not a plain file of this user with one link; refusing to use it")
    return fd


def write_private_text(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (0600, also when it existed with a looser mode), never
    through a link: compose files and a run's experiment.yaml can carry a node's `env:` (tokens, keys)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(fd, 0o600)
        f.write(text)
