#!/usr/bin/env python3
"""Reference swarm flight app: Cyclone DDS on the ISL network, CCSDS commanding/telemetry on the ground network.

Every cycle (rate SWARM_APP_RATE_HZ, default 10 Hz; cycles are aligned to the epoch clock, which nodes share)
a node
1. makes its plan for this cycle from the observations of the previous cycle it received (its own included),
   with the DSA-like allocation of swarm_logic.allocate;
2. samples its simulated sensor and publishes an Observation (target scores) and its State (position, plan
   digest) on DDS topics `swarm_Observation` / `swarm_State` (best effort, domain SWARM_DDS_DOMAIN);
3. takes what peers published, stamping latency (receive - send time) per sample.
It writes, as they happen, into SWARM_APP_OUT (default: SWARM_RUN_DIR):
- <node>.peers.csv: per peer and 1 s window of send cycles: expected and received samples, delivery ratio,
  latency p50/p95/max, age of the newest data held from the peer when plans were made;
- <node>.plans.csv: per cycle: plan digest, how many nodes' observations it used, how many peers reported
  a plan for that cycle and how many agreed, cycles skipped because the node ran late.
Cyclone DDS is bound to the ISL interface (CYCLONEDDS_URI, built from SWARM_ISL_IP unless given), so ground
traffic stays separate. Commands (CCSDS, cFS framing; see ground_link) arrive on UDP 1234 of the ground
address; housekeeping telemetry goes once a second to UDP 1235 of the address an ENABLE_OUTPUT command named.
"""
from __future__ import annotations

import csv
import faulthandler
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ground_link as gl  # noqa: E402
from swarm_logic import PEER_COLUMNS, WindowStats, allocate, plan_digest, sense  # noqa: E402

PLAN_COLUMNS = ["node", "cycle", "cycle_ts", "digest", "inputs", "own_targets", "peers_reported", "peers_agree",
                "skipped"]


def cyclone_uri(isl_ip: str, unicast_peers: list[str] | None = None) -> str:
    """Cyclone DDS configuration binding it to the interface holding `isl_ip`; with `unicast_peers`, multicast
    is off and participants are discovered by unicast to those addresses."""
    general = f"<Interfaces><NetworkInterface address=\"{isl_ip}\"/></Interfaces>"
    # Participants announce themselves every second (Cyclone's default is 30 s): after a partition longer
    # than the 10 s lease, or while a mesh is still converging, peers find each other again within ~1 s.
    discovery = "<SPDPInterval>1s</SPDPInterval>"
    if unicast_peers is not None:
        general += "<AllowMulticast>false</AllowMulticast>"
        peers = "".join(f"<Peer address=\"{ip}\"/>" for ip in unicast_peers)
        discovery += f"<ParticipantIndex>auto</ParticipantIndex><Peers>{peers}</Peers>"
    return (f"<CycloneDDS><Domain id=\"any\"><General>{general}</General>"
            f"<Discovery>{discovery}</Discovery></Domain></CycloneDDS>")


def use_multicast(setting: str) -> bool:
    """SWARM_APP_MULTICAST: 1 / 0 (the framework sets it per backend), or auto: multicast except in a Docker
    container, whose internal bridge network drops packets to addresses outside its subnet (Docker's isolation
    rules, with br_netfilter), multicast groups included."""
    if setting in ("1", "true"):
        return True
    if setting in ("0", "false"):
        return False
    return not Path("/.dockerenv").exists()


class CsvLog:
    """A CSV file written row by row and flushed at once (a crash loses nothing already written)."""

    def __init__(self, path: Path, columns: list[str]):
        self.file = path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, columns, extrasaction="ignore")
        if path.stat().st_size == 0:
            self.writer.writeheader()

    def write(self, rows: list[dict]) -> None:
        if rows:
            self.writer.writerows(rows)
            self.file.flush()


@dataclass
class Config:
    node: str
    isl_ip: str
    ground_ip: str
    peers: list[str]
    rate_hz: float
    domain_id: int
    targets: int
    window_s: float
    out: Path
    multicast: bool = True
    peer_ips: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env=os.environ) -> "Config":
        node = env.get("SWARM_NODE", socket.gethostname())
        peers = [p for p in env.get("SWARM_PEERS", "").split(",") if p and p != node]
        targets = int(env.get("SWARM_APP_TARGETS", "0") or 0) or len(peers) + 1
        out = Path(env.get("SWARM_APP_OUT") or env.get("SWARM_RUN_DIR") or "/run/swarm")
        isl_ip = env.get("SWARM_ISL_IP", "127.0.0.1")
        peer_ips = tuple(ip for ip in env.get("SWARM_PEER_IPS", "").split(",") if ip and ip != isl_ip)
        return cls(node, isl_ip, env.get("SWARM_GROUND_IP", "0.0.0.0"), peers,
                   float(env.get("SWARM_APP_RATE_HZ", "10")), int(env.get("SWARM_DDS_DOMAIN", "0")), targets,
                   float(env.get("SWARM_APP_WINDOW_S", "1")), out,
                   use_multicast(env.get("SWARM_APP_MULTICAST", "auto")), peer_ips)


class SwarmApp:
    """One node's app: DDS entities, ground socket, the cycle loop."""

    def __init__(self, cfg: Config):
        os.environ.setdefault("CYCLONEDDS_URI", cyclone_uri(cfg.isl_ip, None if cfg.multicast else list(cfg.peer_ips)))
        from cyclonedds.core import Policy, Qos, ReadCondition, WaitSet, SampleState, ViewState, InstanceState
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.pub import DataWriter
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        from swarm_types import Observation, State

        self.cfg = cfg
        self.Observation, self.State = Observation, State
        self.dp = DomainParticipant(cfg.domain_id)
        qos = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(64))
        self.topics = [Topic(self.dp, "swarm_Observation", Observation, qos=qos), Topic(self.dp, "swarm_State", State, qos=qos)]
        self.writers = [DataWriter(self.dp, t, qos=qos) for t in self.topics]
        self.readers = [DataReader(self.dp, t, qos=qos) for t in self.topics]
        self.waitset = WaitSet(self.dp)
        for r in self.readers:
            self.waitset.attach(ReadCondition(r, SampleState.Any | ViewState.Any | InstanceState.Any))
        cfg.out.mkdir(parents=True, exist_ok=True)
        self.peer_log = CsvLog(cfg.out / f"{cfg.node}.peers.csv", PEER_COLUMNS)
        self.plan_log = CsvLog(cfg.out / f"{cfg.node}.plans.csv", PLAN_COLUMNS)
        self.ground = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.ground.bind((cfg.ground_ip, gl.CI_LAB_PORT))
        # Commands are read by a thread of their own and executed by the cycle loop at its next wake-up, so
        # the loop sleeps in the DDS wait set until data or the cycle boundary (no polling: at 100 nodes
        # every wake-up of every node costs CPU the host does not have).
        self.commands: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._receive_commands, name="ci_lab", daemon=True).start()
        self.tlm_dest: str | None = None
        self.counters = {"command_count": 0, "command_errors": 0, "samples_received": 0}
        self.tlm_seq = 0
        self.stop = False
        self.rate_changed = False
        self._reset_cycle_state()

    def _reset_cycle_state(self) -> None:
        cfg = self.cfg
        self.period = 1.0 / cfg.rate_hz
        self.stats = WindowStats(cfg.node, cfg.peers, cfg.rate_hz, max(1, round(cfg.window_s * cfg.rate_hz)))
        self.obs: dict[int, dict[str, list[float]]] = {}  # cycle -> node -> scores
        self.peer_digests: dict[int, dict[str, str]] = {}  # cycle -> peer -> their plan digest
        self.last_sample: dict[str, int] = {}  # peer -> sample time (ns) of the newest observation held
        self.own: dict[int, tuple[str, int, int]] = {}  # cycle -> (digest, inputs, own targets)
        self.cycle = math.floor(time.time() * cfg.rate_hz)
        self.first_cycle = self.cycle + 1
        self.last_hk = {"delivery": 0.0, "agreement": 0.0, "heard": 0}

    # ------------------------------------------------------------------------------------------ cycle
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        print(f"swarm-app: {self.cfg.node} isl {self.cfg.isl_ip} domain {self.cfg.domain_id} "
              f"rate {self.cfg.rate_hz:g} Hz, {len(self.cfg.peers)} peers, {self.cfg.targets} targets, "
              f"{'multicast' if self.cfg.multicast else 'unicast'} discovery", flush=True)
        next_hk = time.time() + 1.0
        while not self.stop:
            boundary = (self.cycle + 1) * self.period
            while not self.stop and (now := time.time()) < boundary:
                self.waitset.wait(int((boundary - now) * 1e9) + 1)
                self._take()
            self._commands()
            if self.stop:
                break
            if self.rate_changed:
                self.rate_changed = False
                self._close_all()
                self._reset_cycle_state()
                continue
            self._take()  # what arrived while this node ran late counts before its windows close
            self.cycle = math.floor(time.time() * self.cfg.rate_hz)
            self._new_cycle(self.cycle)
            if time.time() >= next_hk:
                next_hk = time.time() + 1.0
                self._housekeeping()
        self._close_all()
        print(f"swarm-app: {self.cfg.node} stopping", flush=True)
        return 0

    def _on_signal(self, *_):
        self.stop = True

    def _new_cycle(self, c: int) -> None:
        cfg = self.cfg
        now_ns = time.time_ns()
        # Agreement on the last cycle published, now that its peers' states had a cycle to arrive. Its row
        # carries the cycles skipped right after it (the node ran late: those samples were never sent), so
        # receivers' expected counts can be set against what was sent.
        for prev in sorted(k for k in self.own if k < c):
            digest, inputs_used, mine = self.own.pop(prev)
            theirs = self.peer_digests.pop(prev, {})
            agree = sum(d == digest for d in theirs.values())
            self.plan_log.write([{"node": cfg.node, "cycle": prev, "cycle_ts": round(prev * self.period, 3),
                                  "digest": digest, "inputs": inputs_used, "own_targets": mine, "peers_reported": len(theirs),
                                  "peers_agree": agree, "skipped": c - prev - 1}])
            if theirs:
                self.last_hk["agreement"] = agree / len(theirs)
        # Plan for this cycle from the previous cycle's observations received.
        inputs = self.obs.get(c - 1, {})
        plan = allocate(inputs)
        digest = plan_digest(plan)
        self.own[c] = (digest, len(inputs), sum(1 for n in plan.values() if n == cfg.node))
        for peer, sample_ns in self.last_sample.items():
            self.stats.data_age(peer, c, (now_ns - sample_ns) / 1e9)
        # Sense and publish.
        scores = sense(cfg.node, c, cfg.targets)
        self.obs.setdefault(c, {})[cfg.node] = scores
        angle = 2 * math.pi * (c % 600) / 600
        sent = time.time_ns()
        self.writers[0].write(self.Observation(node=cfg.node, cycle=c, sample_ns=now_ns, sent_ns=sent, scores=scores))
        self.writers[1].write(self.State(node=cfg.node, cycle=c, sent_ns=time.time_ns(), x=math.cos(angle),
                                         y=math.sin(angle), plan_digest=digest, inputs=len(inputs)))
        for old in [k for k in self.obs if k < c - 2]:
            del self.obs[old]
        for old in [k for k in self.peer_digests if k < c - 2]:
            del self.peer_digests[old]
        # Windows whose samples can no longer be on time (two cycles of grace).
        rows = self.stats.close_before(self.stats.window_of(c - 2), self.first_cycle)
        if rows:
            self.peer_log.write(rows)
            self.last_hk["delivery"] = sum(r["delivery_ratio"] for r in rows) / len(rows)
            self.last_hk["heard"] = sum(1 for r in rows if r["received"])

    def _take(self) -> None:
        for topic, reader in enumerate(self.readers):
            while True:
                samples = reader.take(N=256)
                if not samples:
                    break
                now = time.time_ns()
                for s in samples:
                    if not isinstance(s, (self.Observation, self.State)) or s.node == self.cfg.node:
                        continue
                    self.counters["samples_received"] += 1
                    self.stats.received(s.node, topic, s.cycle, (now - s.sent_ns) / 1e9)
                    if topic == 0:
                        self.obs.setdefault(s.cycle, {})[s.node] = list(s.scores)
                        self.last_sample[s.node] = max(self.last_sample.get(s.node, 0), s.sample_ns)
                    else:
                        self.peer_digests.setdefault(s.cycle, {})[s.node] = s.plan_digest
                if len(samples) < 256:
                    break

    def _close_all(self) -> None:
        self.peer_log.write(self.stats.close_before(self.stats.window_of(self.cycle) + 1, self.first_cycle))

    # ------------------------------------------------------------------------------------------ ground
    def _receive_commands(self) -> None:
        while True:
            data, _addr = self.ground.recvfrom(2048)
            self.commands.put(data)

    def _commands(self) -> None:
        """Execute the commands received since the last cycle (at the cycle boundary, like a cFS app's
        command pipe read once per wake-up)."""
        while True:
            try:
                data = self.commands.get_nowait()
            except queue.Empty:
                return
            try:
                cmd = gl.parse_command(data)
                if cmd.apid != gl.APP_APID:
                    raise gl.PacketError(f"apid {cmd.apid:#x} is not this app's")
                self._execute(cmd)
            except (gl.PacketError, ValueError) as exc:
                self.counters["command_errors"] += 1
                print(f"swarm-app: rejected command: {exc}", flush=True)

    def _execute(self, cmd: gl.Command) -> None:
        import struct

        if cmd.function_code == gl.CC_NOOP:
            print("swarm-app: NOOP", flush=True)
        elif cmd.function_code == gl.CC_RESET_COUNTERS:
            self.counters = {k: 0 for k in self.counters}
            return  # cFS's reset does not count itself
        elif cmd.function_code == gl.CC_SET_RATE:
            (mhz,) = struct.unpack("!I", cmd.payload[:4])
            if not 100 <= mhz <= 1_000_000:
                raise gl.PacketError(f"rate {mhz / 1000:g} Hz out of 0.1..1000")
            self.cfg.rate_hz = mhz / 1000
            self.rate_changed = True
            print(f"swarm-app: rate {self.cfg.rate_hz:g} Hz", flush=True)
        elif cmd.function_code == gl.CC_ENABLE_OUTPUT:
            ip = cmd.payload[:16].split(b"\0")[0].decode()
            socket.inet_aton(ip)  # ValueError-like OSError for a bad address
            self.tlm_dest = ip
            print(f"swarm-app: telemetry to {ip}:{gl.TO_LAB_PORT}", flush=True)
        else:
            raise gl.PacketError(f"unknown function code {cmd.function_code}")
        self.counters["command_count"] += 1

    def _housekeeping(self) -> None:
        if not self.tlm_dest:
            return
        payload = gl.hk_payload(**self.counters, rate_mhz=round(self.cfg.rate_hz * 1000), cycle=self.cycle,
                                peers_heard=self.last_hk["heard"], peers=len(self.cfg.peers),
                                delivery_permille=round(self.last_hk["delivery"] * 1000),
                                agreement_permille=round(self.last_hk["agreement"] * 1000))
        try:
            self.ground.sendto(gl.telemetry_packet(payload, time.time(), self.tlm_seq), (self.tlm_dest, gl.TO_LAB_PORT))
            self.tlm_seq += 1
        except OSError as exc:
            print(f"swarm-app: telemetry to {self.tlm_dest}: {exc}", flush=True)


def main() -> int:
    faulthandler.enable()  # a crash inside the DDS library leaves a trace in the node's log
    return SwarmApp(Config.from_env()).run()


if __name__ == "__main__":
    sys.exit(main())
