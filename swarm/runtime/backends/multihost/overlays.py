"""The swarm's overlay networks: created on the manager, attached host by host by a short-lived anchor
container once the hosts before it list each other as gossip peers."""
from __future__ import annotations

import json
import time

from compose.render import LABEL_NET, LABEL_SWARM, network_name
from swarm.errors import CommandError, RuntimeFailure
from swarm.runtime.backends.base import Progress
from swarm.spec.hosts import HostSpec
from swarm.spec.model import SwarmSpec, gateway_address

from swarm.runtime.backends.multihost.common import MultiHostParts, LABEL_ANCHOR


ATTACH_TRANSIENT = ("attaching to network failed", "context deadline exceeded")
ATTACH_ATTEMPTS = 3
LEAVE_ATTEMPTS = 3
INGRESS_SETTLE_S = 15.0  # how long a leave waits for the engine to finish setting up the Swarm's ingress
# How long docker_gwbridge removal is retried while the ingress sandbox lets go of it. Docker 20.10's leave waits 5 s
# for its ingress release job and then goes on ("timeout while waiting for ingress network removal"); the job runs
# on, behind the ingress set-up, and frees the bridge when done: on a busy host after more than 10 s (a stress run,
# 2026-11-27: the second engine kept its `ingress` and docker_gwbridge past a 10 s retry).
GWBRIDGE_RM_S = 60.0
# After this long, a docker_gwbridge still held by nothing but the left engine's orphaned ingress sandbox
# (`gateway_ingress-sbox`, its one endpoint there) is let go of by force: seen in a stress run and reproduced
# here (2026-11-28), Docker's release job never came (nothing in its log for minutes); `network disconnect -f`
# of that endpoint and the bridge goes at once.
GWBRIDGE_FORCE_S = 10.0
PEER_WAIT_S = 30.0  # how long `up` waits for a newly attached host to appear in the others' overlay peers


class Overlays(MultiHostParts):
    """SwarmBackend's overlays (a mixin)."""

    def _create_overlays(self, spec: SwarmSpec, plan: dict, mgr: HostSpec) -> None:
        for which in ("isl", "ground"):
            net = getattr(spec.networks, which)
            name = network_name(spec.name, which)
            self._record(spec.name, plan, {"host": mgr.name, "what": "overlay", "name": name})
            self.runner.run([*self._docker(mgr), "network", "create", "--driver", "overlay", "--attachable", "--internal",
                             "--subnet", net.subnet, "--gateway", gateway_address(net.subnet),
                             "--ip-range", plan["ranges"][which],
                             "--opt", f"com.docker.network.driver.mtu={plan['mtu'][which]['overlay']}",
                             "--label", f"{LABEL_SWARM}={spec.name}", "--label", f"{LABEL_NET}={which}", name], timeout=120)

    def _attach_overlays(self, spec: SwarmSpec, hosts: list[HostSpec], image: str, progress: Progress) -> dict[str, str]:
        """Attach both overlays on each host that runs nodes, one host at a time (the manager first), each
        once the hosts before it see one another as the overlay's gossip peers; {host: anchor container}.

        Why one at a time: when the first containers of a new overlay started on two engines at once, Docker
        20.10 answered "attaching to network failed ... context deadline exceeded" after 20 s on one of them,
        10 s before its log said "Bulk sync to node <the other> timed out" (seen in CI, on the manager and on
        the worker). An engine that joins an overlay synchronises it with the engines already on it; with
        every host attached beforehand, the nodes start on overlays each engine has already joined."""
        anchors: dict[str, str] = {}
        for i, h in enumerate(hosts):
            progress(0, len(hosts), f"attaching the overlays on host {h.name} ({i + 1}/{len(hosts)})")
            anchors[h.name] = self._anchor(spec, h, image)
            if i and not self._wait_overlay_peers(spec.name, hosts[:i + 1]):
                self._check_network_agents(spec.name, hosts[:i + 1])
                progress(0, len(hosts), f"host {h.name}: the overlay's gossip peers did not agree within "
                                        f"{PEER_WAIT_S:.0f} s; going on (readiness judges the nodes)")
        return anchors

    def _check_network_agents(self, swarm: str, hosts: list[HostSpec]) -> None:
        """Raise RuntimeFailure naming each host whose engine lists no gossip peer at all on the ISL overlay,
        not even itself, although a container of ours is attached there: that engine's gossip did not start (seen in
        CI: every node there then failed readiness 62 s later, in four tests in a row), so fail now, naming it."""
        dead = [h.name for h in hosts if self._overlay_peers(swarm, h) == []]
        if dead:
            raise RuntimeFailure(
                f"host {', '.join(dead)}: its Docker engine did not join the overlay's gossip (overlay "
                f"{network_name(swarm, 'isl')} lists no gossip peers, not even the host itself, {PEER_WAIT_S:.0f} s after "
                f"a container attached), so its nodes cannot reach other hosts; that dockerd's log says why (look for "
                f"'agentInit' or 'memberlist': e.g. gossip port 7946 still bound after an earlier `swarm leave`, a leak "
                f"fixed upstream in moby PR 50115); fix that host's engine, then run `up` again")

    def _wait_overlay_peers(self, swarm: str, hosts: list[HostSpec], timeout: float | None = None) -> bool:
        """Wait until each host's engine lists every one of `hosts` as a gossip peer of the ISL overlay;
        False (and go on: readiness then judges the nodes) if that did not happen within `timeout` (PEER_WAIT_S)."""
        deadline = time.monotonic() + (PEER_WAIT_S if timeout is None else timeout)
        while True:
            agree = all(len(self._overlay_peers(swarm, h) or []) >= len(hosts) for h in hosts)
            if agree or time.monotonic() > deadline:
                return agree
            time.sleep(0.5)

    def _overlay_peers(self, swarm: str, host: HostSpec) -> list[str] | None:
        """The addresses the host's engine lists as gossip peers of the swarm's ISL overlay (Docker 20.10's
        `network inspect --verbose` Peers), sorted; None if the engine did not answer."""
        res = self.runner.run([*self._docker(host), "network", "inspect", "--verbose", "--format", "{{json .Peers}}",
                               network_name(swarm, "isl")], check=False, timeout=30)
        if not res.ok:
            return None
        try:
            return sorted(p.get("IP", "?") for p in json.loads(res.stdout or "null") or [])
        except ValueError:
            return []

    def _anchor(self, spec: SwarmSpec, host: HostSpec, image: str) -> str:
        """A container that attaches both overlays on a host: a worker sees a Swarm overlay (and Compose v1
        finds it) only once something on it is attached; see _attach_overlays for why the manager gets one too."""
        d = self._docker(host)
        name = f"{spec.name}-anchor-{host.name}"
        for attempt in range(ATTACH_ATTEMPTS):
            self.runner.run([*d, "rm", "-f", name], check=False, timeout=60)
            try:
                self.runner.run([*d, "run", "-d", "--name", name, "--label", f"{LABEL_SWARM}={spec.name}",
                                 "--label", f"{LABEL_ANCHOR}=1", "--network", network_name(spec.name, "isl"),
                                 "--entrypoint", "sleep", image, "600"], timeout=120)
                self.runner.run([*d, "network", "connect", network_name(spec.name, "ground"), name], timeout=60)
                return name
            except CommandError as exc:
                if attempt + 1 == ATTACH_ATTEMPTS or not any(m in exc.stderr for m in ATTACH_TRANSIENT):
                    raise
                time.sleep(2.0 * (attempt + 1))
        raise AssertionError("unreachable: the last attempt returns or raises")

    # ----------------------------------------------------------------------------------------- looking
