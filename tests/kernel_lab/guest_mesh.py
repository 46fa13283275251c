"""Runs INSIDE the kernel-lab guest: the B.A.T.M.A.N. mesh of a netns swarm for real, batman-adv (the kernel
module this host lacks) or batmand, measured with the project's own convergence judgement (swarm.mesh).

For each implementation given: `up` (convergence after start), `swarm mesh` (the CLI, in this process), then
ROUNDS times: cut sat01-sat02 (sat01 must reach sat02 over a third node), heal (the direct route must come
back); each event's convergence time and resolution as `swarm fault` measures them; a ping over the mesh after
each; `down` and nothing left. Prints progress on stderr and one line `KL-RESULT <json>`.

    [KL_WATCH=1] python tests/kernel_lab/guest_mesh.py NAME THIRD NODES OGM_MS ROUNDS IMPL [IMPL ...]

KL_WATCH=1 (the benchmark) also reads sat01's and sat02's tables continuously around each event (Watcher).

tests/kernel_lab/test_kernel_batman_adv.py runs it for batman-adv (4 nodes, 1 round);
bench/bench_kernel_lab_mesh.py for both implementations (8 nodes, several rounds, same OGM interval).
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from swarm.cli.main import main as swarm_cli
from swarm.mesh.plan import healed_pairs
from swarm.runtime.swarm import Swarm
from swarm.spec.model import spec_from_dict


def say(msg: str) -> None:
    print(f"[guest {time.monotonic():7.1f}] {msg}", file=sys.stderr, flush=True)


def cli(*args: str) -> int:
    try:
        swarm_cli(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def ping_ok(swarm: Swarm, src: str, dst: str) -> bool:
    res = swarm.exec(src, ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", swarm.node(dst).isl_ip], check=False,
                     timeout=60)
    return res.ok


def cuts(swarm: Swarm) -> set:
    return set(swarm.links.load().cuts)


class Watcher:
    """Reads one node's mesh table in a loop (one long-lived shell in the node: no Python, one `batctl` or `ip`
    per read), each read stamped with the wall clock: a much finer view of one route than a snapshot of every
    node, which under TCG takes seconds."""

    def __init__(self, swarm: Swarm, node: str):
        read = " ".join(swarm.mesh.impl.routes_argv())  # batctl's originator table, or batmand's table 66
        script = f'while :; do echo "@ $(date +%s.%N)"; {read}; echo; done'
        self.swarm, self.node = swarm, node
        # into a file, not a pipe: nobody reads during the event, and a full pipe would stall the reads
        self.out = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(swarm.backend.exec_prefix(swarm.name, node) + ["sh", "-c", script],
                                     stdout=self.out, text=True, start_new_session=True)

    def stop(self) -> list[tuple[float, dict[str, str]]]:
        """Every complete read: (wall-clock start, destination node -> next-hop node)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        reads, mesh = [], self.swarm.mesh
        chunks = text.split("@ ")[1:]
        for chunk in chunks[:-1]:  # the last read may be cut short by the kill
            stamp, _, body = chunk.partition("\n")
            routes = mesh.impl.parse_routes(body.strip() or "[]")
            reads.append((float(stamp), {mesh.by_addr.get(d, d): mesh.by_addr.get(h, h) for d, h in routes.items()}))
        return reads


def first_good(reads, since: float, good) -> tuple[float | None, float | None]:
    """Seconds from `since` to the first read (started after `since`) whose routes satisfy `good`, and the gap
    to the read before it (the resolution)."""
    prev = None
    for stamp, routes in reads:
        if stamp < since:
            prev = stamp
            continue
        if good(routes):
            return round(stamp - since, 3), round(stamp - (prev if prev is not None else since), 3)
        prev = stamp
    return None, None


def measure(swarm: Swarm, event: str, apply, watch: bool = False) -> dict:
    """Apply an event and time the mesh's convergence after it, as `swarm fault` does; with `watch`, also the
    moment sat01's route to sat02 and sat02's to sat01 (after a cut of that link on a full mesh, the only
    routes that must change) took their new next hop, read continuously in both nodes."""
    before = cuts(swarm)
    watchers = [Watcher(swarm, "sat01"), Watcher(swarm, "sat02")] if watch else []
    time.sleep(2.0 if watch else 0)  # a few reads before the event
    t0 = time.time()
    apply()
    t = time.time()  # convergence counts from the fault's application, as in `swarm fault`
    timing = swarm.mesh.wait_converged(t, direct=healed_pairs(before, cuts(swarm)))
    routes = swarm.mesh.node_routes("sat01")
    row = {"event": event, "apply_s": round(t - t0, 2), "converged": timing["converged"], "converge_s": timing.get("converge_s"),
           "resolution_s": timing.get("resolution_s"), "polls": timing.get("polls"),
           "problem": timing.get("problem", ""), "sat01_to_sat02_via": routes.get("sat02")}
    if watchers:
        r1, r2 = (w.stop() for w in watchers)
        healed = event.startswith("heal")
        ok = (lambda dst: (lambda r: r.get(dst) == dst)) if healed else \
            (lambda dst: (lambda r: r.get(dst) not in (None, dst)))
        # counted from the start of apply(): the routes may move while the second node's rules are being set
        s1, res1 = first_good(r1, t0, ok("sat02"))
        s2, res2 = first_good(r2, t0, ok("sat01"))
        row["watch"] = {"sat01_s": s1, "sat01_res_s": res1, "sat02_s": s2, "sat02_res_s": res2,
                        "read_s": round(statistics.median([b[0] - a[0] for a, b in zip(r1, r1[1:])]), 3) if len(r1) > 1
                        else None}
    row["ping_sat01_sat02"] = ping_ok(swarm, "sat01", "sat02")
    say(f"{event}: converged={row['converged']} in {row['converge_s']} s (resolution {row['resolution_s']} s); "
        f"sat01->sat02 via {row['sat01_to_sat02_via']}; ping {'ok' if row['ping_sat01_sat02'] else 'FAILED'}")
    return row


def run_one(name: str, third: int, nodes: int, ogm_ms: int, rounds: int, impl: str, watch: bool) -> dict:
    spec = spec_from_dict({
        "name": name, "nodes": nodes, "backend": "netns",
        "defaults": {"command": ["sleep", "infinity"]},  # no Python per node: the guest's CPU is emulated
        "networks": {"isl": {"subnet": f"10.{third}.0.0/24"}, "ground": {"subnet": f"10.{third + 1}.0.0/24"}},
        "mesh": {"protocol": "batman", "implementation": impl, "ogm_interval": f"{ogm_ms}ms", "purge_timeout": "5s",
                 "converge_timeout": "120s"}})
    swarm = Swarm(spec)
    swarm.down()
    out: dict = {"implementation": impl, "nodes": nodes, "ogm_ms": ogm_ms, "events": []}
    try:
        up_s = swarm.up()
        up = swarm.mesh_result
        out["up"] = {"up_s": round(up_s, 1), "converged": up.get("converged"), "converge_s": up.get("converge_s"),
                     "resolution_s": up.get("resolution_s"), "problem": up.get("problem", "")}
        out["describe"] = swarm.mesh.describe()
        say(f"{impl}: up in {up_s:.1f} s; mesh converged={up.get('converged')} {up.get('converge_s')} s after start")
        snaps = []
        for _ in range(3):  # what one convergence poll costs in this guest (it bounds the resolution)
            s0 = time.time()
            swarm.mesh.snapshot()
            snaps.append(round(time.time() - s0, 2))
        out["snapshot_s"] = snaps
        say(f"one snapshot of every node's routes takes {snaps} s")
        out["mesh_cli_rc"] = cli("mesh", name)
        report = swarm.mesh.report()
        out["report_sat01"] = next(r for r in report["nodes"] if r["node"] == "sat01")
        out["ping_after_up"] = ping_ok(swarm, "sat01", f"sat{nodes:02d}")
        if impl == "batman-adv":
            out["bla"] = swarm.exec("sat01", ["batctl", "meshif", "bat0", "bridge_loop_avoidance"]).stdout.strip()
        for _ in range(rounds):
            out["events"].append(measure(swarm, "cut sat01 sat02", lambda: swarm.links.cut("sat01", "sat02"), watch))
            out["events"].append(measure(swarm, "heal sat01 sat02", lambda: swarm.links.heal("sat01", "sat02"), watch))
    finally:
        out["down"] = swarm.down()
    out["namespaces_left"] = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                          text=True).stdout.split() if name in ns]
    out["daemons_left"] = subprocess.run(["pgrep", "-c", "batmand"], capture_output=True, text=True).stdout.strip()
    return out


def main() -> None:
    name, third, nodes, ogm_ms, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5])
    watch = os.environ.get("KL_WATCH") == "1"
    results = [run_one(f"{name}-{i}", third + 2 * i, nodes, ogm_ms, rounds, impl, watch)
               for i, impl in enumerate(sys.argv[6:])]
    print("KL-RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
