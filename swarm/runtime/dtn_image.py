"""The DTN agents' binaries and node image (runtime): dtn7 built once into a host cache, the ltp CLA built with
cargo, and the node image with both layered on the framework's (rebuilt when its inputs change)."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from swarm.errors import CommandError, RuntimeFailure, SpecError
from swarm.runtime.image import files_digest
from swarm.runtime.runner import Runner

BUILD_SCRIPT = "images/dtn/build.sh"
DOCKERFILE = "images/dtn/Dockerfile"
DTN_IMAGE_REPO = "swarm-emu/dtn"
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


def ensure_binaries(runner: Runner, workdir: Path, message: Callable[[str], None] = lambda m: None) -> Path:
    """The folder holding dtnd & co. for this host, built from the Cargo registry the first time."""
    script = Path(workdir) / BUILD_SCRIPT
    cache = _cache_root()
    if not any(cache.glob("dtn7-*/.complete")):
        message("building dtn7-rs from the Cargo registry (cargo install --locked dtn7): 10-25 min on 2 cores, once")
    try:
        res = runner.run(["bash", str(script)], timeout=BUILD_TIMEOUT)
    except CommandError as err:
        if err.returncode == 2:
            raise SpecError(f"dtn: {(err.stderr or err.stdout).strip().splitlines()[-1]}") from None
        tail = "\n".join((err.stdout + "\n" + err.stderr).strip().splitlines()[-15:])
        raise RuntimeFailure(f"building dtn7-rs failed (exit {err.returncode}); last output:\n{tail}") from None
    bindir = Path(res.stdout.strip().splitlines()[-1])
    if not (bindir / "dtnd").is_file():
        raise RuntimeFailure(f"building dtn7-rs: {bindir}/dtnd is missing")
    return bindir


def _cache_root() -> Path:
    env = os.environ.get("SWARM_DTN7_CACHE")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(env) if env else base / "swarm-emu" / "dtn7"


def dtn_image_tag(workdir: Path, node_image: str, bindir: Path) -> str:
    """swarm-emu/dtn:<12 hex of sha256 over the node image tag, images/dtn/ and the binaries' BUILD-INFO>."""
    digest = files_digest(Path(workdir), [Path(workdir) / DOCKERFILE])
    digest.update(node_image.encode())
    info = bindir.parent / "BUILD-INFO"
    digest.update(info.read_bytes() if info.exists() else b"".join((bindir / b).read_bytes() for b in ("dtnd",)))
    return f"{DTN_IMAGE_REPO}:{digest.hexdigest()[:12]}"


def dtn_build_argv(workdir: Path, tag: str, node_image: str, context: str) -> list[str]:
    return ["docker", "build", "--force-rm", "-f", str(Path(context) / "Dockerfile"), "-t", tag,
            "--label", "io.swarm-emu.managed=true", "--build-arg", f"NODE_IMAGE={node_image}", context]


def ensure_dtn_image(runner: Runner, workdir: Path, node_image: str, message: Callable[[str], None] = lambda m: None,
                     ltp: bool = False) -> str:
    """The node image plus dtn7-rs (built on the host), and with `ltp` swarm-ltpcla, tagged by content; built
    only when missing."""
    bindir = ensure_binaries(runner, workdir, message)
    ltpcla = ltpcla_binary(workdir, runner, message) if ltp else None
    tag = dtn_image_tag(workdir, node_image, bindir)
    if ltpcla is not None:
        tag = f"{tag}-ltp{hashlib.sha256(tag.encode() + ltpcla.read_bytes()).hexdigest()[:8]}"
    if runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], check=False).ok:
        return tag
    message(f"building DTN image {tag} (node image + dtn7-rs)")
    with tempfile.TemporaryDirectory(prefix="swarm-dtn-") as ctx:
        shutil.copy2(Path(workdir) / DOCKERFILE, Path(ctx) / "Dockerfile")
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
