"""The documents a newcomer reads first stay short and point at files that exist.

Every repository path README.md and docs/*.md name (inside `backticks` or as a link target) must exist, so a
module that moves or goes takes its mentions with it; the README stays a guide (<= 250 lines), the manual
lives in docs/.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250

#: what makes a word look like a file of this repository
PATH_SUFFIXES = (".py", ".md", ".yaml", ".sh", ".patch")
#: folders that hold what a run makes (not in the repository): `raw/`, `logs/hop.linkd.log`, `.swarm/NAME/...`
RUN_FOLDERS = {"raw", "logs", "report", "capture", "results", ".swarm"}
#: files the documents name that a command writes (not committed): the live tests' measured durations
GENERATED = {"tests/durations.json"}
#: other projects' files the documents cite (Celestial's engine interface, HDTN's plan converter)
ELSEWHERE = {"pkg/virt/types.go", "convertCpToJson.py"}
SKIP_DIRS = {".git", ".venv", "node_modules", "target", "results", ".swarm", "__pycache__"}
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _placeholder(word: str) -> bool:
    """A word that stands for something (`<run-id>`, `NAME`, `my-swarm`, `*.yaml`, `...`), not a file."""
    return any(mark in word for mark in ("<", ">", "*", "...", "NAME", "my-swarm", "$", "{", "|"))


def _repo_path(word: str) -> str | None:
    """`word` as a path relative to the repository root, if it looks like one; else None."""
    word = word.lstrip("'\"(").rstrip("'\"(),;:.").split("#")[0]
    if (not word or "://" in word or ":" in word or word.startswith(("/", "~", "-"))
            or _placeholder(word) or "=" in word):
        return None
    if "/" not in word and not word.endswith(PATH_SUFFIXES):
        return None
    if word.split("/")[0] in RUN_FOLDERS or word in RUN_FOLDERS:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_.\-/+]+", word):
        return None
    return word


def named_paths(doc: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(line, path) of every repository path `doc` names in inline code or as a link, relative to the root."""
    text = doc.read_text() if text is None else text
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # code blocks are commands and specs
    found = []
    for lineno, line in enumerate(prose.splitlines(), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if "://" in target or target.startswith("#"):
                continue
            rel = (doc.parent / target.split("#")[0]).resolve().relative_to(REPO)
            found.append((lineno, str(rel)))
        for m in INLINE.finditer(line):
            for word in m.group(1).split():
                path = _repo_path(word)
                if path:
                    found.append((lineno, path))
    return found


def _all_paths() -> set[str]:
    """Every file and folder of the working tree, relative to the root (folders with a trailing /)."""
    out: set[str] = set()
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = Path(folder).relative_to(REPO)
        out.update(f"{(rel / d).as_posix()}/" for d in dirs)
        out.update((rel / f).as_posix() for f in files)
    return out


ALL_PATHS = _all_paths()


def _exists(path: str) -> bool:
    """From the root when the path starts at a top-level entry (`netem/model.py`); else (`entry.py`,
    `backends/multihost/`, named beside the folder the text is about) as the tail of some path of the tree."""
    if path in GENERATED or path in ELSEWHERE:
        return True
    if (REPO / path.split("/")[0]).exists() and "/" in path.rstrip("/"):
        return (REPO / path).exists()
    tail = path.rstrip("/")
    return any(p.rstrip("/") == tail or p.rstrip("/").endswith("/" + tail) for p in ALL_PATHS)


def missing_paths(doc: Path, text: str | None = None) -> list[str]:
    return [f"{doc.relative_to(REPO)}:{line}: {path}" for line, path in named_paths(doc, text)
            if not _exists(path)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_named_path_exists(doc: Path):
    assert missing_paths(doc) == []


def test_the_check_sees_paths():
    """The check finds the paths README names (not an empty scan that always passes)."""
    paths = {p for _, p in named_paths(REPO / "README.md")}
    assert {"tests/unit/test_layering.py", "images/dtn/dtn7-0.21.0.patch", "docs/DTN.md"} <= paths


def test_a_stale_path_is_caught():
    """A module named in backticks that no longer exists (README named `netem/model.py` after it was split), a
    dead link, a file with no folder; placeholders, URLs, run folders and absolute paths are not repo paths."""
    text = ("the model: `netem/model.py`, see [x](../netem/gone.md) and `gone.sh`\n"
            "`results/<run-id>/report/` `raw/` `dtn://sat01/in` `/run/swarm-emu` `~/.cache/x` `ps -o pid,args`\n")
    assert missing_paths(REPO / "docs" / "x.md", text) == [
        "docs/x.md:1: netem/gone.md", "docs/x.md:1: netem/model.py", "docs/x.md:1: gone.sh"]


def test_readme_is_a_guide_not_a_manual():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move manual text into docs/"
