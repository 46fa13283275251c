"""Joining the hosts in one Docker Swarm (initialised on the first host if it was in none, the others joined
as workers, what the framework did recorded in node labels) and shipping the node image to each host."""
from __future__ import annotations

import json
import time

from swarm.errors import CommandError, SpecError
from swarm.runtime.runner import redacted_error
from swarm.runtime.backends.base import Progress
from swarm.spec.hosts import HostSpec
from swarm.spec.model import NodePlan, SwarmSpec

from swarm.runtime.backends.multihost.common import (LABEL_CREATED, LABEL_ENDPOINT, LABEL_GWBRIDGE, LABEL_JOINED,
                                                     LOCAL_HOST, MultiHostParts)


class Joining(MultiHostParts):
    """SwarmBackend's Swarm membership and image shipping (a mixin)."""

    def _ensure_swarm(self, swarm: str, plan: dict, hosts: list[HostSpec]) -> None:
        mgr = hosts[0]
        d = self._docker(mgr)
        if plan["swarm_state"][mgr.name] == "inactive":
            gw_before = self._has_gwbridge(mgr)
            self._record(swarm, plan, {"host": mgr.name, "what": "swarm-init", "gwbridge_before": gw_before})
            argv = [*d, "swarm", "init"]
            if mgr.advertise_addr:
                argv += ["--advertise-addr", mgr.advertise_addr]
            self.runner.run(argv, timeout=120)
            self._label_self(mgr, {LABEL_CREATED: swarm, LABEL_ENDPOINT: json.dumps(mgr.docker_args()),
                                   **({} if gw_before else {LABEL_GWBRIDGE: "1"})})
        token = self.runner.run([*d, "swarm", "join-token", "-q", "worker"], timeout=60).stdout.strip()
        addr = self.runner.run([*d, "info", "--format", "{{.Swarm.NodeAddr}}"], timeout=30).stdout.strip()
        for h in hosts[1:]:
            if plan["swarm_state"][h.name] != "inactive":
                continue
            gw_before = self._has_gwbridge(h)
            self._record(swarm, plan, {"host": h.name, "what": "swarm-join", "gwbridge_before": gw_before})
            self._join(h, token, f"{addr}:2377")
            node_id = self.runner.run([*self._docker(h), "info", "--format", "{{.Swarm.NodeID}}"], timeout=30).stdout.strip()
            plan["swarm_state"][h.name] = "active"
            self._node_labels(mgr, node_id, {LABEL_JOINED: "1", LABEL_ENDPOINT: json.dumps(h.docker_args()),
                                             **({} if gw_before else {LABEL_GWBRIDGE: "1"})})
        plan["swarm_state"][mgr.name] = "active"
        self._save(swarm, plan)

    def _join(self, host: HostSpec, token: str, remote: str) -> None:
        """`docker swarm join` without the token on any command line: `docker swarm join --token` has no stdin or
        environment form (its argv is in `ps` for the join's duration), so the Engine API's POST /swarm/join is
        sent as one HTTP request on the stdin of `docker system dial-stdio`, which relays it to the host's
        daemon wherever the CLI reaches it (the local socket, ssh:// through the remote's own dial-stdio, tcp://
        with TLS). The token is in the request body only, and out of the log and of any error message."""
        argv = [*self._docker(host), "system", "dial-stdio"]
        res = self.runner.run(argv, input=join_request(token, remote, host.advertise_addr), timeout=120,
                              check=False, secrets=[token])
        why = join_refused(res.stdout) if res.ok else ((res.stderr or res.stdout).strip() or f"exit {res.returncode}")
        if why:
            raise redacted_error(CommandError([*argv, "(POST /swarm/join)"], res.returncode or 1, "", why), [token])

    def _has_gwbridge(self, host: HostSpec) -> bool:
        return self.runner.run([*self._docker(host), "network", "inspect", "docker_gwbridge"], check=False, timeout=30).ok

    def _label_self(self, host: HostSpec, labels: dict[str, str]) -> None:
        node_id = self.runner.run([*self._docker(host), "info", "--format", "{{.Swarm.NodeID}}"], timeout=30).stdout.strip()
        self._node_labels(host, node_id, labels)

    def _node_labels(self, mgr: HostSpec, node_id: str, labels: dict[str, str]) -> None:
        args = [a for k, v in labels.items() for a in ("--label-add", f"{k}={v}")]
        self.runner.run([*self._docker(mgr), "node", "update", *args, node_id], timeout=60)

    def _ship_images(self, spec: SwarmSpec, nodes: list[NodePlan], image: str, plan: dict, hosts: list[HostSpec],
                     progress: Progress) -> None:
        """Stream every image a host's nodes need to that host when it lacks the tag (no registry needed)."""
        local = LOCAL_HOST
        for h in hosts:
            wanted = {n.spec.image or image for n in nodes if plan["placement"][n.name] == h.name}
            if wanted:
                wanted.add(image)  # the anchor that attaches the overlays on the host runs the node image
            for tag in sorted(wanted):
                if self.runner.run([*self._docker(h), "image", "inspect", "--format", "{{.Id}}", tag],
                                   check=False, timeout=60).ok:
                    continue
                if h.docker_args() == local.docker_args():
                    raise SpecError(f"image {tag!r}: not found on host {h.name!r} (no registry to pull from)")
                progress(0, len(nodes), f"copying image {tag} to host {h.name}")
                t0 = time.monotonic()
                self.runner.pipe(["docker", "save", tag], [*self._docker(h), "load", "-q"], timeout=1800)
                plan.setdefault("images", []).append({"host": h.name, "tag": tag, "seconds": round(time.monotonic() - t0, 1)})
                self._save(spec.name, plan)


def join_request(token: str, remote: str, advertise_addr: str | None) -> str:
    """The Engine API request `docker swarm join --token T [--advertise-addr A] REMOTE` makes (pure): the CLI's
    defaults (listen on 0.0.0.0:2377, availability active), the token in the JSON body."""
    body = json.dumps({"ListenAddr": "0.0.0.0:2377", "AdvertiseAddr": advertise_addr or "", "DataPathAddr": "",
                       "RemoteAddrs": [remote], "JoinToken": token, "Availability": "active"})
    return ("POST /swarm/join HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body.encode())}\r\nConnection: close\r\n\r\n{body}")


def join_refused(response: str) -> str:
    """'' when the daemon's HTTP answer to the join is a success, else its message as one line (pure)."""
    head, _, body = response.partition("\r\n\r\n")
    status = head.split("\r\n", 1)[0].split()
    if len(status) >= 2 and status[1].isdigit() and 200 <= int(status[1]) < 300:
        return ""
    try:
        message = str(json.loads(body).get("message", "")) if body.strip() else ""
    except (ValueError, AttributeError):
        message = body.strip()
    said = " ".join(status[1:]) if len(status) >= 2 else "no HTTP answer"
    return f"Error response from daemon ({said}): {' '.join((message or 'no message').split())[:300]}"
