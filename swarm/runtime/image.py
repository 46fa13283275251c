"""The spacecraft node image: a content-addressed tag, and building it only when its inputs changed.

The tag is `swarm-emu/node:<hash>`, where the hash covers every file under `images/node/` and
`flightsw/` (path and bytes). `ensure_image` returns at once when that tag exists, so a second
`swarm up` with nothing changed does not rebuild; otherwise it makes sure the base image exists
(`images/bootstrap-base.sh`: present, pulled, or bootstrapped with debootstrap) and builds the image
with the repository root as context. Every command goes through the runner that is passed in.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Iterable

from swarm.errors import CommandError, RuntimeFailure
from swarm.runtime.locks import build_lock
from swarm.runtime.runner import Runner

IMAGE_REPO = "swarm-emu/node"
LATEST_TAG = f"{IMAGE_REPO}:latest"
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
#: Folders (relative to the repository root) whose content goes into the image and into its hash.
CONTEXT_DIRS = ("images/node", "flightsw")
DOCKERFILE = "images/node/Dockerfile"
BOOTSTRAP_SCRIPT = "images/bootstrap-base.sh"
#: Where Debian and Ubuntu keep CA certificates an administrator added to the host's trust store.
LOCAL_CA_DIR = Path("/usr/local/share/ca-certificates")

_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}
_BUILD_TIMEOUT = 3600.0
_BOOTSTRAP_TIMEOUT = 1800.0
_TAIL_LINES = 20

Progress = Callable[[str], None]


def image_context_files(repo_root: str | os.PathLike) -> list[Path]:
    """All files that make up the node image, sorted: everything under images/node and flightsw,
    except __pycache__ folders and compiled Python files. Paths are absolute."""
    return tree_files(repo_root, CONTEXT_DIRS)


def tree_files(root_dir: str | os.PathLike, rel_dirs: Iterable[str] = (".",)) -> list[Path]:
    """Files under the folders `rel_dirs` of `root_dir` (default: all of it), sorted by relative path,
    without __pycache__ folders and compiled Python files; a symlink to a folder counts as a file."""
    root = Path(root_dir).resolve()
    files: list[Path] = []
    for rel_dir in rel_dirs:
        top = root / rel_dir
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            # A symlink to a folder is copied into the image as a link, so it counts as a file.
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and d not in links]
            for name in filenames + links:
                if Path(name).suffix in _SKIP_SUFFIXES:
                    continue
                files.append(Path(dirpath) / name)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def content_hash(repo_root: str | os.PathLike, base_image: str = DEFAULT_BASE_IMAGE) -> str:
    """First 12 hex digits of a sha256 over the relative path and bytes of each image context file.

    A non-default `base_image` is mixed in too, so an image built on another base gets another tag.
    """
    root = Path(repo_root).resolve()
    digest = files_digest(root, image_context_files(root))
    if base_image != DEFAULT_BASE_IMAGE:
        digest.update(b"base-image:" + base_image.encode())
    return digest.hexdigest()[:12]


def files_digest(root: Path, files: Iterable[Path]) -> "hashlib._Hash":
    """sha256 over the path (relative to `root`) and bytes (a symlink: its target) of each file, in order."""
    digest = hashlib.sha256()
    for path in files:
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        rel = path.relative_to(root).as_posix().encode()
        # Length-prefixed fields: no two different file sets can feed the same byte stream.
        digest.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
        digest.update(data)
    return digest


def image_tag(repo_root: str | os.PathLike, base_image: str = DEFAULT_BASE_IMAGE) -> str:
    """The node image tag for the repository as it is now: `swarm-emu/node:<content hash>`."""
    return f"{IMAGE_REPO}:{content_hash(repo_root, base_image)}"


def extra_ca_certs(paths: Iterable[str | os.PathLike] | None = None) -> str:
    """PEM text of the CA certificates the host trusts beyond the public ones, for the image build.

    Where PyPI is only reachable through a TLS-intercepting proxy, the host trusts the proxy's CA and
    pip inside the build must too. By default these are the `*.crt` files in
    /usr/local/share/ca-certificates; `$SWARM_EXTRA_CA_CERTS` (PEM files separated by `:`) overrides
    that, and an empty value turns it off. Returns "" when there is nothing to add.
    """
    if paths is None:
        env = os.environ.get("SWARM_EXTRA_CA_CERTS")
        if env is not None:
            paths = [p for p in env.split(os.pathsep) if p]
        elif LOCAL_CA_DIR.is_dir():
            paths = sorted(LOCAL_CA_DIR.rglob("*.crt"))
        else:
            paths = []
    chunks = []
    for p in paths:
        try:
            text = Path(p).read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        if "-----BEGIN CERTIFICATE-----" in text:
            chunks.append(text.strip())
    return "\n".join(chunks)


def build_argv(
    repo_root: str | os.PathLike, tag: str, content: str, base_image: str = DEFAULT_BASE_IMAGE, ca_pem: str = ""
) -> list[str]:
    """The `docker build` command for the node image (pure: no I/O)."""
    root = Path(repo_root)
    argv = [
        "docker", "build",
        "--force-rm",  # a failed step must not leave its container behind (legacy builder keeps it)
        "-f", str(root / DOCKERFILE),
        "-t", tag,
        "-t", LATEST_TAG,
        "--label", "io.swarm-emu.managed=true",
        "--label", f"io.swarm-emu.content-hash={content}",
    ]
    if base_image != DEFAULT_BASE_IMAGE:
        argv += ["--build-arg", f"BASE_IMAGE={base_image}"]
    if ca_pem:
        argv += ["--build-arg", f"EXTRA_CA_CERTS={ca_pem}"]
    argv.append(str(root))
    return argv


def _tail(err: CommandError, n: int = _TAIL_LINES) -> str:
    lines = (err.stdout + "\n" + err.stderr).strip().splitlines()
    return "\n".join(lines[-n:])


def ensure_image(
    runner: Runner,
    repo_root: str | os.PathLike,
    progress: Progress | None = None,
    rebuild: bool = False,
    base_image: str | None = None,
) -> str:
    """Make sure the node image for the repository's current content exists; return its tag.

    Returns at once if `docker image inspect <tag>` succeeds (unless `rebuild`). Otherwise runs
    images/bootstrap-base.sh for the base image (`base_image`, default `$BASE_IMAGE` or
    debian:bookworm-slim), then `docker build`, tagging `swarm-emu/node:<hash>` and `:latest`.
    `progress` gets one-line status messages. A failed step raises RuntimeFailure with the last
    lines of its output.
    """
    say: Progress = progress or (lambda _msg: None)
    root = Path(repo_root).resolve()
    base = base_image or os.environ.get("BASE_IMAGE") or DEFAULT_BASE_IMAGE
    content = content_hash(root, base)
    tag = f"{IMAGE_REPO}:{content}"

    def present() -> bool:
        return not rebuild and runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], check=False).ok

    if present():
        say(f"image {tag} is up to date")
        return tag
    with build_lock("node-image"):
        if present():  # built by the process we waited for
            say(f"image {tag} is up to date")
            return tag
        return _build(runner, root, base, tag, content, say)


def _build(runner: Runner, root: Path, base: str, tag: str, content: str, say: Progress) -> str:
    """Bootstrap the base image if missing, then `docker build` the node image; its tag."""
    say(f"checking base image {base}")
    try:
        runner.run(["bash", str(root / BOOTSTRAP_SCRIPT), base], timeout=_BOOTSTRAP_TIMEOUT)
    except CommandError as err:
        raise RuntimeFailure(
            f"could not provide base image {base} (exit {err.returncode}); last output:\n{_tail(err)}"
        ) from None

    ca_pem = extra_ca_certs()
    if ca_pem:
        say(f"build trusts {ca_pem.count('BEGIN CERTIFICATE')} extra CA certificate(s) of this host for pip")
    say(f"building image {tag} (a few minutes the first time)")
    started = time.monotonic()
    try:
        runner.run(build_argv(root, tag, content, base, ca_pem), timeout=_BUILD_TIMEOUT)
    except CommandError as err:
        raise RuntimeFailure(
            f"docker build of {tag} failed (exit {err.returncode}); last output:\n{_tail(err)}"
        ) from None
    say(f"built {tag} in {time.monotonic() - started:.0f} s")
    return tag
