"""A page in headless Chromium that a test reads as it changes, through the DevTools protocol over a pipe.

Why: the live view's page must ship no test hook (it used to post what it showed to a `?report=` URL), so the
tests read the page from outside, as a person looks at it: Chromium's `--remote-debugging-pipe` takes
DevTools commands on fd 3 and answers on fd 4 (JSON messages ended by a NUL byte), and `Runtime.evaluate`
runs an expression in the page, here one that reads the DOM. No driver (Selenium, a WebSocket client) needed.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class HeadlessPage:
    """`url` open in headless Chromium; `evaluate(expression)` returns the expression's value in the page."""

    def __init__(self, url: str, profile: Path, size: str = "1400,900"):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # above 4, so the shell's `3<&N 4>&M` never overwrites one end with the other
        to_browser_r, from_browser_w = (self._above_4(to_browser_r), self._above_4(from_browser_w))
        # bash (dash takes one-digit fds only) puts our pipe ends at fds 3 and 4, where --remote-debugging-pipe expects them
        argv = ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', chromium() or "chromium",
                "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", f"--window-size={size}",
                "--remote-debugging-pipe", url]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     pass_fds=(to_browser_r, from_browser_w), start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._answers: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.session = self._attach()
        except BaseException:  # no browser left behind by a page that never opened
            self.close()
            raise

    @staticmethod
    def _above_4(fd: int) -> int:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._answers[-1] = {"error": "browser closed the pipe"}
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._answers[msg["id"]] = msg
                        self._cond.notify_all()

    def call(self, method: str, params: dict | None = None, timeout: float = 30, session: str | None = None) -> dict:
        with self._lock:
            self._next_id += 1
            mid = self._next_id
            msg = {"id": mid, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._answers:
                if -1 in self._answers:
                    raise RuntimeError(f"{method}: {self._answers[-1]['error']}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{method}: no answer in {timeout} s")
                self._cond.wait(left)
            answer = self._answers.pop(mid)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def _attach(self) -> str:
        deadline = time.monotonic() + 60
        while True:
            pages = [t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
            if pages:
                return self.call("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True})["sessionId"]
            if time.monotonic() > deadline:
                raise TimeoutError("headless Chromium opened no page")
            time.sleep(0.1)

    def evaluate(self, expression: str, timeout: float = 30):
        """The value of `expression` in the page (JSON-serialisable values come back as they are)."""
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, timeout, self.session)
        if "exceptionDetails" in res:
            raise RuntimeError(f"in the page: {res['exceptionDetails'].get('text')} "
                               f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
        return res["result"].get("value")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("Browser.close", timeout=10)
            except (RuntimeError, TimeoutError, OSError):
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass


class PageWatch:
    """What a page shows (`expression`, evaluated every `every` s and kept when it changed), each value stamped
    with the time it was first seen: `seen` [(time, value)], `wait(pred, timeout)`."""

    def __init__(self, page: HeadlessPage, expression: str, every: float = 0.1):
        self.page, self.expression, self.every = page, expression, every
        self.seen: list[tuple[float, dict]] = []
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = None
        while not self._stop.is_set():
            try:
                text = self.page.evaluate(self.expression, timeout=10)
            except (RuntimeError, TimeoutError, OSError) as exc:
                self.problems.append(str(exc))
                text = None
            now = time.time()
            if isinstance(text, str) and text != last:
                last = text
                self.seen.append((now, json.loads(text)))
            self._stop.wait(self.every)

    def wait(self, pred, timeout: float) -> tuple[float, dict] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, shown in list(self.seen):
                if pred(shown):
                    return t, shown
            time.sleep(0.05)
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
