"""The DTN agents' programs and node image (runtime): each agent's programs built once into a host cache by its
Install's script (swarm.dtn.agents.base.Install), the ltp CLA built with cargo, and the node image with both
layered on the framework's (rebuilt when its inputs change)."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from swarm.dtn.agents import Install
from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.runtime.image import files_digest
from swarm.runtime.runner import Runner

BUILD_TIMEOUT = 3600.0
LTPCLA_MANIFEST = "flightsw/ltpcla/Cargo.toml"


def ltpcla_binary(workdir: Path, runner: Runner, message: Callable[[str], None] = lambda m: None) -> Path:
    """swarm-ltpcla for this host: $SWARM_LTPCLA, else where `make ltpcla` builds it (built now when missing)."""
    env = os.environ.get("SWARM_LTPCLA")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swarm-emu" / "ltpcla-target"
    binary = base / "release" / "swarm-ltpcla"
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not binary.exists() and not os.access(cargo, os.X_OK):
        raise SpecError("dtn.cla 'ltp': swarm-ltpcla is not built and cargo is missing (install Rust, then `make ltpcla`)")
    if not binary.exists():
        message("building swarm-ltpcla (cla: ltp) from the Cargo registry: ~2 min, once")
    try:  # cargo returns at once when nothing changed
        runner.run(["nice", "-n", "10", cargo, "build", "-q", "--release", "--locked", "--manifest-path",
                    str(Path(workdir) / LTPCLA_MANIFEST)], env_extra={"CARGO_TARGET_DIR": str(base)}, timeout=BUILD_TIMEOUT)
    except CommandError as err:
        tail = "\n".join((err.stdout + "\n" + err.stderr).strip().splitlines()[-10:])
        raise RuntimeFailure(f"building swarm-ltpcla failed (exit {err.returncode}):\n{tail}") from None
    return binary


def ensure_binaries(runner: Runner, workdir: Path, message: Callable[[str], None], install: Install,
                    title: str) -> Path:
    """The folder holding an agent's programs (`install`) for this host, built the first time."""
    script = Path(workdir) / install.script
    if not any(_cache_root(install).glob("*/.complete")):
        message(f"building {title}: {install.first_build}")
    try:
        res = runner.run(["bash", str(script)], timeout=BUILD_TIMEOUT)
    except CommandError as err:
        if err.returncode == 2:
            raise SpecError(f"dtn: {(err.stderr or err.stdout).strip().splitlines()[-1]}") from None
        tail = "\n".join((err.stdout + "\n" + err.stderr).strip().splitlines()[-15:])
        raise RuntimeFailure(f"building {title} failed (exit {err.returncode}); last output:\n{tail}") from None
    bindir = Path(res.stdout.strip().splitlines()[-1])
    missing = [p for p in install.programs if not (bindir / p).is_file()]
    if missing:
        raise RuntimeFailure(f"building {title}: {bindir}/{missing[0]} is missing")
    return bindir


def built_programs(install: Install) -> Path | None:
    """The newest complete build of an agent's programs on this host, without building (None: none yet)."""
    done = sorted(_cache_root(install).glob("*/.complete"), key=lambda p: p.stat().st_mtime)
    return done[-1].parent / "bin" if done else None


def ltpcla_built() -> Path | None:
    """swarm-ltpcla where `make ltpcla` builds it ($SWARM_LTPCLA if set), if it is there; never builds."""
    env = os.environ.get("SWARM_LTPCLA")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swarm-emu" / "ltpcla-target"
    binary = Path(env) if env else base / "release" / "swarm-ltpcla"
    return binary if binary.is_file() else None


def _cache_root(install: Install) -> Path:
    env = os.environ.get(install.cache_env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(env) if env else base / "swarm-emu" / install.cache


def dtn_image_tag(workdir: Path, node_image: str, bindir: Path, install: Install) -> str:
    """<image repo>:<12 hex of sha256 over the node image tag, the recipe and the programs' BUILD-INFO>."""
    digest = files_digest(Path(workdir), [Path(workdir) / install.dockerfile])
    digest.update(node_image.encode())
    info = bindir.parent / "BUILD-INFO"
    digest.update(info.read_bytes() if info.exists() else (bindir / install.programs[0]).read_bytes())
    return f"{install.image_repo}:{digest.hexdigest()[:12]}"


def dtn_build_argv(workdir: Path, tag: str, node_image: str, context: str) -> list[str]:
    return ["docker", "build", "--force-rm", "-f", str(Path(context) / "Dockerfile"), "-t", tag,
            "--label", "io.swarm-emu.managed=true", "--build-arg", f"NODE_IMAGE={node_image}", context]


def ensure_dtn_image(runner: Runner, workdir: Path, node_image: str, install: Install, title: str,
                     message: Callable[[str], None] = lambda m: None, ltp: bool = False) -> str:
    """The node image plus an agent's programs (built on the host), and with `ltp` swarm-ltpcla, tagged by
    content; built only when missing."""
    bindir = ensure_binaries(runner, workdir, message, install, title)
    ltpcla = ltpcla_binary(workdir, runner, message) if ltp else None
    tag = dtn_image_tag(workdir, node_image, bindir, install)
    if ltpcla is not None:
        tag = f"{tag}-ltp{hashlib.sha256(tag.encode() + ltpcla.read_bytes()).hexdigest()[:8]}"
    if runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], check=False).ok:
        return tag
    message(f"building DTN image {tag} (node image + {title})")
    with tempfile.TemporaryDirectory(prefix="swarm-dtn-") as ctx:
        shutil.copy2(Path(workdir) / install.dockerfile, Path(ctx) / "Dockerfile")
        shutil.copytree(bindir, Path(ctx) / "bin")
        if ltpcla is not None:  # cla: ltp's program, installed beside dtnd
            shutil.copy2(ltpcla, Path(ctx) / "bin" / "swarm-ltpcla")
        try:
            runner.run(dtn_build_argv(workdir, tag, node_image, ctx), timeout=1200)
        except CommandError as err:
            tail = "\n".join((err.stdout + "\n" + err.stderr).strip().splitlines()[-20:])
            raise RuntimeFailure(f"docker build of {tag} failed (exit {err.returncode}); last output:\n{tail}") from None
    return tag


# ------------------------------------------------------------------------------------------- agents


# ----------------------------------------------------------------------------- agents the user builds
def check_install_tree(install: Install, tree: str | None, title: str) -> Path:
    """The install prefix of an agent the user builds (Install.user_tree), checked: its bin/ holds every program
    the adapter runs and its lib/ every library (SpecError naming the first one missing)."""
    if not tree:
        raise SpecError(f"dtn.install: {title} is built by you; give the install prefix of your build "
                        f"(dtn.install, or ${install.cache_env})")
    root = Path(tree)
    if not root.is_dir():
        raise SpecError(f"dtn.install {tree!r}: no such folder")
    for program in install.programs:
        path = root / "bin" / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SpecError(f"dtn.install {tree!r}: bin/{program} is missing (the {title} programs this adapter runs "
                            f"must be in bin/: {', '.join(install.programs[:6])} ...)")
    for lib in install.libraries:
        if not any((root / "lib").glob(f"{lib}*")):
            raise SpecError(f"dtn.install {tree!r}: lib/{lib} is missing (a shared build: configure without "
                            "--disable-shared)")
    for pattern in install.paths:
        if not any(root.glob(pattern)):
            raise SpecError(f"dtn.install {tree!r}: {pattern} is missing (the {title} parts this adapter uses must be "
                            "under the prefix: see docs/DTN.md)")
    return root


def tree_files(root: Path, install: Install | None = None) -> list[Path]:
    """What the image takes of an install tree: bin/, lib/'s shared libraries and every file under the Install's
    `paths` (for a path inside a package: the whole site-packages folder it is in), sorted (the hash's order)."""
    files = {p for p in (root / "bin").iterdir() if p.is_file()}
    files |= {p for p in (root / "lib").glob("*.so*") if p.is_file() or p.is_symlink()}
    for pattern in install.paths if install else ():
        for found in root.glob(pattern):
            top = next((a for a in [found, *found.parents] if a.name == "site-packages"), found)
            files |= {p for p in top.rglob("*") if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.parts}
    return sorted(files)


def tree_image_tag(workdir: Path, node_image: str, root: Path, install: Install) -> str:
    """<image repo>:<12 hex of sha256 over the node image tag, the recipe and every file the image takes>."""
    digest = files_digest(Path(workdir), [Path(workdir) / install.dockerfile])
    digest.update(node_image.encode())
    for path in tree_files(root, install):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
    return f"{install.image_repo}:{digest.hexdigest()[:12]}"


def ensure_tree_image(runner: Runner, workdir: Path, node_image: str, install: Install, tree: str | None, title: str,
                      message: Callable[[str], None] = lambda m: None) -> str:
    """The node image plus the user's build of an agent (its bin/ and shared libraries under /opt/<repo name>),
    tagged by content, built only when missing. The recipe's ldd check failing is bad input (SpecError, one line:
    the program and the library the node image lacks)."""
    root = check_install_tree(install, tree, title)
    tag = tree_image_tag(workdir, node_image, root, install)
    if runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], check=False).ok:
        return tag
    message(f"building DTN image {tag} (node image + {title} from {root})")
    with tempfile.TemporaryDirectory(prefix="swarm-dtn-") as ctx:
        shutil.copy2(Path(workdir) / install.dockerfile, Path(ctx) / "Dockerfile")
        dest = Path(ctx) / install.image_repo.rsplit("/", 1)[-1]
        for path in tree_files(root, install):
            target = dest / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                os.symlink(os.readlink(path), target)
            else:
                shutil.copy2(path, target)
        try:
            runner.run(dtn_build_argv(workdir, tag, node_image, ctx), timeout=1200)
        except CommandError as err:
            mark = f"swarm-{install.image_repo.rsplit('/', 1)[-1]}: "  # the recipe's one line (e.g. swarm-ion: ...)
            said = [ln for ln in (err.stdout + "\n" + err.stderr).splitlines() if mark in ln and "echo" not in ln]
            if said:
                raise SpecError(f"dtn.install {tree!r}: {said[-1].split(mark, 1)[1].strip()}") from None
            tail = "\n".join((err.stdout + "\n" + err.stderr).strip().splitlines()[-20:])
            raise RuntimeFailure(f"docker build of {tag} failed (exit {err.returncode}); last output:\n{tail}") from None
    return tag
