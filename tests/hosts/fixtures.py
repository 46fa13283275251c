"""Pytest fixtures for a real second Docker host (import them into a test module or conftest).

`second_engine_session` (session): a SecondEngine started for the session and removed at its end; or,
when `.ci/run` already started one, that one (named by SWARM_EMU_SECOND_ENGINE), left for `.ci/run` to stop.
Skips without root or Docker; under CI=true it fails instead, as the other capability fixtures do.
`second_engine` (per test): that engine, its dockerd restarted first if an earlier test's `swarm leave` left
its gossip port bound (import both names: pytest finds the session fixture through the test module).
"""
from __future__ import annotations

import os
import shutil

import pytest

from hosts.second_engine import DEFAULT_LINK, DEFAULT_NAME, SecondEngine

ENV = "SWARM_EMU_SECOND_ENGINE"


def _require(present: bool, reason: str) -> None:
    if present:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI machine cannot run a second Docker Engine: {reason}")
    pytest.skip(f"second Docker Engine unavailable: {reason}")


@pytest.fixture(scope="session")
def second_engine_session():
    _require(os.geteuid() == 0, "not running as root")
    _require(all(shutil.which(t) for t in ("dockerd", "nsenter", "unshare", "ip", "docker")),
             "dockerd, nsenter, unshare, ip or docker missing")
    name = os.environ.get(ENV, "")
    if name:
        eng = SecondEngine.attach(name)
        _require(eng.running(), f"{ENV}={name} is not running")
        yield eng
        return
    eng = SecondEngine(DEFAULT_NAME, DEFAULT_LINK)
    try:
        eng.start()
    except Exception as exc:  # noqa: BLE001 - report why as a skip (or a CI failure)
        _require(False, str(exc))
    try:
        yield eng
    finally:
        eng.stop()


@pytest.fixture
def second_engine(second_engine_session):
    eng = second_engine_session
    if eng.gossip_port_leaked():
        print(f"second engine {eng.name}: gossip port still bound after the last `swarm leave` "
              "(Docker 20.10 leak); restarting its dockerd")
        eng.restart_daemon()
    yield eng
