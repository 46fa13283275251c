"""Taking a multi-host swarm down host by host and releasing what the framework did to the Swarm (leave,
docker_gwbridge, the ingress sandbox), the last swarm undoing exactly what the first one set up."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from compose.render import LABEL_SWARM, network_name
from swarm.errors import RuntimeFailure
from swarm.spec.hosts import HostSpec

from swarm.runtime.backends.multihost.common import MultiHostParts, LABEL_CREATED, LABEL_JOINED, LABEL_GWBRIDGE, LABEL_ENDPOINT
from swarm.runtime.backends.multihost.overlays import GWBRIDGE_FORCE_S, GWBRIDGE_RM_S, INGRESS_SETTLE_S, LEAVE_ATTEMPTS


class Release(MultiHostParts):
    """SwarmBackend's down and wipe (a mixin)."""

    def down(self, swarm: str) -> list[str]:
        plan = self.plan(swarm)
        if plan is None:
            return []
        hosts = self.hosts(swarm)
        reach = {h.name: self._reach(h) for h in hosts}
        removed, remaining = self._remove_containers(swarm, hosts, reach, plan)
        mgr = next(h for h in hosts if h.name == plan["manager"])
        if not reach[mgr.name]:
            removed += self._remove_overlays(swarm, mgr, remaining)
            removed += self._release_swarm(mgr, hosts, reach, plan, remaining)
        else:
            remaining.append(f"host {mgr.name} ({mgr.endpoint}) unreachable ({reach[mgr.name]}): still holds the "
                             f"overlays {network_name(swarm, 'isl')}, {network_name(swarm, 'ground')} and the Swarm")
        if remaining:
            plan["remaining"] = remaining
            self._save(swarm, plan)
            raise RuntimeFailure(f"swarm {swarm!r} partly removed ({'; '.join(removed) or 'nothing'}); "
                                 + "; ".join(remaining) + f"; run `swarm down {swarm}` again when it answers")
        self._plans.pop(swarm, None)
        return removed

    def _remove_containers(self, swarm: str, hosts: list[HostSpec], reach: dict[str, str],
                           plan: dict) -> tuple[list[str], list[str]]:
        """The swarm's containers removed from every host that answers, in parallel: (removed, what stays where)."""
        removed: list[str] = []
        remaining: list[str] = []

        def clear(h: HostSpec) -> list[str]:
            return self._compose(swarm, h, plan).remove_containers(swarm)

        live = [h for h in hosts if not reach[h.name]]
        with ThreadPoolExecutor(max(1, min(8, len(live) or 1))) as pool:
            for h, got in zip(live, pool.map(clear, live)):
                removed += [f"{h.name}: {r}" for r in got]
        for h in hosts:
            if reach[h.name]:
                nodes = sorted(n for n, hn in plan["placement"].items() if hn == h.name)
                held = f"containers {nodes[0]}..{nodes[-1]}" if nodes else "no containers"
                remaining.append(f"host {h.name} ({h.endpoint}) unreachable ({reach[h.name]}): still holds {held}")
        return removed, remaining

    def _remove_overlays(self, swarm: str, mgr: HostSpec, remaining: list[str]) -> list[str]:
        """The swarm's overlay networks removed at the manager; what stays (and why) is added to `remaining`."""
        d = self._docker(mgr)
        nets = self.runner.run([*d, "network", "ls", "-q", "--filter", f"label={LABEL_SWARM}={swarm}"],
                               timeout=60).stdout.split()
        if not nets:
            return []
        # Right after the containers go, the Swarm may still hold their attachments for a moment;
        # with a host unreachable its attachments stay, so one try is enough to know.
        attempts = 1 if remaining else 10
        for attempt in range(attempts):
            res = self.runner.run([*d, "network", "rm", *nets], check=False, timeout=120)
            nets = [n for n in nets if self.runner.run([*d, "network", "inspect", n], check=False, timeout=30).ok]
            if not nets:
                return [f"{mgr.name}: 2 overlay network(s)"]
            time.sleep(0.5 * (attempt + 1))
        names = self.runner.run([*d, "network", "inspect", "--format", "{{.Name}}", *nets],
                                check=False, timeout=30).stdout.split() or nets
        why = next((ln for ln in (res.stderr or "").splitlines() if "Error" in ln), "still in use")
        remaining.append(f"host {mgr.name}: overlays {', '.join(names)} kept ({why.strip()[:160]})")
        return []

    def _release_swarm(self, mgr: HostSpec, hosts: list[HostSpec], reach: dict[str, str], plan: dict,
                       remaining: list[str]) -> list[str]:
        """Undo what the framework did to the Swarm, once no swarm of the framework uses it any more:
        workers it joined leave (and lose the docker_gwbridge joining made), and if it initialised the
        Swarm the manager leaves too. What the framework did is read from the Swarm's node labels."""
        d = self._docker(mgr)
        removed: list[str] = []
        info = self._swarm_info(mgr)
        if info.get("LocalNodeState") != "active" or not info.get("ControlAvailable"):
            return self._finish_rejoins(plan, removed, remaining)
        if self.runner.run([*d, "network", "ls", "-q", "--filter", f"label={LABEL_SWARM}", "--filter", "driver=overlay"],
                           timeout=60).stdout.split():
            return removed  # another swarm of the framework still uses this Swarm
        ids = self.runner.run([*d, "node", "ls", "--format", "{{.ID}}"], timeout=60).stdout.split()
        nodes = json.loads(self.runner.run([*d, "node", "inspect", *ids], timeout=60).stdout or "[]") if ids else []
        ingress = self._ingress_network(mgr)
        # This swarm's own record backs the labels up: an `up` interrupted between `swarm init`/`join` and
        # the label it puts on the node still released what it made.
        records = {(c["host"], c["what"]): c for c in plan.get("created", [])}
        init = records.get((mgr.name, "swarm-init"))
        mine = next((_labels(n) for n in nodes if n["ID"] == info.get("NodeID")), {})
        created_here = init is not None or LABEL_CREATED in mine
        gw_here = (init is not None and not init.get("gwbridge_before", True)) or LABEL_GWBRIDGE in mine
        handled: set[str] = set()
        retry: list[dict] = []  # workers that did not leave: asked again by the next `down`, not this one
        for node in nodes:
            if node["ID"] != info.get("NodeID") and LABEL_JOINED in _labels(node):
                handled.add(self._release_worker(d, node, hosts, reach, plan, ingress, removed, remaining, retry))
        self._release_unlabelled_joins(d, hosts, records, handled, reach, ingress, removed, remaining)
        if created_here:
            if (why := self._leave(d, ingress)):
                remaining.append(f"host {mgr.name}: did not leave the Swarm it initialised ({why})")
            else:
                removed.append(f"{mgr.name}: left the Swarm it initialised")
                if gw_here:
                    self._gwbridge_gone(d, mgr.name, removed, remaining)
        removed = self._finish_rejoins(plan, removed, remaining)
        plan["pending_leave"] = plan.get("pending_leave", []) + retry
        return removed

    def _release_worker(self, d: list[str], node: dict, hosts: list[HostSpec], reach: dict[str, str], plan: dict,
                        ingress: str, removed: list[str], remaining: list[str], retry: list[dict]) -> str:
        """A worker the framework joined leaves the Swarm (or is noted to be asked again) and its node entry goes;
        returns the host's name."""
        labels = _labels(node)
        args = json.loads(labels.get(LABEL_ENDPOINT, "[]"))
        host_name = next((h.name for h in hosts if h.docker_args() == args), node.get("Description", {}).get("Hostname", "?"))
        wd = ["docker", *args]
        if host_name in reach and reach[host_name]:
            remaining.append(f"host {host_name}: still a member of the Swarm (it will be asked to leave on the next `down`)")
            plan.setdefault("pending_leave", []).append({"args": args, "gwbridge": LABEL_GWBRIDGE in labels})
        elif (why := self._leave(wd, ingress)):
            remaining.append(f"host {host_name}: did not leave the Swarm ({why}); the next `down` asks it again")
            retry.append({"args": args, "gwbridge": LABEL_GWBRIDGE in labels})
        else:
            removed.append(f"{host_name}: left the Swarm")
            if LABEL_GWBRIDGE in labels:
                self._gwbridge_gone(wd, host_name, removed, remaining)
        self.runner.run([*d, "node", "rm", "--force", node["ID"]], check=False, timeout=60)
        return host_name

    def _release_unlabelled_joins(self, d: list[str], hosts: list[HostSpec], records: dict, handled: set[str],
                                  reach: dict[str, str], ingress: str, removed: list[str], remaining: list[str]) -> None:
        """Hosts joined by this swarm's `up` but never labelled (interrupted right after the join) leave too."""
        for h in hosts:
            rec = records.get((h.name, "swarm-join"))
            if rec is None or h.name in handled or reach.get(h.name):
                continue
            wd = self._docker(h)
            node_id = self._swarm_info(h).get("NodeID", "")
            if node_id and (why := self._leave(wd, ingress)):
                remaining.append(f"host {h.name}: did not leave the Swarm ({why})")
            elif node_id:
                removed.append(f"{h.name}: left the Swarm")
                if not rec.get("gwbridge_before", True):
                    self._gwbridge_gone(wd, h.name, removed, remaining)
                self.runner.run([*d, "node", "rm", "--force", node_id], check=False, timeout=60)

    def _leave(self, docker: list[str], ingress: str = "") -> str:
        """Make the engine leave its Swarm: '' once it says inactive, else why not (one line).

        Docker 20.10's worker sometimes answers `swarm leave --force` with "context deadline exceeded" ("agent
        failed to clean up assignments", seen after an overlay attachment that had timed out) and stays half
        in the Swarm (active, no node ID); asked again it leaves at once. So: asked up to LEAVE_ATTEMPTS times.
        With `ingress` (the Swarm's ingress network) the leave first waits for the engine to finish setting it
        up (see _await_ingress)."""
        if ingress:
            self._await_ingress(docker, ingress)
        why = ""
        for attempt in range(LEAVE_ATTEMPTS):
            res = self.runner.run([*docker, "swarm", "leave", "--force"], check=False, timeout=120)
            state = self.runner.run([*docker, "info", "--format", "{{.Swarm.LocalNodeState}}"],
                                    check=False, timeout=30).stdout.strip()
            if state == "inactive":
                return ""
            why = ((res.stderr or res.stdout).strip().splitlines() or [f"Swarm state {state!r}"])[-1].strip()[:200]
            time.sleep(1.0 * (attempt + 1))
        return why

    def _ingress_network(self, mgr: HostSpec) -> str:
        """The name of the Swarm's ingress network as the manager lists it ('' if the Swarm has none)."""
        d = self._docker(mgr)
        ids = self.runner.run([*d, "network", "ls", "-q", "--filter", "driver=overlay"], check=False, timeout=60).stdout.split()
        if not ids:
            return ""
        res = self.runner.run([*d, "network", "inspect", "--format", "{{if .Ingress}}{{.Name}}{{end}}", *ids],
                              check=False, timeout=60)
        return next((ln.strip() for ln in res.stdout.splitlines() if ln.strip()), "")

    def _await_ingress(self, docker: list[str], ingress: str) -> bool:
        """Wait (at most INGRESS_SETTLE_S) until the engine's ingress sandbox exists; False if it did not appear.

        Seen in CI: an `up` interrupted 0.4 s after `swarm init` left the Swarm while the engine was still
        setting up the ingress network; the setup finished after the leave (docker_gwbridge created 0.14 s
        after it), Docker's own release then timed out ("timeout while waiting for ingress network removal")
        and the engine kept a stale `ingress` network and a docker_gwbridge held by its `ingress-sbox`, which
        no command removes. Leaving only once the sandbox is there lets Docker release it as usual."""
        deadline = time.monotonic() + INGRESS_SETTLE_S
        while True:
            res = self.runner.run([*docker, "network", "inspect", "--format", "{{json .Containers}}", ingress],
                                  check=False, timeout=30)
            if res.ok and "ingress-sbox" in res.stdout and self._gateway_joined(docker):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def _gateway_joined(self, docker: list[str]) -> bool:
        """The ingress sandbox's gateway endpoint is on docker_gwbridge: the last step of Docker's ingress set-up
        (the sandbox joins the ingress network first, then gets its gateway), so a leave after it finds the set-up
        done."""
        res = self.runner.run([*docker, "network", "inspect", "--format", "{{json .Containers}}", "docker_gwbridge"],
                              check=False, timeout=30)
        return res.ok and "gateway_ingress-sbox" in res.stdout

    def _gwbridge_gone(self, docker: list[str], host: str, removed: list[str], remaining: list[str]) -> None:
        """docker_gwbridge removed (said in `removed`), or said in `remaining` with why it stays."""
        if self._remove_gwbridge(docker):
            removed.append(f"{host}: docker_gwbridge")
        else:
            remaining.append(f"host {host}: docker_gwbridge still held by Docker's ingress sandbox after "
                             f"{GWBRIDGE_RM_S:.0f} s (Docker did not finish releasing the Swarm's ingress network; "
                             "restarting that host's dockerd removes both)")

    def _remove_gwbridge(self, docker: list[str]) -> bool:
        """Remove docker_gwbridge (made by joining the Swarm); retried while Docker's ingress sandbox still holds
        it ("has active endpoints") right after a leave; True once it is gone."""
        start = time.monotonic()
        forced = False
        while True:
            res = self.runner.run([*docker, "network", "rm", "docker_gwbridge"], check=False, timeout=60)
            if res.ok:
                return True
            if "active endpoints" not in (res.stderr or "") or time.monotonic() > start + GWBRIDGE_RM_S:
                return False
            if not forced and time.monotonic() > start + GWBRIDGE_FORCE_S:
                forced = self._release_orphaned_gateway(docker)
            time.sleep(0.5)

    def _release_orphaned_gateway(self, docker: list[str]) -> bool:
        """Disconnect (by force) the ingress sandbox's gateway from docker_gwbridge when it is the bridge's only
        endpoint and the engine is out of the Swarm: what joining made and the leave failed to release. Anything
        else on the bridge (a container of someone else's) is left alone. True when it was disconnected."""
        state = self.runner.run([*docker, "info", "--format", "{{.Swarm.LocalNodeState}}"], check=False, timeout=30)
        held = self.runner.run([*docker, "network", "inspect", "--format",
                                "{{range .Containers}}{{.Name}} {{end}}", "docker_gwbridge"], check=False, timeout=30)
        if state.stdout.strip() != "inactive" or held.stdout.split() != ["gateway_ingress-sbox"]:
            return False
        return self.runner.run([*docker, "network", "disconnect", "-f", "docker_gwbridge", "gateway_ingress-sbox"],
                               check=False, timeout=60).ok

    def _finish_rejoins(self, plan: dict, removed: list[str], remaining: list[str]) -> list[str]:
        """Hosts that were unreachable at an earlier `down` and still think they are in the Swarm: each leaves
        (and loses the docker_gwbridge joining made, or `remaining` says why it stays)."""
        pending = []
        for item in plan.get("pending_leave", []):
            wd = ["docker", *item["args"]]
            host = " ".join(item["args"]) or "local"
            if not self._leave(wd):
                removed.append(f"{host}: left the Swarm")
                if item.get("gwbridge"):
                    self._gwbridge_gone(wd, host, removed, remaining)
            else:
                pending.append(item)
        plan["pending_leave"] = pending
        return removed

    def wipe(self) -> list[str]:
        """Every swarm of this backend that has state here, host by host."""
        removed: list[str] = []
        root = self.workdir / ".swarm"
        for path in sorted(root.glob("*/hosts.json")) if root.exists() else []:
            try:
                removed += [f"{path.parent.name}: {r}" for r in self.down(path.parent.name)]
            except RuntimeFailure as exc:
                removed.append(f"{path.parent.name}: {exc}")
        return removed


def _labels(node: dict) -> dict[str, str]:
    """A Swarm node's labels (from `docker node inspect`)."""
    return node.get("Spec", {}).get("Labels", {}) or {}
