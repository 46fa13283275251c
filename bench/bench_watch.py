#!/usr/bin/env python3
"""Benchmark the cost of watching (issue 28): the n=32 mux UDP sweep (experiments/bench-watch-udp32.yaml)
without and with `swarm view` open in headless Chromium and `swarm events --json` following the swarm;
prints the system throughput and loss per rate and the ratio with ÷ without, as Markdown for BENCHMARKS.md.

Usage (root, netns): flock /tmp/swarm-emu-itest.lock python bench/bench_watch.py
"""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd

from analysis.tables import summarize

ROOT = Path(__file__).resolve().parents[1]
EXP = ROOT / "bench" / "bench-watch-udp32.yaml"
SWARM = "obs-watch-udp32-n32"


def watch(stop: threading.Event, procs: list, out: Path) -> None:
    """Once the sweep's swarm is up: the view (and a browser on it) and the event follower, until `stop`."""
    state = ROOT / ".swarm" / SWARM / "events.jsonl"
    while not stop.is_set() and not state.exists():
        time.sleep(0.2)
    if stop.is_set():
        return
    view = subprocess.Popen([sys.executable, "-m", "swarm", "view", SWARM, "--port", "0"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(view)
    url = re.search(r"(http://\S+/)", view.stderr.readline()).group(1)
    chromium = shutil.which("chromium")
    procs.append(subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={out}/chromium",
                                   "--window-size=1400,900", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True))
    with open(out / "events.jsonl", "w") as f:
        procs.append(subprocess.Popen([sys.executable, "-m", "swarm", "events", SWARM, "--json"], cwd=ROOT, stdout=f,
                                      stderr=subprocess.DEVNULL))
    print(f"  watching {SWARM}: view {url}, chromium, events", flush=True)


def sweep(results: Path, watched: bool) -> pd.DataFrame:
    stop, procs = threading.Event(), []
    results.mkdir(parents=True, exist_ok=True)
    watcher = threading.Thread(target=watch, args=(stop, procs, results), daemon=True) if watched else None
    if watcher:
        watcher.start()
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "swarm", "sweep", str(EXP), "--results", str(results), "--no-report"],
                         cwd=ROOT, capture_output=True, text=True)
    stop.set()
    for p in procs:
        p.send_signal(signal.SIGINT) if p.args[0] == sys.executable else p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    if res.returncode != 0:
        sys.exit(f"sweep failed: {res.stderr[-2000:]}")
    run = max(d for d in results.iterdir() if (d / "flows.csv").exists())
    print(f"  {'with' if watched else 'without'} watching: {time.monotonic() - t:.0f} s -> {run}", flush=True)
    s = summarize(pd.read_csv(run / "flows.csv"))
    return s.set_index("rate")[["flows", "flows_in_error", "system_bps", "median_loss_pct"]]


def main() -> None:
    out = ROOT / "results" / f"bench-watch-{time.strftime('%Y%m%dT%H%M%S')}"
    off = sweep(out / "without", False)
    on = sweep(out / "with", True)
    print("\n| rate per flow | flows ok without / with | system Mbit/s without | with | with ÷ without "
          "| median loss % without | with |\n|---|---|---|---|---|---|---|")
    for rate in off.index:
        a, b = off.loc[rate], on.loc[rate]
        print(f"| {rate} | {a.flows - a.flows_in_error} / {b.flows - b.flows_in_error} | {a.system_bps / 1e6:.1f} | "
              f"{b.system_bps / 1e6:.1f} | {b.system_bps / a.system_bps:.3f} | {a.median_loss_pct:.3g} | "
              f"{b.median_loss_pct:.3g} |")
    events = out / "with" / "events.jsonl"
    print(f"\nevents followed while watching: {sum(1 for _ in open(events)) if events.exists() else 0}; run folder {out}")


if __name__ == "__main__":
    main()
