"""Regression tests of the reliability review (issue 29) that need no Docker or root: names, bounded input,
one-line errors."""
from __future__ import annotations

import io
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest

from pathlib import Path

from swarm.cli.main import main
from swarm.errors import SpecError
from swarm.spec.model import check_swarm_name, spec_from_dict


REPO = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(argv))
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    return code, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---- 4. names with a trailing newline (`$` matches before a final newline)
BASE = {"name": "relnl", "nodes": 2, "backend": "netns",
        "networks": {"isl": {"subnet": "10.162.0.0/24"}, "ground": {"subnet": "10.163.0.0/24"}}}


@pytest.mark.parametrize("patch", [
    {"name": "relnl\n"},
    {"nodes": None, "node_list": [{"name": "alpha\n"}, {"name": "beta"}]},
    {"nodes": None, "node_list": [{"name": "alpha", "role": "relay\n"}, {"name": "beta"}]},
    {"nodes": None, "groups": [{"prefix": "obs\n", "count": 2}]},
    {"apps": ["my-app:1.0\n"]},
    {"hosts": [{"name": "far\n", "endpoint": "unix:///var/run/docker.sock"}]},
], ids=["swarm", "node", "role", "group", "app-image", "host"])
def test_a_name_with_a_trailing_newline_is_refused(patch):
    data = {k: v for k, v in {**BASE, **patch}.items() if v is not None}
    with pytest.raises(SpecError, match=r"\\n"):  # the error names the value with its newline
        spec_from_dict(data, "s.yaml")


def test_a_swarm_name_on_the_command_line_with_a_newline_is_refused():
    with pytest.raises(SpecError):
        check_swarm_name("relnl\n")


@pytest.mark.parametrize("kind", ["traffic", "dtn", "ddsperf", "app", "orbits"])
def test_an_experiment_name_with_a_newline_is_one_line(kind, tmp_path):
    import yaml
    docs = {
        "traffic": {"name": "rel\nx", "sizes": [2], "protocols": ["udp"], "rates": ["1M"], "duration": 2},
        "dtn": {"type": "dtn", "name": "rel\nx", "sizes": [2]},
        "ddsperf": {"type": "ddsperf", "name": "rel\nx", "sizes": [2], "rates": ["1kHz"]},
        "app": yaml.safe_load(open(REPO / "experiments" / "dds-faults.yaml")),
        "orbits": yaml.safe_load(open(REPO / "experiments" / "walker-dtn.yaml")),
    }
    path = tmp_path / "e.yaml"
    command = "sweep" if kind == "traffic" else "run"
    for name in ("rel\nx", "relx\n"):
        path.write_text(yaml.safe_dump({**docs[kind], "name": name}))
        code, _, err = cli(command, "--check", str(path))
        assert code == 2, err
        assert "name" in one_line(err) and "\\n" in err, err


# ---- 5, 6, 11. bounded input: every case in a subprocess under an address-space limit and a timeout, so a
# regression fails the test instead of eating the machine
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

MEMORY_LIMIT = 1 << 30  # bytes of address space for the whole CLI process


def _limits(cpu_s: float):
    """preexec_fn: the address-space limit and a CPU-time limit of `cpu_s` seconds (SIGXCPU past it)."""
    def apply() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_s), int(cpu_s) + 1))
    return apply


def bounded(*argv: str, cwd, timeout: float = 40, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI under the memory limit and `timeout` seconds of CPU time: the bound the property is about (a bad
    input must not eat the machine), which a busy host does not move. Wall time is only a hang guard, 10x wider,
    since on a loaded 2-core host a process may wait for a core longer than it runs on one."""
    return subprocess.run([sys.executable, "-m", "swarm", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=10 * timeout, preexec_fn=_limits(timeout),
                          env={**(env or {}), **os.environ, "SWARM_WORKDIR": str(cwd)})  # `env` first in environ


def refused(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    return one_line(res.stderr)


SPEC_OK = ("name: relin\nnodes: 2\nbackend: netns\n"
           "networks: {isl: {subnet: 10.164.0.0/24}, ground: {subnet: 10.165.0.0/24}}\n")
BOMB = ('a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
        'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n'
        'f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n'
        'i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n')


def test_a_valid_spec_passes_under_the_memory_limit(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC_OK)
    res = bounded("up", "--check", "s.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("where", ["name", "nodes", "env"])
def test_an_alias_bomb_is_refused_fast_with_bounded_memory(where, tmp_path):
    body = {"name": "name: *i\nnodes: 2\n", "nodes": "name: relin\nnodes: *i\n",
            "env": "name: relin\nnodes: 2\ndefaults: {env: {A: *i}}\n"}[where]
    text = BOMB.replace("a: &a", "x-a: &a")  # top-level keys of the bomb are unknown fields: the bomb is refused first
    for k in "bcdefghi":
        text = text.replace(f"\n{k}: &{k}", f"\nx-{k}: &{k}")
    (tmp_path / "s.yaml").write_text(text + body)
    assert len(text + body) < 1100
    line = refused(bounded("up", "--check", "s.yaml", cwd=tmp_path, timeout=20))
    assert "alias" in line and "s.yaml" in line and "'x'" not in line


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "fifo", "dir"])
def test_a_spec_that_is_not_a_regular_file_is_one_line(path, tmp_path):
    if path == "fifo":
        os.mkfifo(tmp_path / "fifo")
    if path == "dir":
        (tmp_path / "dir").mkdir()
    line = refused(bounded("up", "--check", path, cwd=tmp_path, timeout=20))
    assert "not a regular file" in line


def test_a_huge_spec_is_refused_unread(tmp_path):
    entries = "".join(f"  - {{name: n{i}}}\n" for i in range(2_500_000 // 40))
    (tmp_path / "s.yaml").write_text(SPEC_OK.replace("nodes: 2\n", "node_list:\n" + entries) * 2)
    line = refused(bounded("up", "--check", "s.yaml", cwd=tmp_path, timeout=20))
    assert "larger than" in line


def test_a_node_list_over_the_limit_is_refused_before_validation(tmp_path):
    entries = "".join(f"  - {{name: n{i}}}\n" for i in range(30_000))
    (tmp_path / "s.yaml").write_text(SPEC_OK.replace("nodes: 2\n", "node_list:\n" + entries))
    line = refused(bounded("up", "--check", "s.yaml", cwd=tmp_path, timeout=20))
    assert "node_list" in line or "items" in line


@pytest.mark.parametrize("case", ["non-utf8", "digits", "nesting"])
def test_malformed_specs_are_one_line(case, tmp_path):
    data = {"non-utf8": SPEC_OK.encode() + b"x-note: \xff\xfe\n",
            "digits": (SPEC_OK + "x-n: " + "9" * 5000 + "\n").encode(),
            "nesting": (SPEC_OK + "x-n: " + "[" * 2000 + "]" * 2000 + "\n").encode()}[case]
    (tmp_path / "s.yaml").write_bytes(data)
    line = refused(bounded("up", "--check", "s.yaml", cwd=tmp_path, timeout=20))
    assert "s.yaml" in line and "line" in line


DTN = ("type: dtn\nname: reldtn\nbackend: netns\nsizes: [2]\nbundle_sizes: [1kB]\nrates: [10]\nclas: [tcp]\n"
       "routings: [epidemic]\nduration: 5s\nswarm: {networks: {isl: {subnet: 10.166.0.0/24}, ground: {subnet: 10.167.0.0/24}}}\n")
TRAFFIC = ("name: reltr\nsizes: [2]\nprotocols: [udp]\nrates: [1M]\nduration: 2s\nbackend: netns\n"
           "swarm: {networks: {isl: {subnet: 10.166.0.0/24}, ground: {subnet: 10.167.0.0/24}}}\n")
HUGE = "9" * 400


def command(text: str) -> str:
    return "run" if text.startswith("type:") else "sweep"


def test_the_dtn_and_traffic_bases_are_valid(tmp_path):
    for text in (DTN, TRAFFIC):
        (tmp_path / "e.yaml").write_text(text)
        res = bounded(command(text), "--check", "e.yaml", cwd=tmp_path)
        assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("base,old,new", [
    (DTN, "routings: [epidemic]", "routings: []"),
    (DTN, "clas: [tcp]", "clas: []"),
    (DTN, "bundle_sizes: [1kB]", "bundle_sizes: []"),
    (DTN, "rates: [10]", "rates: []"),
    (TRAFFIC, "rates: [1M]", "rates: []"),
    (DTN, "bundle_sizes: [1kB]", f"bundle_sizes: ['{HUGE}kB']"),
    (DTN, "rates: [10]", f"rates: ['{HUGE[:300]}']"),
    (DTN, "rates: [10]", "rates: [1e400]"),
    (DTN, "duration: 5s", f"duration: '{HUGE[:300]}s'"),
    (DTN, "backend: netns", f"backend: netns\ndtn: {{storage: {{limit: '{HUGE[:300]}MB'}}}}"),
    (TRAFFIC, "rates: [1M]", f"rates: ['{HUGE[:300]}M']"),
    (TRAFFIC, "duration: 2s", f"duration: '{HUGE[:300]}s'"),
], ids=["routings-empty", "clas-empty", "bundle-sizes-empty", "dtn-rates-empty", "rates-empty",
        "bundle-size-400", "dtn-rate-300", "dtn-rate-1e400", "dtn-duration-300", "storage-limit-300",
        "rate-300", "duration-300"])
def test_bad_numbers_and_empty_lists_in_experiments_are_one_line(base, old, new, tmp_path):
    assert old in base
    (tmp_path / "e.yaml").write_text(base.replace(old, new))
    refused(bounded(command(base), "--check", "e.yaml", cwd=tmp_path))


def test_the_environment_given_as_a_contact_plan_is_not_printed(tmp_path):
    (tmp_path / "e.yaml").write_text(DTN + "contacts: {plan: /proc/self/environ}\n")
    res = bounded("run", "--check", "e.yaml", cwd=tmp_path, env={"REL_SECRET": "hunter2-do-not-print"})
    assert "hunter2" not in res.stdout + res.stderr and "PATH=" not in res.stderr
    refused(res)


@pytest.mark.parametrize("as_", ["plan", "spec"])
def test_a_secret_file_given_as_input_is_not_echoed(as_, tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$saltsalt$hunter2hashhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    if as_ == "plan":
        (tmp_path / "e.yaml").write_text(DTN + f"contacts: {{plan: {secret}}}\n")
        res = bounded("run", "--check", "e.yaml", cwd=tmp_path)
    else:
        res = bounded("up", "--check", str(secret), cwd=tmp_path)
    assert "hunter2" not in res.stdout + res.stderr and "19000" not in res.stderr
    refused(res)


def test_a_non_utf8_contact_plan_is_one_line(tmp_path):
    (tmp_path / "plan.txt").write_bytes(b"a contact +0 +10 1 2 100\n\xff\n")
    (tmp_path / "e.yaml").write_text(DTN + "contacts: {plan: plan.txt}\n")
    line = refused(bounded("run", "--check", "e.yaml", cwd=tmp_path))
    assert "line 2" in line


def test_a_ten_thousand_satellite_plan_is_refused_fast(tmp_path):
    (tmp_path / "o.yaml").write_text(
        "epoch: 2026-03-20T12:00:00Z\nduration: 2s\nstep: 1s\nsatellites:\n"
        "  - walker: {type: delta, total: 10000, planes: 100, phasing: 1, altitude: 550km, inclination: 53, prefix: s}\n"
        "links: {isl: {max_range: 5000km, max_degree: 4, rate: 100Mbit}}\n")
    line = refused(bounded("orbits", "plan", "--out", str(tmp_path / "out"), "o.yaml", cwd=tmp_path, timeout=30))
    assert "o.yaml" in line or "satellites" in line


# ---- 12. smaller: an option-like image, a directory as the spec file
@pytest.mark.parametrize("image", ["--help", "-v", "ubuntu:22.04\n"])
def test_an_image_that_is_not_a_reference_is_refused(image):
    with pytest.raises(SpecError, match="image"):
        spec_from_dict({**BASE, "defaults": {"image": image}}, "s.yaml")


def test_an_image_reference_is_accepted():
    spec_from_dict({**BASE, "defaults": {"image": "registry.local:5000/team/app:1.2@sha256:" + "a" * 64}}, "s.yaml")


def test_a_directory_as_the_spec_file_is_one_line(tmp_path):
    (tmp_path / "d").mkdir()
    code, _, err = cli("up", "--check", str(tmp_path / "d"))
    assert code == 2 and "directory" in one_line(err)


def test_the_dtn_status_table_is_readable_at_80_columns():
    from rich.console import Console

    from swarm.cli.dtn import status_table
    from swarm.runtime.dtn import AgentStatus

    rows = [AgentStatus(f"sat{i:02d}", f"dtn://sat{i:02d}/", "tcp", "epidemic", ["sat01", "sat02", "ground"],
                        12, 345, 6789, 1011, 0, "ok") for i in range(1, 4)]
    rows.append(AgentStatus("ground", "dtn://ground/", "tcp", "epidemic", ["sat03"], 0, 1, 0, 1, 0, "ok"))
    console = Console(width=80, record=True, force_terminal=False)
    console.print(status_table("reldtn", rows, 80))
    text = console.export_text()
    assert "…" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    for r in rows:  # every name and number whole, on one line
        assert r.node in text and "epidemic" in text and str(r.forwarded) in text, text


# ---- fuzzers for contact plans and `orbits:` sections (fixed seeds, bounded counts): every case is either
# accepted or one SpecError/ValueError line; never another exception
FUZZ_SEED = 20261125
TOKENS = ["a", "contact", "range", "+0", "+60", "+5", "-1", "2026/03/20-12:00:00", "sat01", "sat02", "ground", "1",
          "0", "1e400", "9" * 60, "nan", "inf", "#", "\t", "é", "a contact", "\x00", ":", "+1.5", "0.5", "2"]


def _mutate_line(rng, line: str) -> str:
    words = line.split()
    op = rng.randrange(4)
    if op == 0 and words:
        words[rng.randrange(len(words))] = rng.choice(TOKENS)
    elif op == 1 and words:
        del words[rng.randrange(len(words))]
    elif op == 2:
        words.insert(rng.randrange(len(words) + 1), rng.choice(TOKENS))
    else:
        words = words * 2
    return " ".join(words)


def test_fuzzed_contact_plans_are_accepted_or_one_line():
    import random
    from swarm.dtn.contacts import parse_contact_plan, resolve_nodes
    base = (REPO / "experiments" / "contacts" / "chain-gap.txt").read_text().splitlines()
    rng = random.Random(FUZZ_SEED)
    for case in range(400):
        lines = list(base)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(lines))
            lines[i] = _mutate_line(rng, lines[i])
        try:
            resolve_nodes(parse_contact_plan("\n".join(lines), "plan.txt"), ["sat01", "sat02", "ground"], "plan.txt")
        except (ValueError, SpecError) as exc:
            assert "\n" not in str(exc) and str(exc).startswith("plan.txt"), (case, str(exc))


def test_fuzzed_orbits_sections_are_accepted_or_one_line():
    import copy
    import random

    import yaml
    from netem.spec.orbits import parse_orbits
    base = yaml.safe_load((REPO / "experiments" / "walker-dtn.yaml").read_text())["orbits"]
    values = [None, 0, -1, 10 ** 50, 1e400, "", "x", [], {}, "1e400km", "9" * 60 + "s", "10min", True, 10001,
              "0s", "-5deg", {"walker": {}}, [{"name": "gs\n"}]]
    rng = random.Random(FUZZ_SEED)

    def paths(node, prefix=()):
        yield prefix
        if isinstance(node, dict):
            for k, v in node.items():
                yield from paths(v, prefix + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from paths(v, prefix + (i,))

    all_paths = [p for p in paths(base) if p]
    for case in range(300):
        data = copy.deepcopy(base)
        for _ in range(rng.randint(1, 2)):
            path = rng.choice(all_paths)
            cur = data
            try:
                for key in path[:-1]:
                    cur = cur[key]
                cur[path[-1]] = rng.choice(values)
            except (KeyError, IndexError, TypeError):
                continue
        try:
            parse_orbits(data, "o.yaml")
        except SpecError as exc:
            assert "\n" not in str(exc), (case, str(exc))


def test_the_dtn_status_table_with_ltp_keeps_every_name_whole_at_80_columns():
    """With cla ltp's three counter columns, 80 columns folded peer names ("groun" / "d") and headers; names must
    stay whole (issue 29 #12: wrap or drop columns, never cut names)."""
    import re

    from rich.console import Console

    from swarm.cli.dtn import status_table
    from swarm.dtn.agents.ltp import ltp_summary
    from swarm.runtime.dtn import AgentStatus

    ltp = ltp_summary({"registered": True, "send_sessions": 2, "retransmitted_segments": 5, "cancels": 1})
    rows = [AgentStatus(f"sat{i:02d}", f"dtn://sat{i:02d}/", "ltp", "epidemic", ["sat01", "sat02", "ground"],
                        12, 345, 6789, 1011, 0, "ok", ["ltp", "tcp"], ltp) for i in range(1, 4)]
    console = Console(width=80, record=True, force_terminal=False)
    console.print(status_table("reldtn", rows, 80))
    text = console.export_text()
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines()), text
    words = set(re.findall(r"[a-z0-9/]+", text))
    assert {"sat01", "sat02", "sat03", "ground", "stored", "failed", "state", "2/5/1"} <= words, text


# ---- 5, 6: the remaining inputs of the review's list, each one line under the memory limit and fast
@pytest.mark.parametrize("what", ["/dev/zero", "/dev/urandom", "fifo", "dir"])
def test_a_contact_plan_that_is_not_a_regular_file_is_one_line(what, tmp_path):
    """A contact plan that is a device passed 3 GB; a FIFO blocked forever (review, #5)."""
    path = {"fifo": tmp_path / "plan.fifo", "dir": tmp_path}.get(what, what)
    if what == "fifo":
        os.mkfifo(path)
    (tmp_path / "e.yaml").write_text(DTN + f"contacts: {{plan: {path}}}\n")
    line = refused(bounded("run", "--check", "e.yaml", cwd=tmp_path, timeout=30))
    assert "contacts.plan" in line and str(path) in line


def test_a_400_digit_orbits_duration_is_one_line(tmp_path):
    """`orbits` experiment duration with 400 digits: OverflowError (review, #6)."""
    text = (Path(__file__).resolve().parents[2] / "experiments" / "walker-dtn.yaml").read_text()
    assert "  duration: 10min\n" in text
    (tmp_path / "o.yaml").write_text(text.replace("  duration: 10min\n", f"  duration: {HUGE}s\n"))
    assert "o.yaml" in refused(bounded("run", "--check", "o.yaml", cwd=tmp_path, timeout=30))


@pytest.mark.parametrize("total, planes, duration, why", [
    (5000, 50, "2s", "node pairs"),       # passed 2.1 GB (review, #5)
    (2000, 40, "30min", "pair samples"),  # 2,000 x 10 min took 95 s; 30 min is past the planner's bound
])
def test_orbit_plans_past_the_planners_bounds_are_refused_before_computing(total, planes, duration, why, tmp_path):
    (tmp_path / "o.yaml").write_text(
        f"epoch: 2026-03-20T12:00:00Z\nduration: {duration}\nstep: 1s\nsatellites:\n"
        f"  - walker: {{type: delta, total: {total}, planes: {planes}, phasing: 1, altitude: 550km, inclination: 53, "
        "prefix: s}\nlinks: {isl: {max_range: 5000km, max_degree: 4, rate: 100Mbit}}\n")
    started = time.monotonic()
    line = refused(bounded("orbits", "plan", "--out", str(tmp_path / "out"), "o.yaml", cwd=tmp_path, timeout=30))
    assert why in line and time.monotonic() - started < 20
    assert not (tmp_path / "out").exists()
