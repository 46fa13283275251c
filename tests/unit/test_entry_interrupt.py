"""A Ctrl-C is never lost (swarm.cli.entry.on_interrupt): Python drops an exception raised in a weakref callback
or a finalizer. importlib's module-lock clean-up is one, so a SIGINT landing there was printed as "Exception
ignored" and the interrupted `up` went on (CI, 2026-11-27); Popen.__del__ is another (a stress run, the same day).
The child below delivers SIGINT inside such a callback, compiled under importlib's file name as the real one is,
or inside a `__del__` one call deep, as a finalizer's own callees are."""
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import signal, sys, time, weakref
    from swarm.cli import entry
    signal.signal(signal.SIGINT, entry.on_interrupt if sys.argv[1] == "entry" else signal.default_int_handler)
    ns = {"signal": signal}
    exec(compile("def cb(ref):\\n    signal.raise_signal(signal.SIGINT)\\n    done = 1\\n",
                 "<frozen importlib._bootstrap>", "exec"), ns)
    class Module: pass
    m = Module(); ref = weakref.ref(m, ns["cb"]); del m  # the callback runs here, the SIGINT inside it
    try:
        time.sleep(2)
        print("went on")
    except KeyboardInterrupt:
        print("interrupted")
""")


FINALIZER = textwrap.dedent("""
    import signal, sys, time
    from swarm.cli import entry
    signal.signal(signal.SIGINT, entry.on_interrupt if sys.argv[1] == "entry" else signal.default_int_handler)
    def wait_child():
        signal.raise_signal(signal.SIGINT)
        return 0
    class Process:
        def __del__(self):
            wait_child()
    p = Process(); del p  # the finalizer runs here, the SIGINT in a function it calls
    try:
        time.sleep(2)
        print("went on")
    except KeyboardInterrupt:
        print("interrupted")
""")


def child(handler: str, code: str = CHILD) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, handler], capture_output=True, text=True, timeout=30)


def test_python_drops_a_ctrl_c_inside_an_import_callback():
    """The cause, as Python does it with its default handler."""
    res = child("default")
    assert "Exception ignored" in res.stderr and "KeyboardInterrupt" in res.stderr, res.stderr
    assert res.stdout.strip() == "went on"


def test_entry_handler_raises_it_in_the_code_after_the_callback():
    res = child("entry")
    assert res.stdout.strip() == "interrupted", (res.stdout, res.stderr)
    assert "Exception ignored" not in res.stderr, res.stderr


def test_outside_importlib_the_handler_raises_at_once():
    from swarm.cli.entry import on_interrupt

    frame = sys._getframe()
    with pytest.raises(KeyboardInterrupt):
        on_interrupt(2, frame)


@pytest.mark.parametrize("handler, outcome", [("default", "went on"), ("entry", "interrupted")])
def test_a_ctrl_c_inside_a_finalizer_is_dropped_by_python_and_raised_after_it_by_the_entry(handler, outcome):
    res = child(handler, FINALIZER)
    assert res.stdout.strip() == outcome, (res.stdout, res.stderr)
    assert ("Exception ignored" in res.stderr) == (handler == "default"), res.stderr
