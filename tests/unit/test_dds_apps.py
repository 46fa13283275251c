"""The `apps:` / `app:` spec keys and the app experiment: validation and the environment nodes get."""
from __future__ import annotations

from swarm.runtime.backends import TRAITS
import pytest

from experiments.app.parse import agreement_per_cycle
from experiments.app.model import experiment_from_dict
from swarm.spec.apps import check_runnable
from swarm.cli.main import main
from swarm.errors import SpecError
from swarm.spec.model import spec_from_dict

BASE = {"name": "dd-apps", "nodes": 3, "networks": {"isl": {"subnet": "10.158.0.0/24"}, "ground": {"subnet": "10.159.0.0/24"}}}


def test_swarm_app_environment_on_every_node():
    spec = spec_from_dict({**BASE, "apps": ["swarm-app"], "app": {"rate_hz": 20, "domain_id": 5},
                           "defaults": {"env": {"SWARM_APP_TARGETS": "9"}}})
    nodes = spec.resolved_nodes()
    env = nodes[1].env
    assert env["SWARM_APPS"] == "swarm-app" and env["SWARM_DDS_DOMAIN"] == "5" and env["SWARM_APP_RATE_HZ"] == "20"
    assert env["SWARM_PEERS"] == "sat01,sat02,sat03"
    assert env["SWARM_PEER_IPS"] == "10.158.0.2,10.158.0.3,10.158.0.4" and env["SWARM_APP_MULTICAST"] == "auto"
    assert env["SWARM_APP_TARGETS"] == "9"  # the user's own env wins
    assert all(n.image is None for n in nodes)


def test_image_app_sets_the_node_image():
    spec = spec_from_dict({**BASE, "apps": ["my-flightsw:1.2"]})
    assert {n.image for n in spec.resolved_nodes()} == {"my-flightsw:1.2"}
    assert spec_from_dict(BASE).resolved_nodes()[0].env == {}  # no apps, no app environment


@pytest.mark.parametrize("change, message", [
    ({"apps": ["swarm-ap"]}, "apps[0] 'swarm-ap': unknown app (known: swarm-app; or a local image given as name:tag)"),
    ({"apps": ["swarm-app", "swarm-app"]}, "apps[1] 'swarm-app': listed twice"),
    ({"apps": ["a:1", "b:2"]}, "apps: at most one image per node"),
    ({"apps": ["swarm-app", "a:1"]}, "apps: swarm-app runs from the framework's node image"),
    ({"app": {"domain_id": 233}}, "app.domain_id: domain_id 233: a DDS domain id is an integer 0..232"),
    ({"app": {"domain_id": "x"}}, "domain_id 'x'"),
    ({"app": {"rate_hz": 0}}, "app.rate_hz"),
])
def test_bad_apps_are_one_line_errors(change, message):
    with pytest.raises(SpecError) as exc:
        spec_from_dict({**BASE, **change}, "s.yaml")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_image_app_must_exist_and_needs_compose():
    check_runnable(["swarm-app"], TRAITS["netns"], lambda image: False)  # the built-in app needs no image
    with pytest.raises(SpecError, match="apps: image 'x:1' not found locally"):
        check_runnable(["x:1"], TRAITS["compose"], lambda image: False)
    with pytest.raises(SpecError, match="needs the compose backend"):
        check_runnable(["x:1"], TRAITS["netns"], lambda image: True)
    check_runnable(["x:1"], TRAITS["compose"], lambda image: image == "x:1")


def test_cli_bad_domain_id_exits_2_and_starts_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text("name: dd-cli\nnodes: 2\nbackend: netns\napp: {domain_id: 300}\napps: [swarm-app]\n")
    with pytest.raises(SystemExit) as exc:
        main(["up", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}: app.domain_id: domain_id 300: a DDS domain id is an integer 0..232"
    assert not (tmp_path / ".swarm").exists()


def test_cli_run_unknown_app_exits_2(tmp_path, capsys):
    path = tmp_path / "e.yaml"
    path.write_text("type: app\nname: dd-e\nnodes: 2\napps: [swarm-app, nope]\n")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(path), "--results", str(tmp_path / "results")])
    assert exc.value.code == 2
    assert "apps[1] 'nope': unknown app" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_app_experiment_checks_its_fault_timeline():
    exp = {"type": "app", "name": "dd-x", "nodes": 4, "duration": "20s", **{"swarm": {"networks": BASE["networks"]}}}
    assert experiment_from_dict(exp).duration == 20
    with pytest.raises(SpecError, match=r"faults\[0\].at 25s: at or after the experiment's end"):
        experiment_from_dict({**exp, "faults": [{"at": "25s", "heal": "all"}]})
    with pytest.raises(SpecError, match="node 'sat09': no such node"):
        experiment_from_dict({**exp, "faults": [{"at": "5s", "cut": ["sat01", "sat09"]}]})


def test_agreement_per_cycle():
    import pandas as pd

    plans = pd.DataFrame({"cycle": [1, 1, 1, 1, 2, 2, 2], "t": [0.1] * 4 + [0.2] * 3,
                          "digest": ["a", "a", "b", "b", "c", "c", "c"]})
    got = agreement_per_cycle(plans)
    assert got["agreement"].tolist() == [0.5, 1.0] and got["nodes"].tolist() == [4, 3]


def test_multicast_is_decided_by_the_backend_unless_given():
    from swarm.spec.apps import with_backend_defaults

    spec = spec_from_dict({**BASE, "apps": ["swarm-app"]})
    assert with_backend_defaults(spec, TRAITS["netns"]).resolved_nodes()[0].env["SWARM_APP_MULTICAST"] == "1"
    assert with_backend_defaults(spec, TRAITS["compose"]).resolved_nodes()[0].env["SWARM_APP_MULTICAST"] == "0"
    pinned = spec_from_dict({**BASE, "apps": ["swarm-app"], "app": {"multicast": False}})
    assert with_backend_defaults(pinned, TRAITS["netns"]).resolved_nodes()[0].env["SWARM_APP_MULTICAST"] == "0"
    assert with_backend_defaults(spec_from_dict(BASE), TRAITS["netns"]) == spec_from_dict(BASE)


def test_sweep_dispatches_on_the_experiment_type(tmp_path, capsys):
    path = tmp_path / "e.yaml"
    path.write_text("type: dddperf\nname: dd-t\nsizes: [2]\n")
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(path), "--results", str(tmp_path / "r")])
    assert exc.value.code == 2
    from experiments.registry import TYPES

    known = ", ".join(["traffic (the default)"] + [n for n in TYPES if n != "traffic"])  # every registered type
    assert {"ddsperf", "app", "dtn"} <= set(TYPES)
    assert f"type 'dddperf': unknown experiment type (known: {known})" in capsys.readouterr().err
    path.write_text("type: app\nname: dd-t\nnodes: 2\n")
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(path), "--results", str(tmp_path / "r")])
    assert exc.value.code == 2 and "run it with `swarm run`" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
