"""Node image tag and build decision: no daemon, commands checked with RecordingRunner."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarm.runtime import image
from swarm.errors import RuntimeFailure
from swarm.runtime.runner import RecordingRunner, Result

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small repository tree with the folders the image is made of."""
    root = tmp_path / "repo"
    (root / "images" / "node").mkdir(parents=True)
    (root / "images" / "node" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "images" / "bootstrap-base.sh").write_text("exit 0\n")
    (root / "flightsw" / "pkg").mkdir(parents=True)
    (root / "flightsw" / "agent.py").write_text("print('agent')\n")
    (root / "flightsw" / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "swarm").mkdir()
    (root / "swarm" / "cli.py").write_text("# not part of the image\n")
    return root


def test_context_files_sorted_and_limited_to_image_dirs(repo: Path):
    rel = [p.relative_to(repo).as_posix() for p in image.image_context_files(repo)]
    assert rel == ["flightsw/agent.py", "flightsw/pkg/mod.py", "images/node/Dockerfile"]


def test_hash_is_stable_and_location_independent(repo: Path, tmp_path: Path):
    first = image.content_hash(repo)
    assert len(first) == 12 and all(c in "0123456789abcdef" for c in first)
    assert image.content_hash(repo) == first
    copy = tmp_path / "elsewhere"
    shutil.copytree(repo, copy)
    assert image.content_hash(copy) == first
    assert image.image_tag(copy) == f"swarm-emu/node:{first}"


@pytest.mark.parametrize("rel", ["flightsw/agent.py", "flightsw/pkg/mod.py", "images/node/Dockerfile"])
def test_hash_changes_when_an_image_file_changes(repo: Path, rel: str):
    before = image.content_hash(repo)
    (repo / rel).write_text((repo / rel).read_text() + "# edit\n")
    assert image.content_hash(repo) != before


def test_hash_changes_when_a_file_is_added_or_renamed(repo: Path):
    before = image.content_hash(repo)
    (repo / "flightsw" / "new.py").write_text("")
    added = image.content_hash(repo)
    assert added != before
    (repo / "flightsw" / "new.py").rename(repo / "flightsw" / "other.py")
    assert image.content_hash(repo) not in (before, added)


def test_hash_ignores_bytecode_and_files_outside_the_image(repo: Path):
    before = image.content_hash(repo)
    cache = repo / "flightsw" / "__pycache__"
    cache.mkdir()
    (cache / "agent.cpython-311.pyc").write_bytes(b"\x00\x01")
    (repo / "flightsw" / "stray.pyc").write_bytes(b"\x02")
    (repo / "swarm" / "cli.py").write_text("# changed\n")
    (repo / "images" / "bootstrap-base.sh").write_text("exit 1\n")
    assert image.content_hash(repo) == before


def test_non_default_base_image_changes_the_tag(repo: Path):
    assert image.image_tag(repo, "ubuntu:24.04") != image.image_tag(repo)


def test_real_repository_has_a_hash():
    assert (REPO / "images" / "node" / "Dockerfile").is_file()
    assert image.image_tag(REPO).startswith("swarm-emu/node:")


def _inspect(argv: list[str]) -> bool:
    return argv[:3] == ["docker", "image", "inspect"]


def test_ensure_image_skips_build_when_tag_exists(repo: Path):
    runner = RecordingRunner()  # every command succeeds, so inspect finds the tag
    messages: list[str] = []
    tag = image.ensure_image(runner, repo, progress=messages.append)
    assert tag == image.image_tag(repo)
    assert len(runner.calls) == 1 and _inspect(runner.calls[0]) and runner.calls[0][-1] == tag
    assert messages and "up to date" in messages[0]


def test_ensure_image_builds_when_inspect_fails(repo: Path, monkeypatch):
    monkeypatch.setenv("SWARM_EXTRA_CA_CERTS", "")
    monkeypatch.delenv("BASE_IMAGE", raising=False)
    runner = RecordingRunner(answers=[(_inspect, lambda a: Result(a, 1, "", "No such image"))])
    tag = image.ensure_image(runner, repo)
    h = image.content_hash(repo)
    inspect, again, bootstrap, build = runner.calls
    assert _inspect(inspect) and _inspect(again)  # looked up again under the build lock: another `up` may have built it
    assert bootstrap == ["bash", str(repo / "images" / "bootstrap-base.sh"), "debian:bookworm-slim"]
    assert build == [
        "docker", "build", "--force-rm", "-f", str(repo / "images" / "node" / "Dockerfile"),
        "-t", tag, "-t", "swarm-emu/node:latest",
        "--label", "io.swarm-emu.managed=true", "--label", f"io.swarm-emu.content-hash={h}",
        str(repo),
    ]


def test_ensure_image_rebuild_skips_inspect(repo: Path, monkeypatch):
    monkeypatch.setenv("SWARM_EXTRA_CA_CERTS", "")
    runner = RecordingRunner()
    image.ensure_image(runner, repo, rebuild=True)
    assert [c[:2] for c in runner.calls] == [["bash", str(repo / "images" / "bootstrap-base.sh")], ["docker", "build"]]


def test_ensure_image_passes_base_image_and_extra_ca(repo: Path, tmp_path: Path, monkeypatch):
    pem = tmp_path / "proxy.crt"
    pem.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("SWARM_EXTRA_CA_CERTS", str(pem))
    runner = RecordingRunner(answers=[(_inspect, lambda a: Result(a, 1))])
    tag = image.ensure_image(runner, repo, base_image="debian:trixie-slim")
    assert tag == image.image_tag(repo, "debian:trixie-slim")
    bootstrap, build = runner.calls[2], runner.calls[3]  # after the two look-ups (before and under the build lock)
    assert bootstrap[-1] == "debian:trixie-slim"
    assert "BASE_IMAGE=debian:trixie-slim" in build
    assert "EXTRA_CA_CERTS=" + pem.read_text().strip() in build


def test_ensure_image_build_failure_shows_last_lines(repo: Path, monkeypatch):
    monkeypatch.setenv("SWARM_EXTRA_CA_CERTS", "")
    log = "\n".join(f"line {i}" for i in range(100))
    runner = RecordingRunner(
        answers=[
            (_inspect, lambda a: Result(a, 1)),
            (lambda a: a[:2] == ["docker", "build"], lambda a: Result(a, 1, log, "E: Unable to locate package")),
        ]
    )
    with pytest.raises(RuntimeFailure) as info:
        image.ensure_image(runner, repo)
    text = str(info.value)
    assert "docker build" in text and "E: Unable to locate package" in text
    assert "line 99" in text and "line 50" not in text
    assert len(text.splitlines()) <= 21


def test_ensure_image_bootstrap_failure_is_a_runtime_failure(repo: Path):
    runner = RecordingRunner(
        answers=[
            (_inspect, lambda a: Result(a, 1)),
            (lambda a: a[0] == "bash", lambda a: Result(a, 1, "bootstrap-base: running debootstrap", "debootstrap failed")),
        ]
    )
    with pytest.raises(RuntimeFailure, match="base image"):
        image.ensure_image(runner, repo)
    assert not any(c[:2] == ["docker", "build"] for c in runner.calls)


def test_extra_ca_certs_reads_only_pem_files(tmp_path: Path):
    good = tmp_path / "a.crt"
    good.write_text("-----BEGIN CERTIFICATE-----\nQQ==\n-----END CERTIFICATE-----\n")
    junk = tmp_path / "b.crt"
    junk.write_text("not a certificate\n")
    assert image.extra_ca_certs([good, junk, tmp_path / "missing.crt"]) == good.read_text().strip()
    assert image.extra_ca_certs([]) == ""
