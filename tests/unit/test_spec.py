"""Spec validation and deterministic addressing."""
import pytest

from swarm.errors import SpecError
from swarm.spec.model import MAX_NODES, load_spec, node_address, node_mac, plan_nodes, spec_from_dict


def err(data) -> str:
    with pytest.raises(SpecError) as e:
        spec_from_dict(data, "s.yaml")
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_count_gives_sat_names_and_addresses():
    nodes = plan_nodes(spec_from_dict({"name": "demo", "nodes": 3}))
    assert [(n.name, n.isl_ip, n.ground_ip) for n in nodes] == [
        ("sat01", "10.77.0.2", "10.78.0.2"),
        ("sat02", "10.77.0.3", "10.78.0.3"),
        ("sat03", "10.77.0.4", "10.78.0.4"),
    ]
    assert nodes[0].isl_mac == "02:42:0a:4d:00:02"


def test_hundred_nodes_get_three_digit_names():
    nodes = plan_nodes(spec_from_dict({"name": "big", "nodes": 100}))
    assert nodes[0].name == "sat001" and nodes[-1].name == "sat100"
    assert nodes[-1].isl_ip == "10.77.0.101"


def test_groups_are_heterogeneous_and_inherit_defaults():
    spec = spec_from_dict({
        "name": "mixed",
        "defaults": {"env": {"A": "1"}, "resources": {"cpus": 0.5}},
        "groups": [{"prefix": "relay", "count": 2, "role": "relay"},
                   {"prefix": "obs", "count": 3, "image": "my/obs:1", "env": {"B": "2"}}],
    })
    nodes = spec.resolved_nodes()
    assert [n.name for n in nodes] == ["relay01", "relay02", "obs01", "obs02", "obs03"]
    assert nodes[0].role == "relay" and nodes[0].image is None
    assert nodes[2].image == "my/obs:1" and nodes[2].env == {"A": "1", "B": "2"}
    assert nodes[2].resources.cpus == 0.5


def test_node_list():
    spec = spec_from_dict({"name": "x", "node_list": [{"name": "alpha"}, {"name": "beta", "role": "relay"}]})
    assert [(n.name, n.role) for n in spec.resolved_nodes()] == [("alpha", "spacecraft"), ("beta", "relay")]


def test_addressing_helpers():
    assert node_address("192.168.50.0/24", 1) == "192.168.50.2"
    assert node_mac("10.77.1.2") == "02:42:0a:4d:01:02"


@pytest.mark.parametrize("data, needle", [
    ({"name": "d", "nodes": 0}, "nodes 0"),
    ({"name": "d", "nodes": 1}, "nodes 1"),
    ({"name": "d", "nodes": MAX_NODES + 1}, f"nodes {MAX_NODES + 1}"),
    ({"name": "d", "nodes": "many"}, "'many'"),
    ({"name": "d", "nodes": 3, "colour": "red"}, "unknown field 'colour'"),
    ({"name": "d", "node_list": [{"name": "a"}, {"name": "a"}]}, "node 'a': duplicate"),
    ({"name": "d", "node_list": [{"name": "sat 07"}, {"name": "b"}]}, "node 'sat 07': name must match"),
    ({"name": "d", "node_list": [{"name": "a;rm -rf"}, {"name": "b"}]}, "node 'a;rm -rf'"),
    ({"name": "d", "node_list": [{"name": "$(x)"}, {"name": "b"}]}, "node '$(x)'"),
    ({"name": "My Swarm", "nodes": 2}, "swarm 'My Swarm'"),
    ({"name": "d", "nodes": 10, "networks": {"isl": {"subnet": "10.9.0.0/29"}}}, "networks.isl.subnet '10.9.0.0/29': too small for 10"),
    ({"name": "d", "nodes": 2, "networks": {"isl": {"subnet": "10.9.0.0/33"}}}, "subnet '10.9.0.0/33'"),
    ({"name": "d", "nodes": 2, "networks": {"isl": {"subnet": "10.78.0.0/24"}}}, "overlaps"),
    ({"name": "d", "nodes": 2, "backend": "k8s"}, "'k8s'"),
    ({"name": "d", "nodes": 2, "node_list": [{"name": "a"}]}, "exactly one of"),
    ({"name": "d", "nodes": 2, "defaults": {"env": {"BAD-KEY": "1"}}}, "env key 'BAD-KEY'"),
    ({"name": "d", "nodes": 2, "defaults": {"resources": {"memory": "lots"}}}, "memory 'lots'"),
])
def test_bad_input_names_field_and_value(data, needle):
    assert needle in err(data)


def test_malformed_yaml_is_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nnodes: [1, 2\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert "malformed YAML" in str(e.value) and "line" in str(e.value) and "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec file"):
        load_spec(tmp_path / "nope.yaml")


def test_top_level_must_be_mapping(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_spec(p)
