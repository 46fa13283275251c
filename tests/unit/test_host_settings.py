"""Host-wide settings a swarm changes are given back (issue 40, item 8): the ledger of what `up` raised (old value,
value set, swarms needing it), planned purely; `down` of the last swarm needing a setting writes its old value
back and says so; one changed by someone else since is left and said; the ledger file lives in the private lock
folder and is updated under its lock. The live half (the real sysctl in a scratch namespace, through `down`)
is tests/integration/test_host_settings_live.py."""
from __future__ import annotations

import json
import stat
import threading

import pytest

from swarm.runtime.host import (BRIDGE_NF, LEDGER, NEIGH, claim_settings, neighbour_targets, plan_claim, plan_release,
                                release_settings)
from swarm.runtime.runner import RecordingRunner, Result

T3 = NEIGH.format(3)


def test_a_value_high_enough_is_not_recorded_and_one_raised_is():
    assert plan_claim({}, "a", T3, 2000, 5000) == ({}, None)
    ledger, write = plan_claim({}, "a", T3, 2000, 1024)
    assert write == 2000 and ledger == {T3: {"old": 1024, "value": 2000, "users": ["a"]}}


def test_a_second_swarm_joins_and_only_raises():
    ledger, _ = plan_claim({}, "a", T3, 2000, 1024)
    ledger, write = plan_claim(ledger, "b", T3, 500, 2000)  # needs no more than the host had: not a user
    assert write is None and ledger[T3]["users"] == ["a"]
    ledger, write = plan_claim(ledger, "b", T3, 1500, 2000)  # above the old value: it needs the raise too
    assert write is None and ledger[T3]["users"] == ["a", "b"]
    ledger, write = plan_claim(ledger, "c", T3, 9000, 2000)
    assert write == 9000 and ledger[T3] == {"old": 1024, "value": 9000, "users": ["a", "b", "c"]}


def test_the_last_user_gives_it_back_and_a_value_changed_since_is_left():
    ledger = {T3: {"old": 1024, "value": 9000, "users": ["a", "b"]}, BRIDGE_NF: {"old": 0, "value": 1, "users": ["b"]}}
    after, restore, lines = plan_release(ledger, "a", {T3: 9000})
    assert restore == {} and lines == [] and after[T3]["users"] == ["b"] and after[BRIDGE_NF] == ledger[BRIDGE_NF]
    after, restore, lines = plan_release(after, "b", {T3: 9000, BRIDGE_NF: 1})
    assert after == {} and restore == {T3: 1024, BRIDGE_NF: 0}
    assert lines == [f"host setting {T3}=1024 (as before; 9000 while needed)",
                     f"host setting {BRIDGE_NF}=0 (as before; 1 while needed)"]
    after, restore, lines = plan_release({BRIDGE_NF: {"old": 0, "value": 1, "users": ["c"]}}, "c", {BRIDGE_NF: 0})
    assert after == {} and restore == {} and "left at 0" in lines[0] and "someone else" in lines[0]


class Kernel:
    """The sysctls as a table, written by `sysctl -q -w k=v` through a RecordingRunner (the runner seam)."""

    def __init__(self, values: dict[str, int]):
        self.values = dict(values)
        self.runner = RecordingRunner(answers=[(lambda a: a[:3] == ["sysctl", "-q", "-w"], self._write)])

    def _write(self, argv: list[str]) -> Result:
        for kv in argv[3:]:
            key, value = kv.split("=")
            self.values[key] = int(value)
        return Result(argv, 0)

    def read(self, key: str) -> int | None:
        return self.values.get(key)


@pytest.fixture
def lock_folder(tmp_path, monkeypatch):
    folder = tmp_path / "locks"
    monkeypatch.setenv("SWARM_LOCK_DIR", str(folder))
    return folder


def test_claims_and_releases_through_the_ledger_file(lock_folder):
    kernel = Kernel({**{NEIGH.format(i): v for i, v in ((1, 128), (2, 512), (3, 1024))}, BRIDGE_NF: 0})
    big = neighbour_targets(1000)
    assert claim_settings(kernel.runner, "big", big, kernel.read) == big
    assert claim_settings(kernel.runner, "small", neighbour_targets(40), kernel.read) == {}
    assert claim_settings(kernel.runner, "host-engine", {BRIDGE_NF: 1}, kernel.read) == {BRIDGE_NF: 1}
    assert kernel.values[T3] == 2_002_000 and kernel.values[BRIDGE_NF] == 1
    path = lock_folder / LEDGER
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())[T3] == {"old": 1024, "value": 2_002_000, "users": ["big", "small"]}
    assert release_settings(kernel.runner, "big", kernel.read) == []  # `small` (40 nodes) still needs more than 1024
    assert kernel.values[T3] == 2_002_000
    lines = release_settings(kernel.runner, "small", kernel.read)
    assert kernel.values[T3] == 1024 and kernel.values[NEIGH.format(1)] == 128 and len(lines) == 3
    assert release_settings(kernel.runner, "host-engine", kernel.read) == [f"host setting {BRIDGE_NF}=0 (as before; "
                                                                           "1 while needed)"]
    assert kernel.values[BRIDGE_NF] == 0 and json.loads(path.read_text()) == {}
    assert release_settings(kernel.runner, "nobody", kernel.read) == []


def test_a_refused_write_is_not_recorded(lock_folder):
    kernel = Kernel({BRIDGE_NF: 0})
    kernel.runner.answers.insert(0, (lambda a: a[0] == "sysctl", lambda a: Result(a, 1, "", "permission denied")))
    assert claim_settings(kernel.runner, "a", {BRIDGE_NF: 1}, kernel.read) == {BRIDGE_NF: -1}
    assert not (lock_folder / LEDGER).exists() or json.loads((lock_folder / LEDGER).read_text()) == {}


def test_claims_at_once_from_threads_lose_no_user(lock_folder):
    kernel = Kernel({T3: 1024})
    names = [f"s{i}" for i in range(8)]
    threads = [threading.Thread(target=claim_settings, args=(kernel.runner, n, {T3: 5000}, kernel.read)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads((lock_folder / LEDGER).read_text())[T3]["users"] == names


def test_a_planted_link_for_the_ledger_is_never_written_through(lock_folder, tmp_path):
    kernel = Kernel({BRIDGE_NF: 0})
    lock_folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (lock_folder / LEDGER).symlink_to(victim)
    claim_settings(kernel.runner, "a", {BRIDGE_NF: 1}, kernel.read)
    assert victim.read_text() == "precious" and not (lock_folder / LEDGER).is_symlink()
