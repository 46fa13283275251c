"""The one allocator of what live tests claim on the host: subnets, by test file.

Why: live tests run in parallel (pytest-xdist, a test file per worker at a time), and a swarm's subnets are
host-wide (bridges, routes, Docker's address pools, the framework's own overlap check). Each test file that brings
up a swarm owns a block of second octets (`10.<octet>.x.x`) here, disjoint from every other file's, so two
workers can never claim the same subnet however the files are scheduled; tests inside one file run one after
another on one worker and share their file's block. A test file asks for its block with `octets(__file__)` and
never writes a `10.x.x.x/n` literal of its own (tests/unit/test_alloc.py checks both).

Swarm names are per file too (each file's names start with its own prefix, see the docstrings); NFQUEUE numbers
come from the framework's own host-wide registry (swarm/runtime/backends/compose/hostengine.py) or live inside a
swarm's own namespaces, and the live view binds port 0, so neither needs an entry here.

To add a file: add it with the number of octets it needs (nets() takes one octet a swarm).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

FIRST = 20   # 10.20.x.x upward, past the low 10.x a unit test or a user's LAN may name
LAST = 239   # 10.240-255: the tests' second Docker Engine (tests/hosts) and anything outside the suite

#: test file -> how many second octets it owns
SIZES: dict[str, int] = {
    "test_capture_compose_live.py": 1,
    "test_cfs_live.py": 4,
    "test_constellation_scale.py": 1,
    "test_dds_app_live.py": 8,
    "test_dds_ddsperf_live.py": 1,
    "test_dtn_delay_live.py": 2,
    "test_dtn_guard_live.py": 2,
    "test_dtn_guard_compose_live.py": 2,
    "test_dtn_hardy_live.py": 1,
    "test_dtn_live.py": 7,
    "test_dtn_ltp_live.py": 7,
    "test_dtn_ltp_ion_live.py": 1,
    "test_dtn_matrix_live.py": 1,
    "test_dtn_window_live.py": 1,
    "test_fault_schedule_live.py": 2,
    "test_hardening_live.py": 1,
    "test_host_settings_live.py": 2,
    "test_impair_live.py": 14,
    "test_lifecycle.py": 6,
    "test_linkd_live.py": 10,
    "test_linkd_scale.py": 1,
    "test_linkd_schedule.py": 1,
    "test_mesh_live.py": 3,
    "test_observe_live.py": 2,
    "test_observe_orbits_live.py": 2,
    "test_orbit_batches_live.py": 1,
    "test_orbits_dtn_live.py": 1,
    "test_orbits_live.py": 1,
    "test_reliability_live.py": 14,
    "test_resume_live.py": 3,
    "test_sweep.py": 8,
    "test_sweep_failures.py": 1,
    "test_dtn_ion_live.py": 3,
    "test_dtn_ud3tn_live.py": 4,
    "test_dtn_hdtn_live.py": 6,
}

#: the frameworks' default subnets (swarm/spec/model.py): a test that brings up a swarm names its own
DEFAULTS = (77, 78)
REPO = Path(__file__).resolve().parents[1]
#: where other subnets are named that meet the live files' swarms on this host: the example specs and experiments
#: (`--check`ed by test_examples and the unit fuzzers while live files run: an overlap with a running swarm is a
#: refusal) and the unit tests' own specs
NAMED_ELSEWHERE = ("experiments/**/*.yaml", "bench/*.yaml", "bench/*.py", "README.md", "docs/*.md", "tests/unit/test_*.py")
_SUBNET = re.compile(r"\b10\.(\d+)\.\d+\.\d+/\d+")


def reserved() -> frozenset[int]:
    """Second octets never handed out: the defaults, 10.240-255 (the tests' second Docker Engine), and every octet
    a subnet in NAMED_ELSEWHERE names (read from the files, so a new example cannot collide unnoticed)."""
    named = {int(m) for pattern in NAMED_ELSEWHERE for path in sorted(REPO.glob(pattern))
             if path.name != "test_alloc.py" for m in _SUBNET.findall(path.read_text(errors="replace"))}
    return frozenset(DEFAULTS) | frozenset(range(LAST + 1, 256)) | frozenset(named)


@lru_cache(maxsize=1)
def blocks() -> dict[str, range]:
    """Each file's block of second octets (contiguous: a file may use o and o + 1), first fit from FIRST to LAST
    past every reserved() octet, the largest blocks placed first (the free stretches between reserved octets are
    uneven). Deterministic: the same files and sizes give the same blocks in every worker."""
    taken = set(reserved())
    out: dict[str, range] = {}
    for name in sorted(SIZES, key=lambda n: (-SIZES[n], n)):
        size = SIZES[name]
        start = next((o for o in range(FIRST, LAST - size + 2) if not taken & set(range(o, o + size))), None)
        if start is None:
            raise RuntimeError(f"tests/alloc.py: no {size} free second octets left for {name} in 10.{FIRST}-{LAST}: "
                               "make the blocks smaller (nets() needs one octet a swarm)")
        out[name] = range(start, start + size)
        taken |= set(out[name])
    return out


def octets(test_file: str) -> range:
    """The block of second octets the test file `test_file` (its __file__) owns."""
    name = Path(test_file).name
    try:
        return blocks()[name]
    except KeyError:
        raise KeyError(f"{name} has no block in tests/alloc.py SIZES: add it there") from None


def nets(octet: int) -> dict:
    """A spec's `networks:` in one second octet: the ISL on 10.<octet>.0.0/24, the ground on 10.<octet>.1.0/24."""
    return {"isl": {"subnet": f"10.{octet}.0.0/24"}, "ground": {"subnet": f"10.{octet}.1.0/24"}}


def nets_yaml(octet: int) -> str:
    """`nets()` as the flow-style YAML a test writes into a spec file: `networks: {isl: ..., ground: ...}`."""
    return f"networks: {{isl: {{subnet: 10.{octet}.0.0/24}}, ground: {{subnet: 10.{octet}.1.0/24}}}}"
