"""Compose rendering: golden file, labels, least privilege."""
import yaml

from compose.render import compose_yaml, render_compose
from swarm.spec.model import spec_from_dict

from conftest import golden

SPEC = {"name": "demo", "nodes": 4}


def test_golden_compose_file():
    text = compose_yaml(render_compose(spec_from_dict(SPEC), "swarm-emu/node:test"), "demo.yaml")
    assert text == golden("compose_demo4.yml", text)


def test_no_privileged_only_needed_caps_and_labels_everywhere():
    doc = render_compose(spec_from_dict(SPEC), "img")
    for svc in doc["services"].values():
        assert "privileged" not in svc
        assert svc["cap_add"] == ["NET_ADMIN", "NET_RAW", "SYS_NICE"]
        assert svc["init"] is True
        assert svc["labels"]["io.swarm-emu.swarm"] == "demo"
    for net in doc["networks"].values():
        assert net["labels"]["io.swarm-emu.swarm"] == "demo"
    assert doc["networks"]["isl"]["internal"] is True
    assert doc["networks"]["ground"]["internal"] is False


def test_heterogeneous_nodes_keep_their_image_command_and_limits():
    spec = spec_from_dict({"name": "mix", "groups": [
        {"prefix": "relay", "count": 1, "resources": {"cpus": 0.5, "memory": "128m"}},
        {"prefix": "app", "count": 1, "image": "user/app:1", "command": ["/bin/app", "--fast"], "env": {"K": "v"}},
    ]})
    svcs = render_compose(spec, "base")["services"]
    assert svcs["relay01"]["image"] == "base" and svcs["relay01"]["cpus"] == 0.5 and svcs["relay01"]["mem_limit"] == "128m"
    assert svcs["app01"]["image"] == "user/app:1" and svcs["app01"]["command"] == ["/bin/app", "--fast"]
    assert svcs["app01"]["environment"]["K"] == "v"


def test_yaml_round_trips():
    doc = render_compose(spec_from_dict(SPEC), "img")
    assert yaml.safe_load(compose_yaml(doc)) == doc
