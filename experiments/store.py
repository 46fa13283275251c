"""The crash-safe results store of every experiment type: one folder per run with the experiment, the host's
facts, raw tool output under raw/, and tidy CSV tables appended (and fsynced) as results arrive; plus the
host sampler (CPU busy, memory used) that runs beside a test. Column names live here, so analysis/ can read
result files without the runtime."""
from __future__ import annotations

import csv
import json
import math
import os
import platform
import stat
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from experiments.timeline import FAULT_COLUMNS
from swarm.mesh.plan import MESH_COLUMNS
from swarm.errors import SpecError
from swarm.spec.documents import read_yaml
from swarm.runtime.private import write_private_text
from swarm.runtime.probe import capabilities

if TYPE_CHECKING:
    from experiments.base import ExperimentModel
    from swarm.runtime.swarm import Swarm

FLOW_COLUMNS = ["run_id", "test_id", "size", "protocol", "rate_bps", "repeat", "src", "dst", "port", "start_ts",
                "release_ts", "exit_ts", "ok", "error", "bits_per_second", "sent_bits_per_second", "lost_percent",
                "lost_packets", "packets", "jitter_ms",
                "window_bits_per_second", "window_lost_percent", "skew_s", "window_s", "duration_s",
                "receiver_s", "sender_s"]
TEST_COLUMNS = ["run_id", "test_id", "size", "protocol", "rate_bps", "repeat", "flows", "flows_ok", "duration_s",
                "release_ts", "release_spread_s", "skew_s", "window_s", "window_fraction", "cpu_busy_pct", "cpu_busy_max_pct",
                "mem_used_peak_mib", "setup_s", "wall_s", "clock_uncertainty_s"]

# ------------------------------------------------------------------------------------------- the store
class ResultsStore:
    """One folder per run: experiment.yaml, host.json, raw/<test>/<src>__<dst>.json, flows.csv, tests.csv."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir

    @classmethod
    def create(cls, root: Path, exp: ExperimentModel, host_facts: dict) -> "ResultsStore":
        run_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{exp.name}"
        store = cls(root / run_id)
        store.dir.mkdir(parents=True, exist_ok=False)
        (store.dir / "raw").mkdir()
        write_private_text(store.dir / "experiment.yaml", yaml.safe_dump(exp.model_dump(mode="json"), sort_keys=False))
        (store.dir / "host.json").write_text(json.dumps(host_facts, indent=1))
        return store

    @property
    def run_id(self) -> str:
        return self.dir.name

    def experiment_document(self) -> tuple[dict, str]:
        """The run's experiment as stored (a dict) and its path, read bounded like `swarm run FILE`
        (swarm.spec.documents.read_yaml); its type's model validates it."""
        path = self.dir / "experiment.yaml"
        if not path.exists():
            raise SpecError(f"{self.dir}: not a results folder (no experiment.yaml)")
        data = read_yaml(path, "experiment")
        if not isinstance(data, dict):
            raise SpecError(f"{path}: not an experiment (a YAML mapping expected, got {type(data).__name__})")
        return data, str(path)

    def completed_tests(self) -> set[str]:
        """The test_ids of tests.csv; SpecError (one line) for a tests.csv that cannot be read or has no
        test_id column, since trusting it would treat every measured test as unfinished. An empty file (a
        crash between its creation and its first row) holds no finished test."""
        path = self.dir / "tests.csv"
        if not path.exists():
            return set()
        columns, rows = read_table(path)
        if columns is None:
            return set()
        if "test_id" not in columns:
            raise SpecError(f"{path}: not a tests table (no test_id column); refusing to resume from it")
        return {test_id for r in rows if (test_id := _field(r, columns, "test_id"))}

    def check_tables(self) -> None:
        """Every table of the run readable (SpecError naming the file otherwise), checked before `--resume`
        touches anything."""
        self.completed_tests()
        for path in sorted(self.dir.glob("*.csv")):
            read_table(path)

    def drop_incomplete_flows(self) -> list[str]:
        """Move the rows of tests that never got their tests.csv row (a crash between the two) out of every
        other table of the run (flows.csv, faults.csv, bundles.csv, ...) into `<table>.dropped` beside it, so
        that running such a test again does not leave its rows twice and nothing measured is lost. Rows of no
        test (an empty test_id, e.g. mesh convergence after `up`) and tables without a test_id column are
        kept as they are. Returns one line per table that lost rows."""
        done = self.completed_tests()
        said = []
        for path in sorted(self.dir.glob("*.csv")):
            if path.name == "tests.csv":
                continue
            columns, rows = read_table(path)
            if columns is None or "test_id" not in columns:
                continue
            keep = [_field(r, columns, "test_id") in done or not _field(r, columns, "test_id") for r in rows]
            if all(keep):
                continue
            aside = path.with_name(path.name + ".dropped")
            _write_rows(aside, columns, [r for r, k in zip(rows, keep) if not k], append=True)
            _write_rows(path, columns, [r for r, k in zip(rows, keep) if k], append=False)
            said.append(f"{path.name}: {keep.count(False)} rows of tests that never finished moved to {aside}")
        return said

    def raw_path(self, test_id: str, flow_id: str) -> Path:
        d = self.dir / "raw" / test_id
        d.mkdir(parents=True, exist_ok=True)
        return d / f"{flow_id}.json"

    def _append(self, name: str, columns: list[str], rows: list[dict]) -> None:
        path = self.dir / name
        new = not path.exists() or path.stat().st_size == 0  # an empty table gets its header too
        if not new:  # a run folder written by an older version keeps its own columns
            with path.open(newline="") as f:
                columns = next(csv.reader(f), []) or columns
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())

    def append(self, name: str, columns: list[str], rows: list[dict]) -> None:
        """Append rows to the CSV file `name` of the run (other sweep types' tables, e.g. experiments.ddsperf)."""
        self._append(name, columns, rows)

    def append_flows(self, rows: list[dict]) -> None:
        self._append("flows.csv", FLOW_COLUMNS, rows)

    def append_test(self, row: dict) -> None:
        self._append("tests.csv", TEST_COLUMNS, [row])

    def append_mesh(self, rows: list[dict] | dict) -> None:
        """Mesh convergence rows (swarm.mesh.plan.MESH_COLUMNS): after `up` and after each fault of a timeline."""
        self._append("mesh.csv", MESH_COLUMNS, [rows] if isinstance(rows, dict) else rows)

    def append_faults(self, rows: list[dict]) -> None:
        """One row per timeline fault of a test: planned and actual application time (experiments.timeline)."""
        self._append("faults.csv", FAULT_COLUMNS, rows)


def read_table(path: Path) -> tuple[list[str] | None, list[list[str]]]:
    """(header, rows) of a CSV table of a run folder, (None, []) for an empty file; SpecError (one line
    naming the file) for one that is not a regular file, not UTF-8 or not CSV. Never blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    with os.fdopen(fd, encoding="utf-8", newline="") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SpecError(f"{path}: not a regular file; refusing to resume from it")
        try:
            rows = list(csv.reader(f))
        except UnicodeDecodeError as exc:
            raise SpecError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); "
                            "refusing to resume from it") from None
        except (csv.Error, OSError) as exc:
            raise SpecError(f"{path}: not a CSV table ({exc}); refusing to resume from it") from None
    return (rows[0], rows[1:]) if rows else (None, [])


def _field(row: list[str], columns: list[str], name: str) -> str:
    i = columns.index(name)
    return row[i] if i < len(row) else ""


def _write_rows(path: Path, columns: list[str], rows: list[list[str]], *, append: bool) -> None:
    """Write (or append) rows as read, with a header when the file starts empty, fsynced; a rewrite goes
    through a temp file so a crash leaves the old table or the new one."""
    new = not append or not path.exists() or path.stat().st_size == 0
    target = path if append else path.with_name(path.name + ".tmp")
    with target.open("a" if append else "w", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(columns)
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    if not append:
        target.replace(path)


def host_facts(swarm: Swarm | None = None) -> dict:
    """CPU, kernel, tools and backend of this host, stored with every run."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = _meminfo().get("MemTotal", 0)
    caps = capabilities()
    facts: dict[str, Any] = {"hostname": platform.node(), "cpu_count": os.cpu_count(), "cpu_model": model,
             "memory_gib": round(mem_kib / 2**20, 1), "kernel": platform.release(), "python": sys.version.split()[0],
             "iperf3": caps.iperf3_version, "docker": caps.docker_version, "compose": caps.compose_version,
             "sch_netem": caps.sch_netem, "batman_adv": caps.batman_adv}
    if swarm is not None:
        facts["backend"] = swarm.backend.name
        facts["impairment_engine"] = swarm.links.engine.name
        if swarm.links.placement():
            facts["userspace_engine"] = swarm.links.placement()
        if swarm.spec.links is not None and swarm.spec.links.tcp_buffers:
            facts["tcp_buffers"] = swarm.links.tcp_buffers()
        facts["image"] = swarm.image
        facts["mesh"] = swarm.mesh.describe()
        hosts = swarm.host_facts()
        if hosts:  # a multi-host swarm: every host, its share of nodes and its clock against this machine
            facts["hosts"] = hosts
    return facts


# ------------------------------------------------------------------------------------ host sampling
def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])
    return out


def _cpu_times() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


@dataclass
class HostSampler:
    """Samples host CPU busy % and used memory every `period` s in a thread while a test runs."""

    period: float = 0.5
    busy: list[float] = field(default_factory=list)
    used_mib: list[float] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        last = _cpu_times()
        while not self._stop.wait(self.period):
            now = _cpu_times()
            dbusy, dtotal = now[0] - last[0], now[1] - last[1]
            last = now
            if dtotal:
                self.busy.append(100.0 * dbusy / dtotal)
            mem = _meminfo()
            self.used_mib.append((mem["MemTotal"] - mem["MemAvailable"]) / 1024)

    def __enter__(self) -> "HostSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        mean = sum(self.busy) / len(self.busy) if self.busy else math.nan
        return {"cpu_busy_pct": round(mean, 1), "cpu_busy_max_pct": round(max(self.busy, default=math.nan), 1),
                "mem_used_peak_mib": round(max(self.used_mib, default=math.nan), 1)}
