"""Pure parts of swarm.observe: what a capture runs and filters, the event log's lines and the view's state."""
from __future__ import annotations

import pytest

from swarm.errors import SpecError
from swarm.observe.capture import check_output, dumpcap_argv, link_ends, node_end
from swarm.spec.model import plan_nodes, spec_from_dict


@pytest.fixture
def nodes():
    return plan_nodes(spec_from_dict({"name": "obs-u", "nodes": 3}))


def test_a_link_is_taken_at_the_senders_egress_and_the_receivers_ingress_with_one_filter(nodes):
    a, b = nodes[0], nodes[1]
    ends = link_ends(a, b)
    assert [e.node for e in ends] == ["sat01", "sat02"]
    assert ends[0].filter == ends[1].filter == f"ether src {a.isl_mac.lower()} and ether dst {b.isl_mac.lower()}"
    assert "egress" in ends[0].label and "ingress" in ends[1].label
    with pytest.raises(SpecError, match="twice"):
        link_ends(a, a)


def test_node_capture_names_the_interface_by_network(nodes):
    assert node_end(nodes[2], "ground").network == "ground"
    with pytest.raises(SpecError, match="eth1"):
        node_end(nodes[2], "eth1")


def test_dumpcap_argv():
    assert dumpcap_argv("eth1", "/x.pcapng") == ["dumpcap", "-i", "eth1", "-w", "/x.pcapng", "-n"]
    argv = dumpcap_argv("eth1", "/x.pcapng", filt="icmp", snaplen=96, duration=2.4, ring=(1024, 4))
    assert argv[6:] == ["-f", "icmp", "-s", "96", "-a", "duration:2", "-b", "filesize:1024", "-b", "files:4"]


def test_an_unwritable_output_is_refused_before_anything_starts(tmp_path):
    check_output(tmp_path / "ok.pcapng")
    assert not (tmp_path / "ok.pcapng").exists()  # probed, not left behind
    for bad, why in ((tmp_path / "no" / "x.pcapng", "no such directory"), (tmp_path, "is a directory")):
        with pytest.raises(SpecError, match=why):
            check_output(bad)
