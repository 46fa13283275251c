"""Kernel lab: boot Debian's generic kernel under qemu and run commands in it, so the parts of this project that
need kernel modules this host lacks (sch_netem, batman-adv) run for real in CI.

    python tests/kernel_lab/klab.py build          # download + build (cached by content hash), print the paths
    python tests/kernel_lab/klab.py run -- CMD...  # boot, run CMD in the guest, print its output, exit with its code
    python tests/kernel_lab/klab.py time           # boot, run `true`, power off: boot and per-command cost

What it builds, outside the repository (~/.cache/swarm-emu/kernel-lab/<key>/; <key> hashes the Debian
packages' SHA256, init.sh and this builder's format, so a new kernel upload or a changed init rebuilds):
- vmlinuz and the module tree of `linux-image-<abi>-amd64-unsigned` (the generic flavour: `-cloud` lacks
  batman-adv and 9p), fetched with `apt-get download`, unpacked with `dpkg -x`, indexed with `depmod -b`;
- a ~1.5 MB initramfs: busybox-static (`apt-get download busybox-static`, not installed), init.sh, and the few
  modules needed to reach the root filesystem (9p over virtio, overlay).

How the guest looks: its root is the HOST's root filesystem, shared read-only over 9p, under a tmpfs overlay.
So the project's venv, iperf3, batctl, batmand, nft and Python inside the guest are the host's own (nothing to
keep in sync), while whatever the guest writes (swarm state, /run/netns) lives and dies in guest memory. The
guest kernel's module tree is bind-mounted from the cache, so modprobe loads sch_netem, batman-adv, nf_tables
on demand; so does the kernel for iptables-nft (nft_compat, xt_NFQUEUE, xt_mac, nfnetlink_queue) and for
`-m physdev` (xt_physdev, br_netfilter), as the cross-check showed: no module list to keep. PID 1 is agent.py (the host's /usr/bin/python3), which runs jobs handed over a second 9p folder.

Acceleration: KVM where /dev/kvm works (probed once per host kernel + qemu version, the verdict cached), else
TCG (software emulation). On PVM-guest hosts KVM aborts ("failed to set MSR 0x10a"), so TCG it is; the lab
says which it used. Needs qemu-system-x86 (Debian's; `make setup` installs it) and kmod (depmod, and modprobe
in the guest). Nothing here needs qemu-utils; installing Debian 12's qemu-system-x86 may replace a newer
qemu-utils from backports.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SWARM_EMU_CACHE", Path.home() / ".cache" / "swarm-emu")) / "kernel-lab"
BUILD_FORMAT = 1  # bump when the layout of a build changes
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")  # what init.sh needs before the root exists
GUEST_PYTHON = "/usr/bin/python3"  # runs agent.py (standard library only)
QEMU = "qemu-system-x86_64"


class LabUnavailable(RuntimeError):
    """The lab cannot run on this host (no qemu, no kmod, no Debian archive ...): a reason to skip."""


def log(msg: str) -> None:
    print(f"kernel-lab: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------- build
def _run(argv: list[str], **kw) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, **kw)
    except FileNotFoundError as exc:
        raise LabUnavailable(f"{argv[0]} not found ({exc})") from exc
    if res.returncode != 0:
        raise LabUnavailable(f"{' '.join(argv)} failed: {(res.stderr or res.stdout).strip()[-300:]}")
    return res.stdout


def kernel_package() -> str:
    """The generic kernel's unsigned package of the archive's current ABI ($KERNEL_LAB_PACKAGE overrides)."""
    if os.environ.get("KERNEL_LAB_PACKAGE"):
        return os.environ["KERNEL_LAB_PACKAGE"]
    for line in _run(["apt-cache", "depends", "linux-image-amd64"]).splitlines():
        dep = line.strip().removeprefix("Depends:").strip()
        if line.strip().startswith("Depends:") and dep.startswith("linux-image-") and dep.endswith("-amd64"):
            return dep + "-unsigned"
    raise LabUnavailable("apt-cache depends linux-image-amd64 names no linux-image-<abi>-amd64 "
                         "(run apt-get update; Debian archive needed)")


def apt_candidate(package: str) -> dict[str, str]:
    """Version and SHA256 of the package apt would download."""
    fields = {}
    for line in _run(["apt-cache", "show", "--no-all-versions", package]).splitlines():
        key, _, value = line.partition(": ")
        if key in ("Package", "Version", "SHA256"):
            fields.setdefault(key, value.strip())
    if "SHA256" not in fields:
        raise LabUnavailable(f"apt-cache show {package}: no candidate (run apt-get update)")
    return fields


@dataclasses.dataclass(frozen=True)
class Image:
    """One build: the kernel, the initramfs and the module tree (root of lib/modules/<kver>) of the guest."""

    key: str
    dir: Path
    kver: str

    @property
    def vmlinuz(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initramfs.cpio.gz"

    @property
    def modules_root(self) -> Path:
        return self.dir / "modules"


def image_key(kernel: dict, busybox: dict) -> str:
    h = hashlib.sha256()
    for part in (str(BUILD_FORMAT), kernel["SHA256"], busybox["SHA256"], " ".join(BOOT_MODULES),
                 (HERE / "init.sh").read_text()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def _cpio_newc(entries: list[tuple[str, int, bytes, int]]) -> bytes:
    """A newc cpio archive (the initramfs format) of (name, mode, data, rdev) entries; rdev for device nodes."""
    out = bytearray()

    def pad():
        out.extend(b"\0" * (-len(out) % 4))

    for ino, (name, mode, data, rdev) in enumerate(entries + [("TRAILER!!!", 0, b"", 0)], start=1):
        nb = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF, len(nb), 0)
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields) + nb)
        pad()
        out.extend(data)
        pad()
    return bytes(out)


def _boot_modules(root: Path, kver: str) -> list[str]:
    """Paths (relative to lib/modules/<kver>) of BOOT_MODULES and their dependencies, in load order."""
    order: list[str] = []
    prefix = f"{root}/lib/modules/{kver}/"
    for mod in BOOT_MODULES:
        for line in _run(["modprobe", "-d", str(root), "-S", kver, "--show-depends", mod]).splitlines():
            parts = line.split()
            if parts and parts[0] == "insmod" and parts[1].startswith(prefix):
                rel = parts[1][len(prefix):]
                if rel not in order:
                    order.append(rel)
    return order


def build(progress=log) -> Image:
    """The guest image for the archive's current kernel: from the cache, or downloaded and built (a minute)."""
    for tool in ("apt-get", "apt-cache", "dpkg", "depmod", "modprobe"):
        if not shutil.which(tool):
            raise LabUnavailable(f"{tool} not found (Debian host with kmod needed: apt-get install kmod)")
    kpkg = kernel_package()
    kernel, busybox = apt_candidate(kpkg), apt_candidate("busybox-static")
    key = image_key(kernel, busybox)
    dest = CACHE / key
    kver = kpkg.removeprefix("linux-image-").removesuffix("-unsigned")
    image = Image(key, dest, kver)
    if (dest / "built").exists():
        return image
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits, then finds the build done
        if (dest / "built").exists():
            return image
        progress(f"building guest image {key}: {kpkg} {kernel['Version']} + busybox-static {busybox['Version']}")
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=CACHE))
        try:
            _run(["apt-get", "download", "-q", f"{kpkg}={kernel['Version']}",
                  f"busybox-static={busybox['Version']}"], cwd=tmp)
            for deb in tmp.glob("*.deb"):
                got = hashlib.sha256(deb.read_bytes()).hexdigest()
                want = kernel["SHA256"] if deb.name.startswith("linux-image") else busybox["SHA256"]
                if got != want:
                    raise LabUnavailable(f"{deb.name}: SHA256 {got} is not the archive's {want}")
            kroot, broot = tmp / "kernel", tmp / "busybox"
            _run(["dpkg", "-x", str(next(tmp.glob("linux-image-*.deb"))), str(kroot)])
            _run(["dpkg", "-x", str(next(tmp.glob("busybox-static_*.deb"))), str(broot)])
            _run(["depmod", "-b", str(kroot), kver])
            mods = _boot_modules(kroot, kver)
            mdir = kroot / "lib" / "modules" / kver
            entries = [("bin", 0o40755, b"", 0), ("dev", 0o40755, b"", 0), ("proc", 0o40755, b"", 0),
                       ("sys", 0o40755, b"", 0), ("modules", 0o40755, b"", 0),
                       ("dev/console", 0o20600, b"", (5 << 8) | 1),
                       ("bin/busybox", 0o100755, (broot / "bin" / "busybox").read_bytes(), 0),
                       ("init", 0o100755, (HERE / "init.sh").read_bytes(), 0),
                       ("modules.order", 0o100644, "".join(Path(m).name + "\n" for m in mods).encode(), 0)]
            entries += [(f"modules/{Path(m).name}", 0o100644, (mdir / m).read_bytes(), 0) for m in mods]
            staged = tmp / "out"
            (staged / "modules" / "lib" / "modules").mkdir(parents=True)
            (staged / "initramfs.cpio.gz").write_bytes(gzip.compress(_cpio_newc(entries), compresslevel=6))
            shutil.copy(kroot / "boot" / f"vmlinuz-{kver}", staged / "vmlinuz")
            mdir.rename(staged / "modules" / "lib" / "modules" / kver)
            (staged / "build.json").write_text(json.dumps({"kernel": kernel, "busybox": busybox, "kver": kver,
                                                           "boot_modules": mods}, indent=1))
            if dest.exists():
                shutil.rmtree(dest)
            staged.rename(dest)
            (dest / "built").write_text("")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        progress(f"built {dest} in {time.monotonic() - t0:.0f} s")
    return image


# -------------------------------------------------------------------------------------------------- boot
@dataclasses.dataclass
class Result:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float  # inside the guest

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def check(self) -> "Result":
        if self.rc != 0:
            raise AssertionError(f"guest: {' '.join(self.argv)[:200]} exited {self.rc}\n--- stdout\n"
                                 f"{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")
        return self


def _kvm_verdict_path() -> Path:
    qemu = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    tag = hashlib.sha256(f"{os.uname().release}|{qemu}".encode()).hexdigest()[:12]
    return CACHE / f"kvm-{tag}.json"


def _accel_wanted() -> tuple[str, str]:
    """('kvm'|'tcg', why): $KERNEL_LAB_ACCEL, else KVM unless /dev/kvm is missing or failed here before."""
    env = os.environ.get("KERNEL_LAB_ACCEL", "auto")
    if env in ("kvm", "tcg"):
        return env, "KERNEL_LAB_ACCEL"
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as exc:
        return "tcg", f"/dev/kvm unusable ({exc.strerror})"
    verdict = _kvm_verdict_path()
    if verdict.exists():
        known = json.loads(verdict.read_text())
        return ("kvm", "worked before") if known["works"] else ("tcg", f"KVM failed on this host: {known['why']}")
    return "kvm", "probing"


class KernelLab:
    """One running guest: boot() once, run() many commands, close() powers it off (also on errors)."""

    def __init__(self, image: Image, *, mem_mb: int = 1024, smp: int = 1, accel: str | None = None,
                 progress=log):
        self.image, self.mem_mb, self.smp, self.progress = image, mem_mb, smp, progress
        self.accel_forced = accel
        self.accel = ""
        self.accel_why = ""
        self.boot_s = 0.0
        self.guest_uptime = 0.0
        self.kernel = ""
        self.proc: subprocess.Popen | None = None
        self.work: Path | None = None
        self._n = 0

    # qemu -------------------------------------------------------------------------------------------
    def _argv(self, accel: str) -> list[str]:
        cpu = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]
        append = ("console=ttyS0 quiet loglevel=3 panic=-1 "
                  f"kl.modules={self.image.modules_root} kl.agent={HERE / 'agent.py'} kl.python={GUEST_PYTHON}")
        return [QEMU, *cpu, "-m", str(self.mem_mb), "-smp", str(self.smp), "-nographic", "-nodefaults",
                "-no-user-config", "-no-reboot", "-serial", f"file:{self.work}/console.log",
                "-kernel", str(self.image.vmlinuz), "-initrd", str(self.image.initrd), "-append", append,
                # the host's root, read-only; multidevs=remap keeps inode numbers unique across host mounts
                "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
                "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
                "-fsdev", f"local,id=kl,path={self.work},security_model=none",
                "-device", "virtio-9p-pci,fsdev=kl,mount_tag=kl"]

    def _start(self, accel: str, timeout: float) -> bool:
        """Start qemu and wait for the agent's ready file; False if qemu died or timed out (console kept)."""
        for p in self.work.iterdir():
            if p.is_file():
                p.unlink()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self._argv(accel), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(self.work / "qemu.err", "w"), start_new_session=True)
        ready = self.work / "ready"
        while time.monotonic() - t0 < timeout:
            if ready.exists():
                info = json.loads(ready.read_text())
                self.boot_s = time.monotonic() - t0
                self.guest_uptime, self.kernel = info["uptime"], info["kernel"]
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        self._kill()
        return False

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def boot(self, timeout: float = 180.0) -> "KernelLab":
        if not shutil.which(QEMU):
            raise LabUnavailable(f"{QEMU} not found (apt-get install qemu-system-x86)")
        (CACHE / "runs").mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="kl-", dir=CACHE / "runs"))
        accel, why = (self.accel_forced, "asked") if self.accel_forced else _accel_wanted()
        if accel == "kvm":
            ok = self._start("kvm", min(timeout, 60.0))
            if why == "probing":
                failure = "" if ok else self._failure()
                _kvm_verdict_path().write_text(json.dumps({"works": ok, "why": failure[:300]}))
                why = "probed: works" if ok else f"probed: {failure[:120]}"
            if ok:
                self.accel, self.accel_why = "kvm", why
                return self
            accel, why = "tcg", f"KVM failed ({why})"
        if not self._start(accel, timeout):
            failure = self._failure()
            self.close()
            raise RuntimeError(f"kernel lab: guest did not come up under {accel}: {failure}")
        self.accel, self.accel_why = accel, why
        return self

    def _failure(self) -> str:
        text = ""
        for name in ("qemu.err", "agent.err", "console.log"):
            p = self.work / name
            if p.exists() and p.read_text(errors="replace").strip():
                text += f"[{name}] " + p.read_text(errors="replace").strip()[-600:] + " "
        return text.strip() or "no output"

    def describe(self) -> str:
        return (f"guest {self.kernel} under {self.accel.upper()} ({self.accel_why}); {self.smp} vCPU, "
                f"{self.mem_mb} MB; agent ready {self.boot_s:.1f} s after qemu started")

    # jobs -------------------------------------------------------------------------------------------
    def run(self, cmd: str | list[str], *, timeout: float = 300.0, env: dict | None = None, cwd: str | None = None,
            echo: bool = False) -> Result:
        """Run `cmd` (argv, or a string for /bin/sh -c) in the guest; returns its output and exit code.
        echo: copy the guest's stderr to ours as it comes (progress of long jobs)."""
        if not self.proc or self.proc.poll() is not None:
            raise RuntimeError(f"kernel lab: guest is not running ({self._failure() if self.work else ''})")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        self._n += 1
        stem = self.work / "jobs" / f"{self._n:05d}"
        job = {"argv": argv, "timeout": timeout, "env": env or {}, "cwd": cwd}
        tmp = self.work / f"{self._n:05d}.tmp"
        tmp.write_text(json.dumps(job))
        tmp.rename(stem.with_suffix(".job"))
        rc_path, err_path = stem.with_suffix(".rc"), stem.with_suffix(".err")
        deadline = time.monotonic() + timeout + 30
        shown = 0
        while not rc_path.exists():
            if echo and err_path.exists():
                data = err_path.read_bytes()[shown:]
                if data:
                    sys.stderr.write(data.decode(errors="replace"))
                    shown += len(data)
            if self.proc.poll() is not None:
                raise RuntimeError(f"kernel lab: guest stopped during {argv}: {self._failure()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kernel lab: no answer to {argv} within {timeout + 30:.0f} s")
            time.sleep(0.05)
        status = json.loads(rc_path.read_text())
        out = stem.with_suffix(".out").read_text(errors="replace")
        err = err_path.read_text(errors="replace")
        if echo and len(err.encode()) > shown:
            sys.stderr.write(err.encode()[shown:].decode(errors="replace"))
        return Result(argv, status["rc"], out, err, status["seconds"])

    def close(self, timeout: float = 30.0) -> None:
        """Power the guest off (the agent does it on /kl/stop); kill qemu if it does not go."""
        if self.proc and self.proc.poll() is None:
            (self.work / "stop").write_text("")
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        if self.work and os.environ.get("KERNEL_LAB_KEEP") != "1":
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> "KernelLab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def save_figures(name: str, figures: dict) -> Path:
    """Keep a guest run's figures outside the repository (~/.cache/swarm-emu/kernel-lab/results/<name>.json), so
    a failed tolerance can be looked at after the run."""
    path = CACHE / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=1))
    return path


# --------------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["build", "run", "time"])
    ap.add_argument("cmd", nargs="*", help="run: the command (argv; one argument is run by /bin/sh -c)")
    ap.add_argument("--mem", type=int, default=1024, help="guest memory, MB")
    ap.add_argument("--smp", type=int, default=1, help="guest vCPUs")
    ap.add_argument("--timeout", type=float, default=600, help="run: seconds")
    args = ap.parse_args(argv)
    try:
        image = build()
    except LabUnavailable as exc:
        log(f"unavailable: {exc}")
        return 3
    if args.what == "build":
        print(image.dir)
        return 0
    t0 = time.monotonic()
    with KernelLab(image, mem_mb=args.mem, smp=args.smp).boot() as lab:
        log(lab.describe())
        if args.what == "time":
            costs = [lab.run("true").seconds for _ in range(3)]
            t1 = time.monotonic()
            res = lab.run(["/work/main/.venv/bin/python", "-c", "import swarm.cli.main"]
                          if Path("/work/main/.venv").exists() else ["true"])
            log(f"`true` round trip {(time.monotonic() - t1) * 1000:.0f} ms (in guest {costs})")
            log(f"import of the swarm CLI in the guest: {res.seconds:.1f} s")
            rc = 0
        else:
            cmd = args.cmd[0] if len(args.cmd) == 1 else args.cmd
            res = lab.run(cmd, timeout=args.timeout, echo=True)
            sys.stdout.write(res.stdout)
            rc = res.rc
    log(f"total {time.monotonic() - t0:.1f} s (boot {lab.boot_s:.1f} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
