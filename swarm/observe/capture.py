"""`swarm capture`: pcapng of one node's interface, or of one directed link taken at both ends.

Captured from the host, inside the node's network namespace (netns: `ip netns exec <ns>`; compose: `nsenter
-t <container pid> -n`), with Debian's `dumpcap` (wireshark-common): the node image needs no tools and the
capture sees exactly what the node's interface sees. Why dumpcap rather than tcpdump: it writes pcapng (one
file may hold several interfaces and comments), has the ring buffer and the duration stop built in, and its
`mergecap`/`editcap` siblings put the two ends of a link into one file with a capture comment naming them.

A directed link A -> B is taken at A's ISL interface (egress: what A sent to B) and at B's (ingress: what
reached B), both with the capture filter `ether src <A's MAC> and ether dst <B's MAC>`; the two files are
merged into one pcapng with two interfaces (0: sender egress, 1: receiver ingress), in time order, so
Wireshark (`frame.interface_id`) shows side by side what the link did. Where the engines act: the userspace
engine between the two points (netns: at the swarm's switch), so egress shows what was sent and ingress what
arrived; nft drops at the receiver's netdev ingress hook, which runs after the capture tap, so the ingress
capture still shows the packets nft then drops; kernel NetEm acts in the sender's qdisc, before the egress
tap, so the egress capture then shows what left the qdisc.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compose.render import container_name
from flightsw import protocol as proto
from swarm.errors import RuntimeFailure, SpecError
from swarm.mesh.plan import BATADV_IF, enslaved_interfaces
from swarm.runtime.runner import Runner
from swarm.spec.model import NodePlan

IFACES = ("isl", "ground")
START_TIMEOUT = 15.0  # seconds dumpcap gets to open the interface and write the file's first blocks
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class CaptureEnd:
    """One dumpcap: a node's interface (by network), an optional capture filter, a label for the file."""

    node: str
    network: str  # isl | ground
    label: str  # e.g. "sat01 isl egress (sender)"
    filter: str = ""


def link_ends(src: NodePlan, dst: NodePlan) -> list[CaptureEnd]:
    """The two ends of the directed link src -> dst: src's egress and dst's ingress, same filter (pure)."""
    if src.name == dst.name:
        raise SpecError(f"--link: {src.name!r} twice: give two different nodes")
    filt = f"ether src {src.isl_mac.lower()} and ether dst {dst.isl_mac.lower()}"
    return [CaptureEnd(src.name, "isl", f"{src.name} isl egress (sender of {src.name}->{dst.name})", filt),
            CaptureEnd(dst.name, "isl", f"{dst.name} isl ingress (receiver of {src.name}->{dst.name})", filt)]


def node_end(node: NodePlan, network: str) -> CaptureEnd:
    if network not in IFACES:
        raise SpecError(f"--iface {network!r}: expected one of {', '.join(IFACES)}")
    return CaptureEnd(node.name, network, f"{node.name} {network} (both directions)")


def dumpcap_argv(iface: str, out: str, *, filt: str = "", snaplen: int = 0, duration: float | None = None,
                 ring: tuple[int, int] | None = None) -> list[str]:
    """dumpcap's argv (pure). `ring`: (file size in kB, number of files) for a bounded ring buffer."""
    argv = ["dumpcap", "-i", iface, "-w", out, "-n"]  # -n: pcapng
    if filt:
        argv += ["-f", filt]
    if snaplen:
        argv += ["-s", str(snaplen)]
    if duration:
        argv += ["-a", f"duration:{max(1, round(duration))}"]
    if ring:
        argv += ["-b", f"filesize:{ring[0]}", "-b", f"files:{ring[1]}"]
    return argv


def check_output(path: Path, force: bool = False) -> None:
    """-o, before anything starts (SpecError, one line): refused when it exists and `force` is not given, when
    it is not a regular file (a FIFO would hang dumpcap, a device or folder is no capture file) or when its
    folder is missing. It is never opened: the capture is written in a folder made beside it and renamed onto
    it at the end, so a link there is replaced, never written through."""
    if path.is_dir() and not path.is_symlink():
        raise SpecError(f"-o {str(path)!r}: is a directory")
    if os.path.lexists(path):
        mode = os.lstat(path).st_mode
        if not force:
            link = " (a symbolic link)" if stat.S_ISLNK(mode) else ""
            raise SpecError(f"-o {str(path)!r}: already exists{link}; give --force to replace it")
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise SpecError(f"-o {str(path)!r}: not a regular file; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise SpecError(f"-o {str(path)!r}: no such directory {str(parent)!r}")


def check_duration(duration: float | None) -> None:
    """--duration: whole seconds, at least 1 (dumpcap stops on whole seconds); SpecError, one line."""
    if duration is not None and not (math.isfinite(duration) and duration >= 1 and float(duration).is_integer()):
        raise SpecError(f"--duration {duration:g}: whole seconds, at least 1 (dumpcap stops on whole seconds)")


def host_netns_prefix(swarm, node: str) -> list[str]:
    """argv prefix that runs a HOST program in `node`'s network namespace (host tools, not the image's)."""
    backend = swarm.backend
    if not backend.traits.containers:  # netns: `ip netns exec <ns>` runs the host's own tools already
        return backend.exec_prefix(swarm.name, node)
    if not backend.traits.multi_host:  # compose: the container's namespace, entered through its main process
        res = swarm.runner.run([*backend.docker, "inspect", "-f", "{{.State.Pid}}", container_name(swarm.name, node)],
                               check=False, timeout=30)
        pid = res.stdout.strip()
        if not res.ok or not pid.isdigit() or pid == "0":
            raise RuntimeFailure(f"node {node!r}: not running (no container process to capture in)")
        return ["nsenter", "-t", pid, "-n"]
    raise SpecError(f"capture: backend {backend.traits.name!r}: nodes on other hosts cannot be captured from this one "
                    "(use `swarm exec NAME NODE tcpdump ...` where the image has it)")


def interface_of(runner: Runner, prefix: list[str], ip: str, node: str) -> str:
    """The interface holding `ip` in the namespace (under batman-adv: the hard interface below bat0)."""
    res = runner.run([*prefix, "ip", "-o", "-4", "addr", "show", "to", f"{ip}/32"], check=False, timeout=30)
    fields = res.stdout.split()
    if not res.ok or len(fields) < 2:
        raise RuntimeFailure(f"node {node!r}: no interface holds {ip} (is the node running?)")
    iface = fields[1].split("@")[0]
    if iface == BATADV_IF:
        res = runner.run([*prefix, "ip", "-o", "link", "show", "master", BATADV_IF], check=False, timeout=30)
        under = enslaved_interfaces(res.stdout) if res.ok else []
        iface = under[0] if under else iface
    return iface


MAX_COMMENTS = 8000  # editcap takes one argument per comment; beyond this only losses are annotated, then none


def link_comments(frames: list[tuple[int, int, float, str]], src: str, dst: str) -> tuple[dict[int, str], dict]:
    """Packet comments for a link's merged capture, from what the two taps saw (pure): `frames` are
    (frame number, interface 0 = egress | 1 = ingress, time, hash of the frame's bytes), in file order. A
    bridge forwards a frame unchanged, so a frame's bytes identify it at both ends (copies matched first in,
    first out). Returns ({frame: comment}, counts). These are measurements at the two ends, not the engine's
    own decisions (swarm-linkd keeps no per-packet record)."""
    sent: dict[str, list[tuple[int, float]]] = {}
    for num, iface, t, digest in frames:
        if iface == 0:
            sent.setdefault(digest, []).append((num, t))
    arrived: dict[int, tuple[int, float]] = {}  # egress frame -> (ingress frame, delay s)
    copies: dict[str, int] = {}
    comments: dict[int, str] = {}
    counts = {"sent": 0, "arrived": 0, "lost": 0, "duplicated": 0, "unmatched": 0}
    queue = {d: list(v) for d, v in sent.items()}
    for num, iface, t, digest in frames:
        if iface == 0:
            counts["sent"] += 1
            continue
        if queue.get(digest):
            e_num, e_t = queue[digest].pop(0)
            arrived[e_num] = (num, t - e_t)
            counts["arrived"] += 1
            comments[num] = f"swarm: {src}->{dst}: sent at egress frame {e_num}, {1000 * (t - e_t):.3f} ms earlier"
        elif digest in sent:
            copies[digest] = copies.get(digest, 0) + 1
            counts["duplicated"] += 1
            comments[num] = f"swarm: {src}->{dst}: a duplicate (one more copy than the sender sent)"
        else:
            counts["unmatched"] += 1
            comments[num] = f"swarm: {src}->{dst}: not sent as such by {src} (corrupted on the link?)"
    for num, iface, _t, _digest in frames:
        if iface != 0:
            continue
        if num in arrived:
            i_num, delay = arrived[num]
            comments[num] = f"swarm: {src}->{dst}: arrived at {dst} (ingress frame {i_num}) after {1000 * delay:.3f} ms"
        else:
            counts["lost"] += 1
            comments[num] = f"swarm: {src}->{dst}: never reached {dst}'s ingress (dropped or corrupted on the link)"
    if len(comments) > MAX_COMMENTS:
        comments = {n: c for n, c in comments.items() if "never reached" in c or "duplicate" in c or "not sent" in c}
        if len(comments) > MAX_COMMENTS:
            comments = {}
    return comments, counts


@dataclass
class Running:
    end: CaptureEnd
    iface: str
    file: Path
    log: Path
    proc: subprocess.Popen

    def packets(self) -> int | None:
        found = re.findall(r"Packets captured: (\d+)", self.log.read_text(errors="replace")) if self.log.exists() else []
        return int(found[-1]) if found else None


TMP_PREFIX = "swarm-capture-"
_TMP_RE = re.compile(re.escape(TMP_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")
_TMP_FILE_RE = re.compile(r"\d+-[a-z0-9-]+\.(pcapng|log)|merged\.pcapng|out\.pcapng")


def stale_capture_folders(parent: Path) -> list[Path]:
    """The temporary folders in `parent` of captures that were killed (SIGKILL leaves them): named
    swarm-capture-<pid>-..., a real folder of this user whose pid no longer runs, holding only a capture's
    files. Anything else with that name is left alone."""
    found = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        m = _TMP_RE.fullmatch(entry.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            st = os.lstat(entry.path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            os.kill(int(m.group(1)), 0)
            continue  # its capture still runs
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            if all(_TMP_FILE_RE.fullmatch(name) for name in os.listdir(entry.path)):
                found.append(Path(entry.path))
        except OSError:
            continue
    return found


class Capture:
    """Runs the dumpcaps of a selection in the swarm's node namespaces and writes one pcapng."""

    def __init__(self, swarm, ends: list[CaptureEnd], output: Path, *, snaplen: int = 0,
                 ring: tuple[int, int] | None = None, force: bool = False, die_with_parent: bool = False):
        self.swarm = swarm
        self.force = force  # replace an existing output (a link there is replaced, not followed)
        #: the dumpcaps end when the thread that starts them ends, however (`swarm capture` killed): a CLI's
        #: capture, started from its main thread; a run's captures (swarm.observe.runcapture) are stopped by
        #: the run, from threads that end before them
        self.die_with_parent = die_with_parent
        self.ends = ends
        self.output = output
        self.snaplen = snaplen
        self.ring = ring
        self.running: list[Running] = []
        self.tmp: Path | None = None
        #: (sender, receiver) of a directed link capture: its packets get comments saying what became of them
        self.link = (ends[0].node, ends[1].node) if len(ends) == 2 and ends[0].filter else None
        self.link_counts: dict = {}

    def start(self, duration: float | None = None) -> None:
        """Start every end; returns once each dumpcap has opened its interface. RuntimeFailure (nothing left
        running) when one does not."""
        if shutil.which("dumpcap") is None:
            raise SpecError("capture: dumpcap not installed (Debian package wireshark-common; `make setup`)")
        check_output(self.output, self.force)
        runner = self.swarm.runner
        for stale in stale_capture_folders(self.output.parent):  # a killed capture's: its dumpcaps died with it
            shutil.rmtree(stale, ignore_errors=True)
        try:  # 0700, a name nobody else has: what dumpcap writes is renamed onto the output at the end
            self.tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=self.output.parent))
        except OSError as exc:
            raise SpecError(f"-o {str(self.output)!r}: not writable ({exc.strerror})") from None
        try:
            resolved = []
            for end in self.ends:  # everything resolved before the first dumpcap starts
                plan = self.swarm.node(end.node)
                prefix = host_netns_prefix(self.swarm, end.node)
                ip = plan.isl_ip if end.network == "isl" else plan.ground_ip
                resolved.append((end, prefix, interface_of(runner, prefix, ip, end.node)))
            for i, (end, prefix, iface) in enumerate(resolved):
                file = self.tmp / f"{i}-{end.node}.pcapng"
                if self.ring:
                    file = self.output.parent / f"{self.output.stem}-{i}-{end.node}{self.output.suffix or '.pcapng'}"
                log = self.tmp / f"{i}-{end.node}.log"
                argv = [*prefix, *proto.labelled(dumpcap_argv(iface, str(file), filt=end.filter, snaplen=self.snaplen,
                                                              duration=duration, ring=self.ring),
                                                 proto.label(self.swarm.name, end.node))]
                proc = runner.start(argv, stdout_path=str(log), die_with_parent=self.die_with_parent)
                self.running.append(Running(end, iface, file, log, proc))
            self._wait_started()
        except BaseException:
            self.stop()
            self._cleanup()
            raise

    def _wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        pending = list(self.running)
        while pending:
            for r in list(pending):
                log = r.log.read_text(errors="replace") if r.log.exists() else ""
                if r.proc.poll() is not None:
                    raise RuntimeFailure(f"capture on {r.end.node} {r.iface}: dumpcap ended: "
                                         f"{log.strip().splitlines()[-1] if log.strip() else 'no output'}")
                if "Capturing on" in log and (self.ring or (r.file.exists() and r.file.stat().st_size > 0)):
                    pending.remove(r)
            if pending and time.monotonic() > deadline:
                raise RuntimeFailure(f"capture on {pending[0].end.node}: dumpcap did not start in {START_TIMEOUT:g} s")
            if pending:
                time.sleep(0.05)

    def wait(self) -> None:
        """Until every dumpcap ends (its duration) ; Ctrl-C (KeyboardInterrupt) stops them all first."""
        try:
            for r in self.running:
                r.proc.wait()
        except KeyboardInterrupt:
            self.stop()

    def stop(self) -> None:
        """SIGINT to every dumpcap still running (it closes its file cleanly), SIGKILL after STOP_TIMEOUT."""
        for r in self.running:
            if r.proc.poll() is None:
                try:
                    r.proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_TIMEOUT
        for r in self.running:
            try:
                r.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: force it
                r.proc.kill()
                r.proc.wait()

    def finish(self) -> list[tuple[str, int | None]]:
        """Merge the ends into the output (two ends: one pcapng with one interface per end, interface i =
        end i, and a capture comment naming them); returns (label, packets) per end."""
        counts = [(f"{r.end.label} on {r.iface}", r.packets()) for r in self.running]
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave half a file
        try:
            assert self.tmp is not None  # made by start(), which ran before any end was running
            if len(self.running) == 1 and not self.ring:
                self._publish(self.running[0].file)
            if len(self.running) > 1 and not self.ring:
                merged = self.tmp / "merged.pcapng"
                self.swarm.runner.run(["mergecap", "-F", "pcapng", "-I", "none", "-w", str(merged),
                                       *(str(r.file) for r in self.running)], timeout=600)
                comment = "; ".join(f"interface {i}: {r.end.label} on {r.iface}, filter '{r.end.filter}'"
                                    for i, r in enumerate(self.running))
                per_packet: list[str] = []
                if self.link and shutil.which("tshark"):
                    comments, self.link_counts = link_comments(self._frames(merged), *self.link)
                    per_packet = [a for num, text in sorted(comments.items()) for a in ("-a", f"{num}:{text}")]
                    comment += (f"; packet comments: what the two ends saw (frame matched by its bytes), "
                                f"{len(comments)} of {self.link_counts['sent'] + self.link_counts['arrived']} frames")
                self.swarm.runner.run(["editcap", "--capture-comment", f"swarm {self.swarm.name}: {comment}",
                                       *per_packet, str(merged), str(self.tmp / "out.pcapng")], timeout=600)
                self._publish(self.tmp / "out.pcapng")
        finally:
            self._cleanup()
            signal.signal(signal.SIGINT, previous)
        return counts

    def _publish(self, file: Path) -> None:
        """`file` becomes the output: renamed over it with --force (a link there is replaced), else hard-linked
        to the name, which fails if something took that name during the capture (then the file is kept)."""
        try:
            if self.force:
                os.replace(file, self.output)
            else:
                os.link(file, self.output)
        except OSError as exc:  # the name was taken meanwhile, or (a sticky folder) is someone else's
            kept = self.output.with_name(f"{self.output.name}.{os.getpid()}.pcapng")
            os.replace(file, kept)
            why = "appeared during the capture" if isinstance(exc, FileExistsError) else exc.strerror
            raise RuntimeFailure(f"-o {str(self.output)!r}: {why}; the capture is in {kept}") from None

    def _frames(self, path: Path) -> list[tuple[int, int, float, str]]:
        res = self.swarm.runner.run(["tshark", "-r", str(path), "-o", "frame.generate_md5_hash:TRUE", "-T", "fields",
                                     "-e", "frame.number", "-e", "frame.interface_id", "-e", "frame.time_epoch",
                                     "-e", "frame.md5_hash"], timeout=600, check=False)
        out = []
        for line in res.stdout.splitlines():
            f = line.split("\t")
            if len(f) == 4 and f[0].isdigit():
                out.append((int(f[0]), int(f[1] or 0), float(f[2]), f[3]))
        return out

    def _cleanup(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def capture(swarm, ends: list[CaptureEnd], output: Path, *, duration: float | None = None, snaplen: int = 0,
            started: Callable[[list[Running]], None] = lambda _r: None,
            force: bool = False) -> tuple[list[tuple[str, int | None]], dict]:
    """Capture `ends` into `output` for `duration` seconds or until Ctrl-C; (label, packets) per end, and for a
    link what became of its frames (sent, arrived, lost, duplicated, unmatched). SIGTERM and SIGHUP (the
    terminal gone) stop it like Ctrl-C, the file written; SIGKILL ends the dumpcaps with it (die_with_parent)
    and the next capture into that folder removes what it left. Call it from the main thread."""
    cap = Capture(swarm, ends, output, snaplen=snaplen, force=force, die_with_parent=True)
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        cap.start(duration)
        try:  # a kill that lands while `started` reports (before wait() listens for it) stops the dumpcaps too
            started(cap.running)
            cap.wait()
        except KeyboardInterrupt:
            cap.stop()
        return cap.finish(), cap.link_counts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")
