"""The cFS image (content-addressed over the user's install tree, FROM the node image) and the host's
ulimits the cFS nodes get: the runtime half of swarm/cfs (node.py holds the pure spec checks and plans)."""
from __future__ import annotations

import os
import resource
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from swarm.cfs.node import (_BUILD_TIMEOUT, _CAP_SYS_RESOURCE, _RLIMITS, CFS_DOCKERFILE, CFS_ENTRY,
                            CFS_IMAGE_REPO, RUNTIME_FILES, WANTED_ULIMITS, clamp_ulimits)
from swarm.errors import CommandError, RuntimeFailure
from swarm.runtime.image import files_digest, tree_files
from swarm.runtime.runner import Runner


def host_ulimits() -> tuple[dict[str, int], list[str]]:
    """WANTED_ULIMITS as far as this host allows (probed: CAP_SYS_RESOURCE, our hard limits)."""
    can_raise = False
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                can_raise = bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    except OSError:
        pass
    hard = {}
    for name, which in _RLIMITS.items():
        value = resource.getrlimit(which)[1]
        hard[name] = -1 if value == resource.RLIM_INFINITY else value
    return clamp_ulimits(WANTED_ULIMITS, can_raise, hard)


# -------------------------------------------------------------------------------------------- image


def install_files(install: str | os.PathLike) -> list[Path]:
    """Files of an install tree that go into the image (all but the PSP's run-time files)."""
    return [p for p in tree_files(install) if p.name not in RUNTIME_FILES]


def cfs_image_tag(repo_root: str | os.PathLike, node_image: str, install: str | os.PathLike) -> str:
    """`swarm-emu/cfs:<hash>` over the node image tag, the Dockerfile and entry script (not the folder's
    README) and the install tree's files."""
    root = Path(repo_root).resolve()
    digest = files_digest(root, [root / CFS_DOCKERFILE, root / CFS_ENTRY])
    digest.update(b"node-image:" + node_image.encode())
    inst = Path(install).resolve()
    digest.update(b"install:")
    digest.update(files_digest(inst, install_files(inst)).digest())
    return f"{CFS_IMAGE_REPO}:{digest.hexdigest()[:12]}"


def cfs_build_argv(repo_root: str | os.PathLike, tag: str, node_image: str, context: str | os.PathLike) -> list[str]:
    """`docker build` of the cFS image from a context holding the install tree as cpu1/ (pure)."""
    return ["docker", "build", "--force-rm", "-f", str(Path(repo_root) / CFS_DOCKERFILE), "-t", tag,
            "--build-arg", f"NODE_IMAGE={node_image}",
            "--label", "io.swarm-emu.managed=true", "--label", f"io.swarm-emu.content-hash={tag.split(':')[1]}",
            str(context)]


def ensure_cfs_image(runner: Runner, repo_root: str | os.PathLike, node_image: str, install: str,
                     progress: Callable[[str], None] = lambda _m: None) -> str:
    """Make sure the cFS image for `install` on `node_image` exists (build it if not); return its tag."""
    tag = cfs_image_tag(repo_root, node_image, install)
    if runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], check=False).ok:
        progress(f"cFS image {tag} for {install} is up to date")
        return tag
    progress(f"building cFS image {tag} from {install}")
    with tempfile.TemporaryDirectory(prefix="swarm-cfs-") as ctx:
        src = Path(install).resolve()
        shutil.copytree(src, Path(ctx) / "cpu1", symlinks=True,
                        ignore=lambda _d, names: [n for n in names if n in RUNTIME_FILES])
        shutil.copy2(Path(repo_root) / CFS_ENTRY, Path(ctx) / "cfs-entry.sh")
        try:
            runner.run(cfs_build_argv(repo_root, tag, node_image, ctx), timeout=_BUILD_TIMEOUT)
        except CommandError as err:
            tail = "\n".join((err.stdout + "\n" + err.stderr).strip().splitlines()[-20:])
            raise RuntimeFailure(f"docker build of {tag} failed (exit {err.returncode}); last output:\n{tail}") from None
    return tag


# ------------------------------------------------------------------------------------------ compose
