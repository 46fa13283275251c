"""Link schedules executed by the engine (netem.runtime.orbit_schedule, swarm-linkd `sched`): the entries the
driver hands over, the links.csv rows and step lags it makes of the engine's record, and the real engine taking
a schedule over its control socket (in a private network namespace, no traffic needed)."""
from __future__ import annotations

import os
import subprocess
import time
from types import SimpleNamespace

import pytest

from netem.engines.userspace import linkd_line
from netem.spec.links import NONE, Impairment
from netem.engines.drivers.linkd import ctl_body, ctl_socket, instance_spec, linkd_binary, parse_kv
from netem.runtime.orbit_schedule import Change, EngineSchedule, entry_line, link_rows, step_summary

A, B = "02:00:00:00:00:01", "02:00:00:00:00:02"


def test_entries_name_the_receivers_queue_the_senders_mac_and_the_new_conditions():
    assert entry_line(5, 3, A.upper(), Impairment(delay=12.5)) == f"5 3 {linkd_line(A, Impairment(delay=12.5))}"
    assert entry_line(5, 3, A, Impairment(delay=12.5)).startswith(f"5 3 link {A} delay=12500us ")
    assert entry_line(5, 3, A, Impairment(up=False)) == f"5 3 link {A} down"
    assert entry_line(5, 3, A, NONE) == f"5 3 link {A}"  # no conditions: straight through


def _change(t: float, applied: dict[str, float]) -> Change:
    row = SimpleNamespace(a="sat01", b="sat02", kind="isl", up=True, delay_ms=4.0, rate=0)
    return Change(int(t), t, row, NONE, NONE, 100.0 + t, applied)


def test_rows_take_the_later_direction_and_name_changes_never_applied():
    done = _change(1, {"ab": 101.0002, "ba": 101.0005})
    half = _change(2, {"ab": 102.0001})
    rows = link_rows([done, half], "r1", True)
    assert rows[0]["lag_ms"] == 0.5 and rows[0]["ok"] and rows[0]["applied_by"] == "engine"
    assert rows[0]["applied_ts"] == 101.0005 and rows[0]["delay_applied"]
    assert not rows[1]["ok"] and "not applied" in rows[1]["error"]


def test_step_lag_is_each_steps_last_change():
    changes = [_change(1, {"ab": 101.0002, "ba": 101.0001}), _change(1, {"ab": 101.003, "ba": 101.0}),
               _change(2, {"ab": 102.0004, "ba": 102.0004}), _change(3, {"ab": 103.0})]
    s = step_summary(changes, 1.0)
    assert s["batches"] == 2 and s["step_lag_ms_max"] == 3.0 and s["steps_finished_before_next"] == 1.0
    assert step_summary([], 1.0)["step_lag_ms_p99"] is None


@pytest.mark.skipif(not os.access(linkd_binary() or "/nonexistent", os.X_OK), reason="swarm-linkd not built")
def test_the_engine_applies_a_schedule_at_its_instants_and_saves_the_links(tmp_path):
    """Two queues of one engine: one `sched` message changes a link of each at its own instant; the engine's
    record (schedlog) gives each change's lag, the state files hold the new links (a restart keeps them), and a
    schedule with a bad entry is refused whole."""
    usage = subprocess.run([linkd_binary(), "--help"], capture_output=True, text=True, timeout=10).stderr
    if "sched" not in usage:
        pytest.skip(f"{linkd_binary()} was built before schedules: run `make setup`")
    socks = [str(tmp_path / f"n{i}.sock") for i in (1, 2)]
    states = [tmp_path / f"n{i}.conf" for i in (1, 2)]
    specs = [instance_spec(i + 1, socks[i], str(states[i]), ("lo", mac)) for i, mac in enumerate((A, B))]
    eng = subprocess.Popen(["unshare", "--net", "--", linkd_binary(), "run",
                            *[a for s in specs for a in ("--instance", s)]], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if all(os.path.exists(s) for s in socks):
                break
            time.sleep(0.05)
        now = time.time_ns()
        body = ctl_body("sched", f"{now + 300_000_000} 2 link {A} delay=7ms\n{now + 200_000_000} 1 link {B} down\n")
        res = ctl_socket(socks[0], body, 5)
        assert res.returncode == 0 and res.stdout.startswith("ok ")
        assert parse_kv(res.stdout) == {"entries": "2", "first_id": "1", "pending": "2"}
        refused = ctl_socket(socks[1], ctl_body("sched", f"{now + 10**9} 1 link {B} delay=1ms\n"
                                                         f"{now + 10**9} 1 link {A} delay=1ms\n"), 5)
        assert refused.returncode == 2 and refused.stderr.startswith("entry 2: ") and "unknown link" in refused.stderr
        time.sleep(0.6)
        log = ctl_socket(socks[1], ctl_body("schedlog"), 5).stdout.splitlines()
        assert parse_kv(log[0])["applied"] == "2" and parse_kv(log[0])["pending"] == "0"
        lags = {int(i): (int(applied) - int(due)) / 1e6 for i, due, applied in (ln.split() for ln in log[1:])}
        assert set(lags) == {1, 2} and all(0 <= lag < 100 for lag in lags.values()), lags
        assert states[0].read_text() == f"link {B} down\n" and states[1].read_text() == f"link {A} delay=7ms\n"
        assert ctl_socket(socks[0], ctl_body("schedlog"), 5).stdout.startswith("ok applied=0")
    finally:
        eng.kill()
        eng.wait()


def test_entries_due_before_a_late_hand_over_become_due_then_and_keep_their_plan_instant():
    """A release fixed before the plan reached the engines (contact plans and DTN traffic use it): entries already
    in the past are applied at the hand-over, not refused; each change keeps its scheduled instant, so its lag
    says how late it went."""
    sched = EngineSchedule(SimpleNamespace(ctl=SimpleNamespace(linkd=None)), 100.0)
    early = SimpleNamespace(scheduled=100.0)
    later = SimpleNamespace(scheduled=105.0)
    sched.entries = {"switch": [(entry_line(int(100.0 * 1e9), 3, "02:00:00:00:00:01", NONE), early, "ab"),
                                (entry_line(int(100.0 * 1e9), 4, "02:00:00:00:00:02", NONE), early, "ba"),
                                (entry_line(int(105.0 * 1e9), 3, "02:00:00:00:00:01", NONE), later, "ab")]}
    assert sched.not_before(102.5) == 1  # one change (both its directions) moved
    dues = [int(line.split()[0]) for line, _c, _w in sched.entries["switch"]]
    # one ns apart in their order: the engine refuses a link that changes twice at one instant
    assert dues == [int(102.5e9), int(102.5e9) + 1, int(105e9)] and early.scheduled == 100.0
    assert [line.split(" ", 1)[1] for line, _c, _w in sched.entries["switch"]][0] == "3 link 02:00:00:00:00:01"


def test_a_window_sent_after_its_first_entries_were_due_sends_them_due_just_after_now():
    """The engine refuses an entry in the past (the whole window with it): one already due when its window goes
    is sent due SEND_MARGIN_S from now, the rest as planned."""
    got: list[list[str]] = []
    linkd = SimpleNamespace(schedule=lambda via, lines: got.append(lines) or {"first_id": "1", "pending": "3"})
    sched = EngineSchedule(SimpleNamespace(ctl=SimpleNamespace(linkd=linkd)), 0.0)
    sched.targets = {"sat01": SimpleNamespace(group="switch", via="sat01")}
    c = SimpleNamespace(scheduled=0.0)
    past, future = time.time_ns() - 10**9, time.time_ns() + 60 * 10**9
    sched.entries = {"switch": [(f"{past} 3 link 02:00:00:00:00:01", c, "ab"), (f"{future} 3 link 02:00:00:00:00:01", c, "ab")]}
    before = time.time_ns()
    sched.send_windows()
    (first, second), = got
    assert before < int(first.split()[0]) <= time.time_ns() + 10**9 and first.split(" ", 1)[1] == "3 link 02:00:00:00:00:01"
    assert second == f"{future} 3 link 02:00:00:00:00:01"
