"""Looking inside a running swarm (issue 28), live on the netns backend with the userspace link engine (the
delay/loss engine of this host): `swarm capture` of a lossy link read back with tshark, bad input, Ctrl-C.

Every check runs the real CLI (`python -m swarm`) against real namespaces, swarm-linkd, dumpcap and tshark.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm.runtime.backends.netns.backend import node_ns
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict

from conftest import REPO, require, wait_until
from headless import HeadlessPage, PageWatch, chromium
from alloc import nets, octets

NET = octets(__file__)  # this file's subnets (tests/alloc.py)

pytestmark = [pytest.mark.root, pytest.mark.slow]


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def dumpcaps_writing(path: Path) -> list[str]:
    """Command lines of processes writing into `path`'s folder (our dumpcaps), from /proc."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "dumpcap" in cmd and str(path.parent) in cmd:
                found.append(cmd)
    return found


@pytest.fixture
def lossy(caps, need_netns):
    require("swarm-linkd", bool(caps.linkd), "swarm-linkd not built (make setup)")
    require("nfqueue", caps.nfqueue, "iptables NFQUEUE target refused")
    require("dumpcap", bool(shutil.which("dumpcap") and shutil.which("tshark")), "wireshark-common/tshark missing")
    data = {"name": "obs-cap", "nodes": 2, "backend": "netns",
            "networks": nets(NET[0]),
            "links": {"engine": "userspace", "default": {"loss": "10%"}}}
    swarm = Swarm(spec_from_dict(data), workdir=REPO)
    swarm.down()
    swarm.up()
    yield swarm
    swarm.down()


def per_interface(path: Path, display_filter: str) -> dict[int, int]:
    res = subprocess.run(["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", "frame.interface_id"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    counts: dict[int, int] = {}
    for line in res.stdout.split():
        counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


def test_capture_of_a_lossy_link_both_ends_until_ctrl_c(lossy, tmp_path):
    out = tmp_path / "l12.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "capture", "obs-cap", "--link", "sat01", "sat02", "-o",
                             str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # "capturing on ...": printed once both dumpcaps have opened their interface
    assert "capturing on sat01 eth1, sat02 eth1" in line, line + (proc.stderr.read() if proc.poll() is not None else "")
    assert len(dumpcaps_writing(out)) == 2
    dst = lossy.node("sat02").isl_ip
    ping = subprocess.run(["ip", "netns", "exec", node_ns("obs-cap", "sat01"), "ping", "-q", "-n", "-c", "1000",
                           "-i", "0.004", "-W", "1", dst], capture_output=True, text=True, timeout=120)
    assert "1000 packets transmitted" in ping.stdout, ping.stdout + ping.stderr
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: the capture stops and leaves a readable file
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert dumpcaps_writing(out) == []
    assert list(tmp_path.iterdir()) == [out]  # the two ends' temporary files are gone
    requests = per_interface(out, "icmp.type == 8")
    assert requests.get(0) == 1000, requests  # every echo request the sender sent, at its egress
    ratio = requests.get(1, 0) / 1000
    assert 0.85 <= ratio <= 0.95, f"ingress/egress = {ratio} with 10 % loss on the link"  # +-5 sigma at n=1000
    # the reverse direction is not in a directed capture
    assert per_interface(out, "icmp.type == 0") == {}
    info = subprocess.run(["capinfos", str(out)], capture_output=True, text=True, timeout=60).stdout
    assert "Number of interfaces in file: 2" in info and "interface 0: sat01 isl egress" in info
    assert f"wrote {out}" in stdout.replace("\n", "")
    # every frame's comment says what became of it, and the losses are the egress frames without an arrival
    lost = per_interface(out, 'frame.comment contains "never reached" && icmp.type == 8')
    arrived = per_interface(out, 'frame.comment contains "arrived at sat02" && icmp.type == 8')
    assert lost.get(0, 0) + arrived.get(0, 0) == 1000 and arrived.get(0) == requests.get(1), (lost, arrived)
    assert per_interface(out, 'frame.comment contains "earlier"').get(1) == per_interface(out, "frame").get(1)


def test_capture_bad_input_one_line_exit_2_nothing_left(lossy, tmp_path):
    cases = [
        (["--node", "sat09"], "sat09"),
        (["--link", "sat01", "sat07"], "sat07"),
        (["--link", "sat01", "sat01"], "sat01"),
        (["--node", "sat01", "--iface", "eth9"], "eth9"),
    ]
    for args, named in cases:
        res = cli("capture", "obs-cap", *args, "-o", str(tmp_path / "x.pcapng"), "--duration", "1")
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and named in res.stderr, res.stderr
    for bad in (tmp_path / "missing" / "x.pcapng", Path("/proc/obs-x.pcapng"), tmp_path):
        res = cli("capture", "obs-cap", "--node", "sat01", "-o", str(bad), "--duration", "1")
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "-o" in res.stderr, res.stderr
    res = cli("capture", "obs-nosuch", "--node", "sat01", "-o", str(tmp_path / "y.pcapng"))
    assert res.returncode == 2 and "obs-nosuch" in res.stderr
    assert list(tmp_path.iterdir()) == [] and dumpcaps_writing(tmp_path / "x") == []
    # -o an existing name, a link to a victim, a dangling link: refused without --force and never opened; a FIFO
    # (with --force too) and a duration dumpcap cannot keep: one line, nothing started (issue 40, items 3, 11)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "old.pcapng").write_text("old")
    (tmp_path / "link.pcapng").symlink_to(victim)
    (tmp_path / "dangling.pcapng").symlink_to(tmp_path / "ab")
    os.mkfifo(tmp_path / "fifo")
    before = sorted(tmp_path.iterdir())
    for out, extra in (("old.pcapng", []), ("link.pcapng", []), ("dangling.pcapng", []), ("fifo", ["--force"]),
                       ("new.pcapng", ["--duration", "nan"]), ("new.pcapng", ["--duration", "0.2"])):
        res = cli("capture", "obs-cap", "--node", "sat01", "-o", str(tmp_path / out), *extra, timeout=60)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (out, extra, res.stderr)
    assert sorted(tmp_path.iterdir()) == before and victim.read_text() == "precious"
    assert (tmp_path / "old.pcapng").read_text() == "old" and dumpcaps_writing(tmp_path / "x") == []


def test_capture_of_one_node_for_a_duration(lossy, tmp_path):
    out = tmp_path / "sat01-ground.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "capture", "obs-cap", "--node", "sat01", "--iface",
                             "ground", "--duration", "3", "-o", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    started = proc.stderr.readline()  # "capturing on ...": dumpcap has opened the interface (a loaded host: seconds)
    assert "capturing on" in started, started + proc.stderr.read()
    subprocess.run(["ping", "-q", "-c", "5", "-i", "0.1", lossy.node("sat01").ground_ip], capture_output=True, timeout=30)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    counts = per_interface(out, "icmp")
    assert counts.get(0, 0) >= 10, counts  # 5 requests in, 5 replies out (ground: no link conditions)
    # a kill (SIGTERM) stops the capture like Ctrl-C: a readable file, no dumpcap left
    out2 = tmp_path / "killed.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "swarm", "capture", "obs-cap", "--node", "sat02", "-o", str(out2)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while "capturing on" not in (proc.stderr.readline() or "") and time.monotonic() < deadline:
        assert proc.poll() is None
    proc.terminate()
    proc.communicate(timeout=30)
    assert dumpcaps_writing(out2) == [] and out2.stat().st_size > 0
    assert subprocess.run(["capinfos", str(out2)], capture_output=True, timeout=60).returncode == 0
    # --force over a link to a victim: the link is replaced by the capture, the victim is untouched
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out3 = tmp_path / "forced.pcapng"
    out3.symlink_to(victim)
    res = cli("capture", "obs-cap", "--node", "sat01", "--duration", "1", "--force", "-o", str(out3), timeout=60)
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "precious" and not out3.is_symlink()
    assert subprocess.run(["capinfos", str(out3)], capture_output=True, timeout=60).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forced.pcapng", "killed.pcapng", "sat01-ground.pcapng",
                                                          "victim"]  # no temporary folder left


# ------------------------------------------------------------------------------------------------ events
@pytest.fixture(scope="module")
def four(request):
    """A 4-node netns swarm (userspace engine: the delay/loss engine here) for the event stream and the view."""
    from swarm.runtime.probe import capabilities

    caps = capabilities()
    require("netns", caps.netns and os.geteuid() == 0, "needs root and network namespaces")
    require("swarm-linkd", bool(caps.linkd), "swarm-linkd not built (make setup)")
    data = {"name": "obs-four", "nodes": 4, "backend": "netns",
            "networks": nets(NET[1]),
            "links": {"engine": "userspace", "default": {"delay": "5ms"},
                      "overrides": [{"between": ["sat01", "sat02"], "loss": "2%"}]}}
    swarm = Swarm(spec_from_dict(data), workdir=REPO)
    swarm.down()
    swarm.up()
    yield swarm
    swarm.down()


class Follower:
    """`swarm events NAME --json --no-history` in the background, its lines collected by a thread; `attach()`
    returns once it follows the log: a marker event appended to the log (every 0.3 s) has come out of it."""

    def __init__(self, swarm: Swarm):
        import threading

        self.state_dir = swarm.backend.state_dir(swarm.name)
        self.proc = subprocess.Popen([sys.executable, "-m", "swarm", "events", swarm.name, "--json", "--no-history"],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                       daemon=True)
        self.reader.start()

    def attach(self, timeout: float = 60) -> None:
        from swarm.observe.events import emit

        def marked() -> bool:
            assert self.proc.poll() is None, self.proc.stderr.read()
            if any('"test-marker"' in line for line in self.lines):
                return True
            emit(self.state_dir, "test-marker")
            return False

        wait_until(marked, timeout, "swarm events following the log", every=0.3)

    def events(self) -> list[dict]:
        """Stops it (Ctrl-C) and returns what it printed after the markers."""
        import json

        self.proc.send_signal(signal.SIGINT)
        stderr = self.proc.communicate(timeout=30)[1]
        self.reader.join(timeout=30)
        assert self.proc.returncode == 0, stderr
        events = [json.loads(line) for line in self.lines if line.strip()]
        return [e for e in events if e["type"] != "test-marker"]


def test_events_stream_a_cut_and_a_heal_in_order_with_their_times(four):
    follower = Follower(four)
    follower.attach()
    t0 = time.time()
    assert cli("fault", "obs-four", "cut", "sat01", "sat03").returncode == 0
    t1 = time.time()
    time.sleep(1.0)
    t2 = time.time()
    assert cli("fault", "obs-four", "heal", "sat01", "sat03").returncode == 0
    t3 = time.time()
    time.sleep(1.5)
    events = follower.events()
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)  # in the order they happened
    faults = [e for e in events if e["type"] == "fault"]
    assert [(e["kind"], e["args"]) for e in faults] == [("cut", ["sat01", "sat03"]), ("heal", ["sat01", "sat03"])]
    assert t0 <= faults[0]["t"] <= t1 and t2 <= faults[1]["t"] <= t3
    links = [(e["src"], e["dst"], e["state"]) for e in events if e["type"] == "link"]
    assert links == [("sat01", "sat03", "cut"), ("sat03", "sat01", "cut"), ("sat01", "sat03", "up"),
                     ("sat03", "sat01", "up")], links
    cut_links = [e for e in events if e["type"] == "link" and e["state"] == "cut"]
    assert all(t0 <= e["t"] <= t1 and e["conditions"] == "delay 5ms" for e in cut_links)  # applied, then logged
    assert all(e["cause"].startswith("command: swarm fault obs-four") for e in faults + cut_links)
    # the readable table and the history: the whole story since `up`, from the log
    res = cli("events", "obs-four", "--no-follow")
    assert res.returncode == 0, res.stderr
    table = res.stdout.splitlines()
    assert "cause" in table[0] and any("swarm" in l and "up (4 nodes)" in l for l in table)
    assert any("sat01 -> sat02: up (delay 5ms loss 2%)" in l for l in table)  # the spec's links, set at `up`
    assert any("cut sat01 sat03" in l for l in table) and any("heal sat01 sat03" in l for l in table)


def test_events_of_an_unknown_swarm_exit_2():
    res = cli("events", "obs-nosuch", "--json")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "obs-nosuch" in res.stderr


# ------------------------------------------------------------------------------------------------ view
#: What the live view shows, read from its DOM in the page (the page ships no test hook): the nodes, every drawn
#: link with its state, the events listed, and on the orbit map the plan second, positions, link traffic, bundles.
SHOWN = """JSON.stringify((() => {
  const mode = document.body.dataset.mode || "";
  const shown = {
    nodes: [...document.querySelectorAll("g.node")].map(g => g.dataset.node),
    links: [...document.querySelectorAll("line.link")].map(l => [l.dataset.src, l.dataset.dst, l.dataset.state]),
    events: document.querySelectorAll("#events li").length,
    mode,
  };
  if (mode === "map") {
    shown.t_plan = Number(document.body.dataset.tPlan);
    shown.pos = Object.fromEntries([...document.querySelectorAll("g.node")].map(
      g => [g.dataset.node, [Number(g.dataset.lat), Number(g.dataset.lon)]]));
    shown.link_bps = Object.fromEntries([...document.querySelectorAll("text.link-rate")].map(
      t => [t.dataset.src + "-" + t.dataset.dst, Number(t.dataset.bps)]));
    shown.bundles = Object.fromEntries([...document.querySelectorAll("g.node text.bundles")].map(
      t => [t.parentNode.dataset.node, parseInt(t.textContent)]));
  }
  return shown;
})())"""


def watch_view(url: str, profile: Path) -> tuple[HeadlessPage, PageWatch]:
    """The view at `url` in headless Chromium, what it shows read every 0.1 s (tests/integration/headless.py)."""
    page = HeadlessPage(url, profile)
    return page, PageWatch(page, SHOWN)


def start_view(name: str, wrapper: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([*wrapper, sys.executable, "-m", "swarm", "view", name, "--port", "0"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    import re

    found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    assert found, line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, found.group(1)


def link_state(shown: dict, a: str, b: str) -> str | None:
    return next((s for x, y, s in shown["links"] if {x, y} == {a, b}), None)


def test_the_live_view_in_headless_chromium_sees_a_cut_within_2_s(four, tmp_path):
    require("chromium", chromium() is not None, "chromium not installed (Debian package chromium)")
    view, url = start_view("obs-four")
    browser = collector = None
    try:
        browser, collector = watch_view(url, tmp_path / "c")
        first = collector.wait(lambda s: len(s["nodes"]) == 4, 60)
        assert first, "the page never showed the swarm"
        shown = first[1]
        assert sorted(shown["nodes"]) == ["sat01", "sat02", "sat03", "sat04"]
        assert len(shown["links"]) == 6  # every pair of 4 nodes on the ISL bridge
        assert link_state(shown, "sat01", "sat02") == "impaired" and link_state(shown, "sat02", "sat04") == "impaired"
        res = cli("fault", "obs-four", "cut", "sat02", "sat04")
        done = time.time()
        assert res.returncode == 0, res.stderr
        seen = collector.wait(lambda s: link_state(s, "sat02", "sat04") == "cut", 10)
        assert seen, "the page never showed the cut"
        assert seen[0] - done <= 2.0, f"the cut showed {seen[0] - done:.2f} s after `swarm fault cut` returned"
        print(f"view: the cut showed {seen[0] - done:.2f} s after `swarm fault cut` returned")
        assert shown["events"] >= 1
        # the screenshot docs/OBSERVE.md shows: the cut link, the impaired one, the events, traffic sat01 -> sat03
        traffic = subprocess.Popen(["ip", "netns", "exec", node_ns("obs-four", "sat01"), "ping", "-q", "-i", "0.002",
                                    "-s", "1200", "-w", "12", four.node("sat03").isl_ip],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)
        shot = REPO / "docs" / "view.png"
        res = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                              f"--user-data-dir={tmp_path}/s", "--window-size=1400,900", "--virtual-time-budget=4000",
                              f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
        traffic.wait(timeout=30)
        assert res.returncode == 0 and shot.stat().st_size > 20_000, res.stderr[-1000:]
        assert cli("fault", "obs-four", "heal", "sat02", "sat04").returncode == 0
        healed = collector.wait(lambda s: link_state(s, "sat02", "sat04") == "impaired", 10)
        assert healed, "the page never showed the heal"
    finally:
        if collector is not None:
            collector.stop()
        if browser is not None:
            browser.close()
        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=20) == 0


def test_view_port_in_use_exits_2_one_line(four):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = cli("view", "obs-four", "--port", str(port), timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and str(port) in res.stderr, res.stderr


def execs_between(trace: Path, start: float, end: float) -> int:
    """execve calls strace logged (-f -ttt: "PID EPOCH execve(...") from `start` to `end` (time.time())."""
    count = 0
    for line in trace.read_text(errors="replace").splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[2].startswith("execve(") and start <= float(parts[1]) <= end:
            count += 1
    return count


def test_the_view_polls_the_swarm_only_while_watched(four, tmp_path):
    """Nobody watching: the view starts no process (it used to start ~8 per second for 3 nodes); a page asking
    for the state twice a second: it polls again (issue 40, item 9). The view runs under strace from its start and
    ends by itself: attaching to it and detaching (strace -p, then SIGINT) hung strace for 30 s on a busy host."""
    require("strace", shutil.which("strace") is not None, "strace missing (Debian package strace)")
    import urllib.request

    trace = tmp_path / "view.strace"
    view, url = start_view("obs-four", ("strace", "-f", "-qq", "-ttt", "-e", "trace=execve", "-o", str(trace)))
    try:
        time.sleep(2.0)
        t0 = time.time()
        time.sleep(6.0)
        t1 = time.time()
        while time.time() < t1 + 6.0:
            urllib.request.urlopen(url + "api/state", timeout=10).read()
            time.sleep(0.5)
        t2 = time.time()
    finally:
        children = Path(f"/proc/{view.pid}/task/{view.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGINT)  # the view itself: strace blocks signals sent to it
        assert view.wait(timeout=20) == 0  # strace exits with its tracee's status
    idle, watched = execs_between(trace, t0, t1), execs_between(trace, t1, t2)
    print(f"view of 4 nodes: {idle / 6.0:.1f} processes/s with nobody watching, {watched / 6.0:.1f} watched")
    assert idle == 0, f"{idle} processes started in 6 s with nobody watching"
    assert watched > 0
