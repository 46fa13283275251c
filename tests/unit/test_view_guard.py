"""The live view as a server others may reach (issue 40, item 9): only requests whose Host names the view
(DNS rebinding), `since` bounded (400, not a traceback), an idle connection let go, the swarm polled only while
a page watches, a warning when bound off loopback, and no test hook in the shipped page.

Real servers on 127.0.0.1 and real sockets; the swarm is a netns spec in a temporary workdir whose runner
counts the commands the view would start (none may start while nobody watches)."""
from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import swarm.observe.view as view_mod
from swarm.caps import Capabilities
from swarm.observe.view import LiveState, bind, host_allowed, host_allowlist, host_of, is_loopback, since_param
from swarm.runtime.runner import RecordingRunner
from swarm.runtime.state import write_state
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

REPO = Path(__file__).resolve().parents[2]
CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=True, batman_adv=False, nftables=True, tbf=True, iperf3_version="iperf 3.12",
                    batmand=False, ddsperf=False, htb=True, nfqueue=True, bridge_nf=True, linkd="")


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A LiveState (loops running) behind a real server on 127.0.0.1; yields (state, runner, port)."""
    monkeypatch.setattr(view_mod, "IDLE_TIMEOUT_S", 0.5, raising=False)
    runner = RecordingRunner()
    swarm = Swarm(spec_from_dict({"name": "rfv-g", "nodes": 2, "backend": "netns",
                                  "links": {"engine": "netem"}}), workdir=tmp_path, runner=runner, caps=CAPS)
    state = LiveState(swarm)
    state.dir.mkdir(parents=True)
    server = bind("127.0.0.1", 0, state)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    state.start()
    yield state, runner, server.server_address[1]
    state.stop.set()
    server.shutdown()
    server.server_close()


def get(port: int, path: str, host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        res = conn.getresponse()
        return res.status, res.read()
    finally:
        conn.close()


def test_host_header_names_the_view_or_is_refused(served):
    _state, _runner, port = served
    for host in ("127.0.0.1", f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", f"[::1]:{port}"):
        assert get(port, "/api/events", host)[0] == 200, host
    for host in (f"evil.example:{port}", "attacker.test", "127.0.0.1.nip.io", "10.1.2.3", ""):
        status, body = get(port, "/api/events", host)
        assert status == 403 and b"Host" in body, (host, status)
    assert get(port, "/")[0] == 200  # http.client's own Host: 127.0.0.1:<port>


def test_host_allowlist_is_pure_and_wildcard_takes_ip_literals_and_this_machines_names():
    assert host_of("Example.COM:8765") == "example.com" and host_of("[::1]:80") == "::1" and host_of("a.b.") == "a.b"
    allowed, any_ip = host_allowlist("127.0.0.1", "127.0.0.1")
    assert not any_ip and not host_allowed("192.168.1.5", allowed, any_ip) and not host_allowed(None, allowed, any_ip)
    allowed, any_ip = host_allowlist("0.0.0.0", "0.0.0.0")
    assert any_ip and host_allowed("192.168.1.5:8765", allowed, any_ip)
    assert host_allowed(socket.gethostname(), allowed, any_ip) and not host_allowed("evil.example", allowed, any_ip)
    allowed, any_ip = host_allowlist("myview.lan", "192.168.1.5")
    assert host_allowed("myview.lan:8765", allowed, any_ip) and host_allowed("192.168.1.5", allowed, any_ip)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0") and not is_loopback("x")


def test_since_of_5000_digits_is_a_400_not_a_traceback(served, capfd):
    _state, _runner, port = served
    status, body = get(port, "/api/events?since=" + "9" * 5000)
    assert status == 400 and b"since" in body
    for bad in ("-1", "x", "1e3", "1" * 19):
        assert get(port, f"/api/events?since={bad}")[0] == 400, bad
    assert get(port, "/api/events?since=3")[0] == 200 and get(port, "/api/events")[0] == 200
    assert since_param("since=12&x=1") == 12 and since_param("") == 0 and since_param("since=") is None
    assert "Traceback" not in capfd.readouterr().err


def test_an_idle_connection_is_closed_and_its_thread_ends(served):
    _state, _runner, port = served
    before = threading.active_count()
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        idle.sendall(b"GET /api/sta")  # half a request line, then nothing
        try:
            data = idle.recv(100)
        except socket.timeout:
            pytest.fail("the server held an idle connection for 5 s (its timeout: 0.5 s)")
    finally:
        idle.close()
    assert data == b""  # closed by the server, nothing answered
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


def test_the_swarm_is_polled_only_while_a_page_watches(served):
    state, runner, port = served
    time.sleep(2.0)
    assert runner.calls == [], f"{len(runner.calls)} commands with nobody watching: {runner.calls[:3]}"
    assert get(port, "/api/state")[0] == 200
    deadline = time.monotonic() + 5
    while not runner.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.calls, "watched, but the swarm was not polled"
    # nobody asks again: after WATCHED_S the pollers stop starting commands
    time.sleep(view_mod.WATCHED_S + 1.5)
    settled = len(runner.calls)
    time.sleep(2.5)
    assert len(runner.calls) == settled


def test_the_shipped_page_has_no_test_hook():
    page = (REPO / "swarm/observe/static/view.js").read_text()
    assert "report" not in page and "POST" not in page and "location.search" not in page


def test_view_off_loopback_warns_in_one_line(tmp_path):
    write_state(tmp_path, "rfv-w", {"name": "rfv-w", "backend": "netns",
                                    "spec": {"name": "rfv-w", "nodes": 2, "backend": "netns"}})
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "view", "rfv-w", "--host", "0.0.0.0", "--port", "0"],
                            cwd=REPO, env={**os.environ, "SWARM_WORKDIR": str(tmp_path)}, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while len(lines) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        reader.join(timeout=10)
    url, warning = (lines + ["", ""])[:2]
    assert "live view at http://0.0.0.0:" in url, url
    assert warning.startswith("warning: 0.0.0.0:") and "not loopback" in warning and "rfv-w" in warning, warning
    assert "topology" in warning and "command line" in warning
