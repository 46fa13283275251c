"""A Ctrl-C is never lost (swarm.cli.entry.on_interrupt): Python drops an exception raised in a weakref callback,
and importlib's module-lock clean-up is one, so a SIGINT landing there was printed as "Exception ignored" and the
interrupted `up` went on (CI, 2026-11-27). The child below delivers SIGINT inside such a callback, compiled under
importlib's file name as the real one is."""
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


def child(handler: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, handler], capture_output=True, text=True, timeout=30)


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
