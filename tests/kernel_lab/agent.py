"""PID 1 of the kernel-lab guest (started by init.sh with the host's /usr/bin/python3; standard library only).

Protocol, over the 9p folder /kl shared read-write with the host (tests/kernel_lab/klab.py):
- the agent writes /kl/ready (JSON: guest uptime, kernel release) once it takes jobs;
- the host writes a job as /kl/jobs/<n>.job (JSON: argv, timeout, env, cwd; written elsewhere and renamed in,
  so the agent never reads half a job); the agent runs it with stdout -> <n>.out and stderr -> <n>.err (written
  as they come, so the host can show progress) and then renames <n>.rc.tmp to <n>.rc (JSON: rc, seconds);
- /kl/stop (or the agent's own failure) powers the guest off; qemu runs with -no-reboot and exits.

PID 1 forks: the child takes the jobs, PID 1 reaps every process orphaned in the guest (daemons of a job whose
parent exited) and powers off when the child ends. Jobs run in their own session; a job past its timeout has
its whole process group killed and rc 124.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import traceback

KL = "/kl"
JOBS = os.path.join(KL, "jobs")
POLL_S = 0.02
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
       "LANG": "C.UTF-8", "TERM": "dumb"}


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def write_json(path: str, data: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.rename(path + ".tmp", path)


def run_job(name: str) -> None:
    stem = os.path.join(JOBS, name[:-len(".job")])
    with open(os.path.join(JOBS, name)) as f:
        job = json.load(f)
    env = dict(ENV, **job.get("env", {}))
    t0 = time.monotonic()
    with open(stem + ".out", "wb") as out, open(stem + ".err", "wb") as err:
        try:
            proc = subprocess.Popen(job["argv"], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                    cwd=job.get("cwd") or "/", start_new_session=True)
        except OSError as exc:
            err.write(f"kernel-lab agent: cannot start {job['argv'][0]}: {exc}\n".encode())
            rc = 127
        else:
            try:
                rc = proc.wait(timeout=job.get("timeout"))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                err.write(f"\nkernel-lab agent: timed out after {job.get('timeout')} s\n".encode())
                rc = 124
    write_json(stem + ".rc", {"rc": rc, "seconds": round(time.monotonic() - t0, 3)})


def take_jobs() -> None:
    os.makedirs(JOBS, exist_ok=True)
    write_json(os.path.join(KL, "ready"), {"uptime": uptime(), "kernel": os.uname().release})
    done = set()
    while not os.path.exists(os.path.join(KL, "stop")):
        for name in sorted(os.listdir(JOBS)):
            if name.endswith(".job") and name not in done:
                done.add(name)
                run_job(name)
        time.sleep(POLL_S)


def power_off() -> None:
    os.sync()
    ctypes.CDLL(None, use_errno=True).reboot(0x4321FEDC)  # LINUX_REBOOT_CMD_POWER_OFF


def main() -> None:
    if os.getpid() != 1:  # by hand, for debugging
        take_jobs()
        return
    child = os.fork()
    if child == 0:
        code = 0
        try:
            take_jobs()
        except BaseException:
            code = 1
            with open(os.path.join(KL, "agent.err"), "w") as f:
                traceback.print_exc(file=f)
        os._exit(code)
    while True:
        try:
            pid, _ = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            break
    power_off()


if __name__ == "__main__":
    sys.exit(main())
