"""Shared fixtures: capability probes that skip integration tests with a reason, or fail under CI.

Under CI (CI=true) a missing capability the CI machine is known to have (Docker, root, iperf3, nftables,
netns) fails the test instead of skipping it, so a broken install step cannot hide behind skips.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from swarm.runtime.probe import capabilities

CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parents[1]
KNOWN_ON_CI = {"docker", "root", "netns", "iperf3", "nftables"}


def require(feature: str, present: bool, reason: str) -> None:
    """Skip (or under CI fail, for features CI has) when `present` is false."""
    if present:
        return
    if CI and feature in KNOWN_ON_CI:
        pytest.fail(f"CI machine lacks {feature}: {reason}")
    pytest.skip(f"{feature} unavailable: {reason}")


@pytest.fixture(scope="session")
def caps():
    return capabilities()


@pytest.fixture
def need_docker(caps):
    require("docker", caps.docker and bool(caps.compose), "no Docker daemon or Compose CLI answered")


@pytest.fixture
def need_netns(caps):
    require("root", caps.root, "not running as root")
    require("netns", caps.netns, "cannot create network namespaces")


@pytest.fixture
def need_iperf3(caps):
    require("iperf3", bool(caps.iperf3_version), "iperf3 not installed")


def golden(name: str, text: str) -> str:
    """The golden file's text; with UPDATE_GOLDEN=1 it is (re)written from `text` first."""
    path = REPO / "tests" / "golden" / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    return path.read_text()
