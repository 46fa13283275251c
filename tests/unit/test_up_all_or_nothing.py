"""An interrupted `up` is all or nothing (Swarm.undo_up): a Ctrl-C that lands after `up`'s own rollback scope (its
last event, the release of the name's lock) or in the CLI's summary still removes the swarm; one before the name
was claimed removes nothing (the name may be another `up`'s). Stress run of 2026-11-27: trial 26 of the live
Ctrl-C fuzz exited 130 with "interrupted" and left the swarm up."""
import pytest
from test_impair import make_swarm

import swarm.runtime.swarm as swarm_module


@pytest.fixture
def quick_up(tmp_path, monkeypatch):
    """A netns Swarm on a recording runner whose `up` claims the name and writes its state, with `down` recorded."""
    swarm, _runner = make_swarm(tmp_path)
    monkeypatch.setenv("SWARM_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(swarm, "_check_conflicts", lambda: None)  # the recording runner lists the namespaces
    monkeypatch.setattr(swarm, "_nodes", lambda timeout: None)
    monkeypatch.setattr(swarm_module, "ensure_neighbour_capacity", lambda *a: {})
    downs = []

    def down():  # as Swarm.down ends: nothing of the `up` left to undo
        downs.append(swarm.name)
        swarm.claimed = False
        return []

    monkeypatch.setattr(swarm, "down", down)
    return swarm, downs


def interrupt(*_a, **_kw):
    raise KeyboardInterrupt


def test_ctrl_c_in_ups_last_event_rolls_back(quick_up, monkeypatch):
    swarm, downs = quick_up
    monkeypatch.setattr(swarm_module, "emit", interrupt)
    with pytest.raises(KeyboardInterrupt):
        swarm.up()
    assert downs == ["t"]


def test_ctrl_c_in_the_release_of_the_lock_rolls_back(quick_up, monkeypatch):
    import contextlib

    swarm, downs = quick_up

    @contextlib.contextmanager
    def operation(*_a, **_kw):
        yield
        raise KeyboardInterrupt  # after the body: in the release

    monkeypatch.setattr(swarm_module, "swarm_operation", operation)
    with pytest.raises(KeyboardInterrupt):
        swarm.up()
    assert downs == ["t"]


def test_ctrl_c_after_up_returned_is_undone_by_the_caller_once(quick_up):
    swarm, downs = quick_up
    swarm.up()
    assert downs == [] and swarm.claimed
    swarm.undo_up()  # what the CLI does on a Ctrl-C while it prints the summary
    swarm.undo_up()
    assert downs == ["t"]


def test_ctrl_c_before_the_claim_removes_nothing(quick_up, monkeypatch):
    swarm, downs = quick_up
    monkeypatch.setattr(swarm, "preflight", interrupt)  # e.g. while checking the name another `up` holds
    with pytest.raises(KeyboardInterrupt):
        swarm.up()
    swarm.undo_up()
    assert downs == []
