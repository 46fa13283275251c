"""Files that can carry a node's `env:` (tokens, keys) are readable by their owner only (issue 40, item 10):
compose/<swarm>.yml on compose and per host on the swarm backend, and a run's experiment.yaml. A file left
0644 by an older version becomes 0600 when written again, and a planted link is not written through."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from experiments.store import ResultsStore
from experiments.traffic.model import experiment_from_dict
from swarm.caps import Capabilities
from swarm.runtime.backends.compose.backend import ComposeBackend
from swarm.runtime.backends.multihost.common import HostCompose
from swarm.runtime.runner import RecordingRunner
from swarm.spec.hosts import HostSpec
from swarm.spec.model import spec_from_dict

CAPS = Capabilities(kernel="x", root=True, docker=True, docker_version="20.10", compose=["docker-compose"],
                    compose_version="1.29", netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True, htb=True)
SPEC = spec_from_dict({"name": "pf-a", "backend": "compose",
                       "groups": [{"prefix": "sat", "count": 2, "env": {"API_TOKEN": "s3cret"}}]})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_compose_file_with_env_is_owner_only_also_when_it_was_0644(tmp_path):
    backend = ComposeBackend(RecordingRunner(), CAPS, tmp_path)
    old = backend.compose_file(SPEC.name)
    old.parent.mkdir(parents=True)
    old.write_text("older\n")
    old.chmod(0o644)
    path = backend.write_compose(SPEC, "swarm-emu/node:x")
    assert "s3cret" in path.read_text() and mode(path) == 0o600


def test_each_hosts_compose_file_is_owner_only(tmp_path):
    hc = HostCompose(RecordingRunner(), CAPS, tmp_path, HostSpec(name="main", endpoint="local"), ["sat01"])
    assert mode(hc.write_compose(SPEC, "swarm-emu/node:x")) == 0o600


def test_a_runs_experiment_yaml_is_owner_only(tmp_path):
    exp = experiment_from_dict({"name": "pf", "sizes": [2], "protocols": ["tcp"], "duration": 1})
    store = ResultsStore.create(tmp_path, exp, {})
    assert mode(store.dir / "experiment.yaml") == 0o600


def test_a_planted_link_is_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    backend = ComposeBackend(RecordingRunner(), CAPS, tmp_path)
    backend.compose_file(SPEC.name).parent.mkdir(parents=True)
    backend.compose_file(SPEC.name).symlink_to(victim)
    with pytest.raises(OSError):
        backend.write_compose(SPEC, "swarm-emu/node:x")
    assert victim.read_text() == "precious\n"


TOKEN = "SWMTKN-1-0123456789abcdefghijklmnopqrstuvwxyz-secretpart"


def test_a_secret_on_a_failing_command_line_is_in_no_log_line_nor_error(caplog):
    """A real command that fails and echoes its argument: the token is in neither the debug log nor the error."""
    from swarm.errors import CommandError
    from swarm.runtime.runner import Runner
    caplog.set_level("DEBUG", logger="swarm.run")
    with pytest.raises(CommandError) as err:
        Runner().run(["sh", "-c", 'echo "bad token $0" >&2; exit 3', TOKEN], secrets=[TOKEN])
    assert TOKEN not in str(err.value) and TOKEN not in err.value.stderr and TOKEN not in " ".join(err.value.argv)
    assert "REDACTED" in str(err.value) and "exit 3" in str(err.value)
    assert caplog.records and all(TOKEN not in r.getMessage() for r in caplog.records)


def test_a_failed_swarm_join_does_not_print_the_join_token(tmp_path):
    from swarm.errors import CommandError
    from swarm.runtime.backends.multihost.backend import SwarmBackend
    from swarm.runtime.runner import Result
    runner = RecordingRunner()
    answers = [(lambda a: "join-token" in a, lambda a: Result(a, 0, TOKEN + "\n")),
               (lambda a: "dial-stdio" in a, lambda a: Result(a, 0, http(
                   400, f'{{"message": "invalid join token {runner.stdins[-1].split(TOKEN[:8])[0][-3:]}{TOKEN} refused"}}')))]
    runner.answers = answers
    backend = SwarmBackend(runner, CAPS, tmp_path)
    hosts = [HostSpec(name="main", endpoint="local"), HostSpec(name="lab2", endpoint="ssh://ops@lab2")]
    plan = {"swarm_state": {"main": "active", "lab2": "inactive"}, "created": []}
    with pytest.raises(CommandError) as err:
        backend._ensure_swarm("pf-j", plan, hosts)
    assert "POST /swarm/join" in str(err.value) and "invalid join token" in str(err.value), str(err.value)
    assert "REDACTED" in str(err.value) and TOKEN not in str(err.value) and "\n" not in str(err.value)
    assert TOKEN not in err.value.stderr and TOKEN not in err.value.stdout


def http(status: int, body: str = "") -> str:
    reason = {200: "OK", 400: "Bad Request", 503: "Service Unavailable"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}")


@pytest.mark.parametrize("endpoint", ["local", "ssh://ops@lab2", "tcp://10.0.0.2:2376"])
def test_the_join_token_is_on_no_command_line_only_on_stdin(tmp_path, endpoint):
    """Issue 40 item 10: `docker swarm join --token T` put the token in argv (visible in `ps` for the join's
    duration; the CLI has no other form). The join is now the Engine API's POST /swarm/join, its body on the
    stdin of `docker system dial-stdio` (the local socket, ssh:// and tcp:// alike). Before the fix the argv held
    the token (this test failed)."""
    import json
    from swarm.runtime.backends.multihost.backend import SwarmBackend
    from swarm.runtime.runner import Result
    runner = RecordingRunner(answers=[(lambda a: "join-token" in a, lambda a: Result(a, 0, TOKEN + "\n")),
                                      (lambda a: "{{.Swarm.NodeAddr}}" in a, lambda a: Result(a, 0, "10.0.0.1\n")),
                                      (lambda a: "dial-stdio" in a, lambda a: Result(a, 0, http(200)))])
    backend = SwarmBackend(runner, CAPS, tmp_path)
    tls = {"tls": {"ca": "/etc/d/ca.pem", "cert": "/etc/d/cert.pem", "key": "/etc/d/key.pem"}} if "tcp" in endpoint else {}
    lab2 = HostSpec(name="lab2", endpoint=endpoint, advertise_addr="10.0.0.2", **tls)
    hosts = [HostSpec(name="main", endpoint="local"), lab2]
    plan = {"swarm_state": {"main": "active", "lab2": "inactive"}, "created": []}
    backend._ensure_swarm("pf-k", plan, hosts)
    assert plan["swarm_state"]["lab2"] == "active"
    assert all(TOKEN not in arg for argv in runner.calls for arg in argv), runner.calls
    assert not [argv for argv in runner.calls if "join" in argv and "swarm" in argv]  # no `docker swarm join`
    joins = [(argv, stdin) for argv, stdin in zip(runner.calls, runner.stdins) if "dial-stdio" in argv]
    assert len(joins) == 1
    argv, stdin = joins[0]
    assert argv == ["docker", *lab2.docker_args(), "system", "dial-stdio"]
    head, _, body = stdin.partition("\r\n\r\n")
    assert head.startswith("POST /swarm/join HTTP/1.1\r\n") and f"Content-Length: {len(body)}" in head
    assert json.loads(body) == {"ListenAddr": "0.0.0.0:2377", "AdvertiseAddr": "10.0.0.2", "DataPathAddr": "",
                                "RemoteAddrs": ["10.0.0.1:2377"], "JoinToken": TOKEN, "Availability": "active"}


def test_the_daemons_answer_to_a_join_is_read_as_one_line():
    from swarm.runtime.backends.multihost.joining import join_refused
    assert join_refused(http(200)) == ""
    said = join_refused(http(503, '{"message": "This node is already part of a swarm.\\nUse leave."}'))
    assert said == "Error response from daemon (503 Service Unavailable): This node is already part of a swarm. Use leave."
    assert join_refused("") == "Error response from daemon (no HTTP answer): no message"
    assert join_refused(http(400, "not json")).endswith(": not json")
