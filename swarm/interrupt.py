"""How the `swarm` program turns Ctrl-C into KeyboardInterrupt (standard library only: it is installed while the
package's first modules load, swarm/__init__.py).

A Ctrl-C is never lost, and never breaks what it lands in. Python runs a signal handler between any two bytecodes:

- in code whose exceptions it prints as "Exception ignored in ..." and drops: finalizers (`__del__`, such as
  Popen's) and weakref callbacks (importlib's module-lock clean-up, `weakref.finalize`). Seen in CI: the
  interrupted `up` then went on and left the swarm up.
- in threading's own lock bookkeeping, e.g. Condition._acquire_restore between releasing a lock and taking it
  back: the lock is left released and the next `with` over it raises "RuntimeError: release unlocked lock" in
  place of the interrupt (seen in CI, stop 46: rich's progress bar starting its thread).

The handler raises KeyboardInterrupt only where neither holds, and otherwise defers it by a few milliseconds
(SIGALRM), to the code after it. Where the main thread blocks in threading (a lock's acquire: Event.wait,
Thread.join, a pool's results) it raises at once, as threading is written to be interrupted there."""
from __future__ import annotations

import signal

DEFER_S = 0.005  # how soon a Ctrl-C that landed where it would be dropped is raised again, in the code after it


def _where_dropped(frame) -> bool:
    """`frame` or a caller of it is code whose exceptions Python drops: a finalizer (`__del__`), importlib's own
    code (its module-lock weakref callback), or weakref.py's (`finalize` callbacks)."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name == "__del__" or code.co_filename.startswith("<frozen importlib")
                or code.co_filename.endswith("/weakref.py")):
            return True
        frame = frame.f_back
    return False


def _inside_threading_bookkeeping(frame) -> bool:
    """`frame` (the interrupted one) is threading.py's own code anywhere but a blocking lock acquire, the one place
    it is written to be interrupted (Condition.wait's try/finally puts the lock back)."""
    if frame is None or not frame.f_code.co_filename.endswith("/threading.py"):
        return False
    import linecache  # only here: this module loads before anything else of the program

    return ".acquire(" not in linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def on_interrupt(signum, frame) -> None:
    """SIGINT (and the deferral's SIGALRM): KeyboardInterrupt, unless the interrupted stack is in code where it
    would be dropped or would break a lock; then once more in DEFER_S."""
    if _where_dropped(frame) or _inside_threading_bookkeeping(frame):
        signal.signal(signal.SIGALRM, on_interrupt)
        signal.setitimer(signal.ITIMER_REAL, DEFER_S)
        return
    raise KeyboardInterrupt


def install(replacing=None) -> None:
    """Make on_interrupt the SIGINT handler, unless the process chose another (e.g. ignores SIGINT); `replacing`:
    a handler of our own that may be replaced too (the package's first one, which only notes a Ctrl-C)."""
    current = signal.getsignal(signal.SIGINT)
    if current is signal.default_int_handler or (replacing is not None and current is replacing):
        signal.signal(signal.SIGINT, on_interrupt)
