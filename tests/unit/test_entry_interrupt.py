"""A Ctrl-C is never lost and never breaks a lock (swarm.interrupt.on_interrupt): Python drops an exception raised in a weakref callback
or a finalizer. importlib's module-lock clean-up is one, so a SIGINT landing there was printed as "Exception
ignored" and the interrupted `up` went on (CI, 2026-11-27); Popen.__del__ is another (a stress run, the same day).
The child below delivers SIGINT inside such a callback, compiled under importlib's file name as the real one is,
or inside a `__del__` one call deep, as a finalizer's own callees are. A KeyboardInterrupt raised inside threading's
lock bookkeeping (Condition._acquire_restore, while rich's progress bar started its thread) left the lock released
and ended `up` in "RuntimeError: release unlocked lock" (CI, stop 46); the child below calls the handler at exactly
that frame from a profile hook."""
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import signal, sys, time, weakref
    from swarm import interrupt as entry
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
    from swarm import interrupt as entry
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
    from swarm.interrupt import on_interrupt

    frame = sys._getframe()
    with pytest.raises(KeyboardInterrupt):
        on_interrupt(2, frame)


@pytest.mark.parametrize("handler, outcome", [("default", "went on"), ("entry", "interrupted")])
def test_a_ctrl_c_inside_a_finalizer_is_dropped_by_python_and_raised_after_it_by_the_entry(handler, outcome):
    res = child(handler, FINALIZER)
    assert res.stdout.strip() == outcome, (res.stdout, res.stderr)
    assert ("Exception ignored" in res.stderr) == (handler == "default"), res.stderr


THREADING = textwrap.dedent("""
    import signal, sys, threading, time
    from swarm import interrupt
    handler = interrupt.on_interrupt if sys.argv[1] == "entry" else signal.default_int_handler
    where = sys.argv[2]  # '_acquire_restore': the lock is released there; 'acquire': Condition.wait blocks there

    def hook(frame, event, arg):
        if (event == "call" and frame.f_code.co_name == where) or (
                event == "c_call" and where == "acquire" and frame.f_code.co_name == "wait"
                and getattr(arg, "__name__", "") == "acquire" and frame.f_lineno > start + 5):
            sys.setprofile(None)
            try:
                handler(signal.SIGINT, frame)
            except KeyboardInterrupt:
                print("at once")
                raise

    start = threading.Condition.wait.__code__.co_firstlineno
    cond = threading.Condition(threading.Lock())  # as Event has it: Python-level _release_save/_acquire_restore
    try:
        sys.setprofile(hook)
        with cond:
            cond.wait(0.05)
        sys.setprofile(None)
        time.sleep(2)
        print("went on")
    except KeyboardInterrupt:
        print("interrupted")
    except RuntimeError as exc:
        print(f"broken: {exc}")
""")


def test_python_breaks_a_lock_when_ctrl_c_lands_in_threadings_bookkeeping():
    """The cause, with Python's default handler: the interrupt comes out as threading's RuntimeError."""
    res = _threading("default", "_acquire_restore")
    assert res.stdout.split() == ["at", "once", "broken:", "release", "unlocked", "lock"], (res.stdout, res.stderr)


def test_the_handler_defers_a_ctrl_c_out_of_threadings_bookkeeping():
    res = _threading("entry", "_acquire_restore")
    assert res.stdout.strip() == "interrupted", (res.stdout, res.stderr)


def test_where_threading_blocks_in_a_lock_the_handler_raises_at_once_and_the_lock_is_put_back():
    res = _threading("entry", "acquire")
    assert res.stdout.split() == ["at", "once", "interrupted"], (res.stdout, res.stderr)


def _threading(handler: str, where: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", THREADING, handler, where], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("argv0, installed", [("-m", True), ("/usr/local/bin/swarm", True), ("-c", False),
                                              ("/home/u/my_tool.py", False)])
def test_the_package_installs_the_handler_first_only_when_it_is_the_swarm_program(argv0, installed):
    """`python -m swarm` (argv[0] is '-m' while runpy imports the package) and the console script install it before
    any other module of the program loads; a program that imports the package keeps Python's handler."""
    code = ("import signal, sys; sys.argv[0] = sys.argv[1]; import swarm, swarm.interrupt; "
            "print(signal.getsignal(signal.SIGINT) is swarm.interrupt.on_interrupt)")
    res = subprocess.run([sys.executable, "-c", code, argv0], capture_output=True, text=True, timeout=30)
    assert res.stdout.strip() == str(installed), (res.stdout, res.stderr)


def test_a_ctrl_c_while_the_handler_itself_loads_is_one_line_and_exit_130():
    """The window a stress run of CI hit: a SIGINT while swarm/__init__.py imported swarm.interrupt (in `import
    signal`) gave a KeyboardInterrupt traceback. The package's first handler notes it; the program then ends with
    the one line and 130, as nothing has started. Here the SIGINT is sent by an import hook at that very import."""
    code = ("import os, signal, sys\n"
            "class Hook:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'swarm.interrupt':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Hook())\n"
            "sys.argv[0] = '-m'\n"
            "import swarm\n"
            "print('went on')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr, res.stdout) == (130, "interrupted\n", ""), res
