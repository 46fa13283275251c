"""experiments/loop.py, the one run loop of every experiment type: bring-ups shared by the tests of one swarm,
resume from tests.csv, progress counted in tests, the swarm down after an error or a kill, nothing run twice.
The swarm is a recording stand-in (RunContext.swarm is where the loop gets one); the run folder is a real
ResultsStore, so resume reads the tests.csv the loop's tests wrote."""
from __future__ import annotations

import dataclasses
import os
import signal
from types import SimpleNamespace

import pytest

from experiments.loop import RunContext, Loop, run_tests
from experiments.store import ResultsStore


class StandIn:
    def __init__(self, spec, log):
        self.spec, self.log = spec, log
        self.nodes = [f"n{i}" for i in range(spec)]
        self.backend = SimpleNamespace(name="stand-in")

    def up(self, **kw):
        self.log.append(("up", self.spec, kw))

    def down(self):
        self.log.append(("down", self.spec))


@dataclasses.dataclass(frozen=True)
class Ctx(RunContext):
    log: list = dataclasses.field(default_factory=list)

    def swarm(self, spec):
        return StandIn(spec, self.log)


def T(test_id, size):
    return SimpleNamespace(test_id=test_id, size=size)


TESTS = [T("n2-a", 2), T("n2-b", 2), T("n3-a", 3), T("n2-c", 2)]


def store_of(tmp_path) -> ResultsStore:
    return ResultsStore.create(tmp_path, SimpleNamespace(model_dump=lambda **k: {"name": "loop"}, name="loop"), {})


def recording_test(store, ran):
    def run_test(swarm, test):
        ran.append((swarm.spec, test.test_id))
        row = {"run_id": "r", "test_id": test.test_id}
        store.append("tests.csv", ["run_id", "test_id"], [row])
        return row
    return run_test


def test_tests_of_one_swarm_share_one_bring_up_in_order_of_their_first_test(tmp_path):
    store, ran, progress, messages = store_of(tmp_path), [], [], []
    ctx = Ctx(exp=None, store=store, progress=lambda d, t, w: progress.append((d, t, w)), message=messages.append)
    rows = run_tests(ctx, Loop(tests=TESTS, swarm_of=lambda t: t.size, share=lambda t: t.size,
                                   run_test=recording_test(store, ran), up={"ready_timeout": 9}))
    assert [r["test_id"] for r in rows] == ["n2-a", "n2-b", "n2-c", "n3-a"]
    assert ran == [(2, "n2-a"), (2, "n2-b"), (2, "n2-c"), (3, "n3-a")]
    assert ctx.log == [("up", 2, {"ready_timeout": 9}), ("down", 2), ("up", 3, {"ready_timeout": 9}), ("down", 3)]
    assert messages == ["bringing up 2 nodes (stand-in)", "bringing up 3 nodes (stand-in)"]
    assert progress[0] == (0, 4, "4 tests to run") and progress[-1] == (4, 4, "n3-a")


def test_resume_runs_only_the_tests_missing_from_tests_csv(tmp_path):
    store, ran = store_of(tmp_path), []
    loop = Loop(tests=TESTS, swarm_of=lambda t: t.size, share=lambda t: t.size,
                    run_test=recording_test(store, ran), done_line=lambda t, row: f"{t.test_id} done")
    store.append("tests.csv", ["run_id", "test_id"], [{"run_id": "r", "test_id": "n2-a"},
                                                      {"run_id": "r", "test_id": "n3-a"}])
    progress = []
    ctx = Ctx(exp=None, store=store, progress=lambda d, t, w: progress.append((d, t, w)))
    run_tests(ctx, loop)
    assert ran == [(2, "n2-b"), (2, "n2-c")] and ctx.log == [("up", 2, {}), ("down", 2)]
    assert progress == [(2, 4, "2 tests to run"), (2, 4, "n2-b"), (3, 4, "n2-b done"), (3, 4, "n2-c"),
                        (4, 4, "n2-c done")]
    again = Ctx(exp=None, store=store)
    assert run_tests(again, loop) == [] and again.log == []  # everything there: no swarm at all


def test_a_swarm_per_test_without_resume_and_the_types_own_announcements(tmp_path):
    store, ran, seen = store_of(tmp_path), [], []
    store.append("tests.csv", ["run_id", "test_id"], [{"run_id": "r", "test_id": "n2-a"}])
    ctx = Ctx(exp=None, store=store)
    run_tests(ctx, Loop(tests=TESTS[:3], swarm_of=lambda t: t.size, run_test=recording_test(store, ran),
                            resumable=False, announce_up=False, starting=lambda t, i, n: seen.append((t.test_id, i, n)),
                            after=lambda t, row: seen.append(("after", row["test_id"]))))
    assert [r[1] for r in ran] == ["n2-a", "n2-b", "n3-a"]  # not resumable: tests.csv does not skip n2-a
    assert [e[0] for e in ctx.log] == ["up", "down"] * 3
    assert seen == [("n2-a", 1, 3), ("after", "n2-a"), ("n2-b", 2, 3), ("after", "n2-b"), ("n3-a", 3, 3),
                    ("after", "n3-a")]


def test_an_error_in_a_test_takes_the_swarm_down_and_stops_the_loop(tmp_path):
    store, ran = store_of(tmp_path), []

    def after(test, row):
        if test.test_id == "n2-a":
            raise RuntimeError("abort on error")

    ctx = Ctx(exp=None, store=store)
    with pytest.raises(RuntimeError, match="abort on error"):
        run_tests(ctx, Loop(tests=TESTS, swarm_of=lambda t: t.size, share=lambda t: t.size,
                                run_test=recording_test(store, ran), after=after))
    assert ran == [(2, "n2-a")] and ctx.log == [("up", 2, {}), ("down", 2)]


def test_a_kill_during_the_loop_tears_down_like_ctrl_c_and_the_handler_is_restored(tmp_path):
    store = store_of(tmp_path)
    before = signal.getsignal(signal.SIGTERM)

    def killed(swarm, test):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt")

    ctx = Ctx(exp=None, store=store)
    with pytest.raises(KeyboardInterrupt):
        run_tests(ctx, Loop(tests=TESTS[:1], swarm_of=lambda t: t.size, run_test=killed))
    assert ctx.log == [("up", 2, {}), ("down", 2)]
    assert signal.getsignal(signal.SIGTERM) == before


def test_run_experiment_names_the_run_as_owner_and_logs_its_messages_in_each_swarms_events(tmp_path, monkeypatch):
    """experiments.runs.run_experiment: what used to be the CLI's wiring. The run gets its folder as the owner of
    the swarms it brings up, no before-down hook without a capture section, and its messages and progress reach
    the caller and the event log of each of its swarms that is up."""
    import json

    from experiments.runs import run_experiment
    from swarm.observe.events import EVENTS_FILE

    monkeypatch.setenv("SWARM_WORKDIR", str(tmp_path / "work"))
    state = tmp_path / "work" / ".swarm" / "s1"
    state.mkdir(parents=True)
    store, seen, said, steps = store_of(tmp_path), [], [], []

    def run(ctx):
        seen.append(ctx)
        ctx.message("hello")
        ctx.progress(1, 2, "test one")
        return store.dir

    kind = SimpleNamespace(name="fake", swarms=lambda exp: [SimpleNamespace(name="s1")], run=run)
    assert run_experiment(kind, SimpleNamespace(name="exp"), store, message=said.append,
                          progress=lambda d, t, w: steps.append((d, t, w))) == store.dir
    assert seen[0].owner == str(store.dir.resolve()) and seen[0].before_down == ()
    assert said == ["hello"] and steps == [(1, 2, "test one")]
    events = [json.loads(line) for line in (state / EVENTS_FILE).read_text().splitlines()]
    assert [(e["type"], e.get("message"), e.get("what"), e["cause"]) for e in events] == [
        ("run", "hello", None, "experiment exp"), ("run", None, "test one", "experiment exp")]
