"""Neighbour-table planning for large swarms."""
from swarm.runtime.host import neighbour_entries_needed, plan_neighbour_sysctls

DEFAULTS = {1: 128, 2: 512, 3: 1024}


def test_small_swarms_change_nothing():
    assert neighbour_entries_needed(10) == 110
    assert plan_neighbour_sysctls(10, DEFAULTS) == {}


def test_fifty_nodes_overflow_the_default_table_and_get_raised():
    assert neighbour_entries_needed(50) == 2550 > DEFAULTS[3]
    assert plan_neighbour_sysctls(50, DEFAULTS) == {
        "net.ipv4.neigh.default.gc_thresh1": 2550,
        "net.ipv4.neigh.default.gc_thresh2": 3825,
        "net.ipv4.neigh.default.gc_thresh3": 5100,
    }


def test_never_lowers():
    high = {1: 100000, 2: 100000, 3: 100000}
    assert plan_neighbour_sysctls(100, high) == {}
