"""The live tests' allocator (tests/alloc.py) and the parallel run's rules (tests/parallel.py) hold: every live
file that brings up a swarm owns a block of subnets no other file owns, and writes no subnet of its own; only
files that run alone (`serial`) may name fixed subnets."""
from __future__ import annotations

import re
from pathlib import Path

import alloc
import parallel

TESTS = Path(__file__).resolve().parents[1]
LIVE_FILES = sorted((TESTS / "integration").glob("test_*.py"))
SUBNET = re.compile(r"\b10\.\d+\.\d+\.\d+/\d+")
SERIAL = re.compile(r"^pytestmark = \[[^\]]*pytest\.mark\.serial", re.M)


def test_blocks_are_disjoint_and_clear_of_the_defaults_and_the_second_engine():
    seen: dict[int, str] = {}
    for name, block in alloc.blocks().items():
        assert len(block) == alloc.SIZES[name]
        for octet in block:
            assert octet not in seen, f"10.{octet} is both {seen[octet]}'s and {name}'s"
            assert alloc.FIRST <= octet <= alloc.LAST and octet not in alloc.reserved()
            seen[octet] = name


def test_every_allocated_file_exists_and_asks_for_its_own_block():
    for name in alloc.SIZES:
        text = (TESTS / "integration" / name).read_text()
        assert "octets(__file__)" in text, f"{name} has a block but does not use it"


def test_no_live_file_that_runs_beside_others_names_a_subnet_of_its_own():
    for path in LIVE_FILES:
        text = path.read_text()
        if SERIAL.search(text):
            continue
        assert not SUBNET.findall(text), f"{path.name}: {SUBNET.findall(text)[:3]}: take them from tests/alloc.py"


def test_serial_files_are_the_ones_that_share_host_wide_state():
    serial = {p.name for p in LIVE_FILES if SERIAL.search(p.read_text())}
    assert serial == {"test_second_engine.py", "test_swarm_backend.py", "test_hostengine_live.py", "test_linkd_scale.py"}
    for path in sorted((TESTS / "kernel_lab").glob("test_*.py")):
        assert not SERIAL.search(path.read_text()), f"{path.name}: the kernel lab is its own group, not serial"


def test_a_block_is_refused_for_a_file_that_has_none():
    try:
        alloc.octets("/x/test_not_there.py")
    except KeyError as exc:
        assert "test_not_there.py" in str(exc)
    else:
        raise AssertionError("an unknown file got a block")


def test_nets_and_its_yaml_name_the_same_subnets_in_one_octet():
    import yaml
    assert yaml.safe_load(alloc.nets_yaml(40))["networks"] == alloc.nets(40)
    assert alloc.nets(40) == {"isl": {"subnet": "10.40.0.0/24"}, "ground": {"subnet": "10.40.1.0/24"}}


def test_the_octets_examples_and_unit_tests_name_are_reserved():
    """test_examples and the unit fuzzers `--check` the example specs against the host while live files run."""
    taken = alloc.reserved()
    assert {77, 78} <= taken and set(range(240, 256)) <= taken
    assert 80 in taken  # bench/bench-udp32.yaml's 10.80.0.0/16 (seen overlapping a live file's swarm)


def test_the_kernel_lab_and_serial_files_go_first_then_live_files_longest_first_and_unit_tests_last():
    class Item:
        def __init__(self, path: Path, serial: bool = False):
            self.path, self.serial = path, serial

        def get_closest_marker(self, name):
            return self.serial if name == "serial" and self.serial else None

    seconds = {"integration/test_b.py": 30.0, "integration/test_c.py": 300.0, "kernel_lab/test_k1.py": 100.0,
               "kernel_lab/test_k2.py": 100.0}
    items = [Item(TESTS / "unit" / "test_x.py"), Item(TESTS / "integration" / "test_b.py"),
             Item(TESTS / "kernel_lab" / "test_k2.py"), Item(TESTS / "integration" / "test_c.py"),
             Item(TESTS / "integration" / "test_a.py", serial=True), Item(TESTS / "kernel_lab" / "test_k1.py")]
    items.sort(key=lambda it: parallel.order_key(it, seconds))
    # the kernel lab (200 s as a group) before the serial file (unknown: 60 s); a group's files stay together
    assert [it.path.name for it in items] == ["test_k1.py", "test_k2.py", "test_a.py", "test_c.py", "test_b.py",
                                              "test_x.py"]
    assert parallel.group_of("kernel_lab/test_k1.py") == parallel.group_of("kernel_lab/test_k2.py") == "kernel_lab"


def test_no_unit_test_names_a_subnet_in_a_live_files_block():
    """Unit tests `--check` specs against the host while live files run: their subnets stay out of the blocks."""
    owned = {o: name for name, block in alloc.blocks().items() for o in block}
    for path in sorted((TESTS / "unit").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        for subnet in SUBNET.findall(path.read_text()):
            octet = int(subnet.split(".")[1])
            assert octet not in owned, f"{path.name}: {subnet} is in {owned[octet]}'s block"


def test_the_kernel_lab_and_the_serial_files_each_run_alone():
    assert parallel.locks_for("kernel_lab/test_kernel_netem.py", serial=False) == [("host", True), ("quiet", True)]
    assert parallel.locks_for("integration/test_swarm_backend.py", serial=True) == [("host", True)]
    assert parallel.locks_for("integration/test_dtn_live.py", serial=False) == [("host", False), ("quiet", False)]
    assert parallel.locks_for("unit/test_cli.py", serial=False) == [("host", False)]


def test_an_exclusive_holder_overlaps_no_shared_one(tmp_path):
    """The run lock from several processes: an exclusive holder never overlaps a shared one."""
    import multiprocessing as mp

    log = tmp_path / "log"

    def hold(exclusive: bool, tag: str, delay: float) -> None:
        import time
        time.sleep(delay)
        with parallel.run_lock(tmp_path, "t", exclusive):
            with open(log, "a") as f:
                f.write(f"+{tag}\n")
            time.sleep(0.3)
            with open(log, "a") as f:
                f.write(f"-{tag}\n")

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=hold, args=(False, "r1", 0.0)), ctx.Process(target=hold, args=(True, "w", 0.1)),
             ctx.Process(target=hold, args=(False, "r2", 0.2))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
    events = log.read_text().split()
    assert sorted(events) == ["+r1", "+r2", "+w", "-r1", "-r2", "-w"], events
    w = events.index("+w")
    assert events[w + 1] == "-w", events  # nothing overlaps the exclusive holder, whatever order they came in


SWARM_NAME = re.compile(r"""(?:\bNAME\w*\s*=\s*|\bname\s*=\s*|["']name["']\s*:\s*|\bname=)["']([a-z0-9][a-z0-9-]*)["']""")
NODE_NAME = re.compile(r"^[a-z]+\d+$")  # sat01, gs01: a node's name, which is the swarm's own, not the host's


def test_no_two_live_files_name_the_same_swarm():
    """Swarm names are host-wide (containers, namespaces, chains, state folders): two files on two workers using one
    name would tear down each other's swarm. Every name a live file writes as a literal belongs to that file only."""
    owners: dict[str, str] = {}
    for path in LIVE_FILES + sorted((TESTS / "kernel_lab").glob("test_*.py")):
        for name in set(SWARM_NAME.findall(path.read_text())):
            if NODE_NAME.match(name):
                continue
            assert owners.setdefault(name, path.name) == path.name, f"swarm {name!r}: {owners[name]} and {path.name}"
