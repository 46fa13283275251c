"""`swarm view`: a local web page that shows a running swarm live (topology, link states and conditions,
per-node ISL throughput, the event stream; while an orbit plan drives the links, a latitude/longitude map of
the nodes where the orbit puts them with the links the plan has up; each DTN agent's store).

Why Python's own http.server and a hand-written page (static/view.html: SVG + a little JavaScript) rather than
a web framework and a graph library: the page polls one JSON document twice a second and draws at most a few
hundred lines; stdlib serving means no new dependency, and every byte of the page ships in this package, so it
works offline (no CDN) and nothing runs when nobody watches. The server is the only process that pays: it
follows the swarm's event log (swarm.observe.events), asks the backend for node states every 5 s, reads
interface counters every second, an orbit run's tracks (swarm.observe.track) when they appear and, with DTN
agents, their stores every 2 s, only while it runs. The map is the same SVG over a longitude/latitude grid
(equirectangular): no map tiles or coastline data to ship.
"""
from __future__ import annotations

import errno
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from swarm.errors import SpecError
from swarm.observe.capture import host_netns_prefix
from swarm.observe import track
from swarm.observe.events import follow
from swarm.runtime.backends import swarm_dir

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"/": ("view.html", "text/html; charset=utf-8"), "/view.js": ("view.js", "text/javascript; charset=utf-8"),
          "/view.css": ("view.css", "text/css; charset=utf-8")}
MAX_EVENTS = 2000  # kept in memory for the page; the log itself keeps everything
#: Node states from the backend (netns: `ip netns list` and one walk of /proc): a commanded change (fault node ...) is
#: in the event log at once; this poll only finds a node that died by itself, so it can be slow and cheap.
NODE_POLL_S = 5.0
DTN_POLL_S = 2.0  # the agents' stores: one small HTTP request per DTN node
LINK_POLL_S = 2.0  # the userspace engines' per-link counters: one control-socket request per node


def store_counts(entries: list) -> dict:
    """Bundles an agent holds (not deleted) and those waiting to be forwarded, from its /status/store answer:
    one string per bundle ending in its constraints, e.g. "dtn://sat01/in-... {ForwardPending}" (pure)."""
    held = pending = 0
    for entry in entries:
        text = str(entry)
        constraints = text[text.find("{") + 1:text.rfind("}")] if "{" in text else ""
        held += "Deleted" not in constraints
        pending += "ForwardPending" in constraints
    return {"bundles": held, "forward_pending": pending}


class LiveState:
    """What the page shows, kept up to date by three small loops while the view runs."""

    def __init__(self, swarm):
        self.swarm = swarm
        self.dir = swarm_dir(swarm.workdir, swarm.name)
        self.lock = threading.Lock()
        self.links: dict[tuple[str, str], dict] = {}  # directed, only links with a state or conditions
        self.events: list[dict] = []
        self.first_event = 0  # index of events[0] in the whole stream (the page asks `since`)
        self.node_states: dict[str, str] = {}
        self.rates: dict[str, dict] = {}  # node -> {tx_bps, rx_bps} on its ISL interface
        self.orbit: dict | None = None  # an orbit run's tracks and clock (swarm.observe.track), once published
        self.dtn: dict[str, dict] = {}  # node -> its DTN agent's store: {bundles, forward_pending}
        self.link_rates: dict[tuple[str, str], float] = {}  # directed link -> bit/s into it (userspace engine)
        self.down = False
        self.stop = threading.Event()

    # ---------------------------------------------------------------------------------------- loops
    def start(self) -> None:
        loops = [self._follow, self._nodes, self._counters, self._orbit]
        if any(n.spec.dtn is not None for n in self.swarm.nodes):
            loops.append(self._dtn)
        links = self.swarm.links
        if links.engine.name == "userspace":
            loops.append(lambda: self._link_counters(links))
        for loop in loops:
            threading.Thread(target=loop, daemon=True).start()

    def _follow(self) -> None:
        for ev in follow(self.dir, history=True, poll=0.1, alive=lambda: not self.stop.is_set()):
            with self.lock:
                if ev.get("type") == "link":
                    pair = (ev["src"], ev["dst"])
                    if ev["state"] == "up" and not ev.get("conditions"):
                        self.links.pop(pair, None)
                    else:
                        self.links[pair] = {"state": ev["state"], "conditions": ev.get("conditions", "")}
                elif ev.get("type") == "node" and ev.get("node"):
                    self.node_states[ev["node"]] = ev["state"]
                elif ev.get("type") == "swarm" and ev.get("state") == "down":
                    self.down = True
                self.events.append(ev)
                if len(self.events) > MAX_EVENTS:
                    drop = len(self.events) - MAX_EVENTS
                    del self.events[:drop]
                    self.first_event += drop

    def _nodes(self) -> None:
        while not self.stop.is_set():
            try:
                states = self.swarm.backend.node_states(self.swarm.name)
                with self.lock:
                    self.node_states = {n.name: states.get(n.name, "missing") for n in self.swarm.nodes}
            except Exception:  # noqa: BLE001 - the swarm going away while watched
                pass
            self.stop.wait(NODE_POLL_S)

    def _counters(self) -> None:
        last: dict[str, tuple[float, int, int]] = {}
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                counters = self.read_counters()
            except Exception:  # noqa: BLE001
                counters = {}
            rates = {}
            for node, (tx, rx) in counters.items():
                if node in last:
                    t0, tx0, rx0 = last[node]
                    dt = max(1e-3, now - t0)
                    rates[node] = {"tx_bps": max(0, tx - tx0) * 8 / dt, "rx_bps": max(0, rx - rx0) * 8 / dt}
                last[node] = (now, tx, rx)
            with self.lock:
                self.rates = rates
            self.stop.wait(1.0)

    def _orbit(self) -> None:
        """An orbit run's tracks and clock: published when its driver's clock starts, maybe after the view."""
        seen = None
        while not self.stop.is_set():
            path = self.dir / track.TRACK_FILE
            try:
                stamp = path.stat().st_mtime_ns
            except OSError:
                stamp = None
            if stamp != seen:
                doc = track.read(self.dir) if stamp is not None else None
                if doc is not None or stamp is None:
                    seen = stamp
                    with self.lock:
                        self.orbit = doc
            self.stop.wait(1.0)

    def _dtn(self) -> None:
        """Each DTN agent's store (GET /status/store on the node's ground address, like the traffic programs'
        sampler): bundles held and those waiting for a contact, every DTN_POLL_S."""
        agents = self.swarm.dtn
        while not self.stop.is_set():
            found = {}
            for n in agents.nodes:
                try:
                    found[n.name] = store_counts(json.loads(agents.http(n.name, "/status/store", timeout=1.0)))
                except Exception:  # noqa: BLE001 - an agent not (yet) answering: no figure
                    continue
            with self.lock:
                self.dtn = found
            self.stop.wait(DTN_POLL_S)

    def _link_counters(self, links) -> None:
        """Per directed link, the bytes the userspace engine took in for it (what the sender put on the link,
        before the link's loss or cut): each node's engine keeps a counter per destination MAC (`stats` over
        its control socket; netns: a socket in a host folder, no process), read every LINK_POLL_S."""
        by_mac = {n.isl_mac.lower(): n.name for n in self.swarm.nodes}
        last: dict[tuple[str, str], tuple[float, int]] = {}
        while not self.stop.is_set():
            rates = {}
            for n in self.swarm.nodes:
                try:
                    _head, per_link = links.linkd.stats(n.name)
                except Exception:  # noqa: BLE001 - an engine not (yet) answering: no figure
                    continue
                now = time.monotonic()
                for row in per_link:
                    dst = by_mac.get(row.get("mac", "").lower())
                    if dst is None or not row.get("bytes", "").isdigit():
                        continue
                    pair, count = (n.name, dst), int(row["bytes"])
                    if pair in last and count >= last[pair][1]:
                        rates[pair] = (count - last[pair][1]) * 8 / max(1e-3, now - last[pair][0])
                    last[pair] = (now, count)
            with self.lock:
                self.link_rates = rates
            self.stop.wait(LINK_POLL_S)

    def read_counters(self) -> dict[str, tuple[int, int]]:
        """(tx bytes, rx bytes) of each node's ISL interface. netns: one `ip -s` in the swarm's switch, whose
        port towards each node (backend.forwarding_hop) is the node's ISL veth seen from the other side (its rx
        is what the node sent); other backends: one per node, in the node's namespace."""
        runner, name = self.swarm.runner, self.swarm.name
        out: dict[str, tuple[int, int]] = {}
        hop = self.swarm.backend.forwarding_hop(name, 0, "eth1")
        if hop and not self.swarm.backend.traits.containers:  # netns: the switch namespace holds every port
            from_switch = hop[0]
            res = runner.run([*from_switch, "ip", "-s", "-j", "link", "show"], check=False, timeout=10)
            ports = {p.get("ifname"): p.get("stats64", {}) for p in json.loads(res.stdout or "[]")}
            for n in self.swarm.nodes:
                st = ports.get(self.swarm.backend.forwarding_hop(name, n.index, "eth1")[1])
                if st:
                    out[n.name] = (st["rx"]["bytes"], st["tx"]["bytes"])
            return out
        for n in self.swarm.nodes:
            prefix = host_netns_prefix(self.swarm, n.name)
            res = runner.run([*prefix, "ip", "-s", "-j", "-4", "addr", "show", "to", f"{n.isl_ip}/32"], check=False,
                             timeout=10)
            ifname = (json.loads(res.stdout or "[]") or [{}])[0].get("ifname")
            if not ifname:
                continue
            res = runner.run([*prefix, "ip", "-s", "-j", "link", "show", "dev", ifname], check=False, timeout=10)
            st = (json.loads(res.stdout or "[]") or [{}])[0].get("stats64")
            if st:
                out[n.name] = (st["tx"]["bytes"], st["rx"]["bytes"])
        return out

    # ---------------------------------------------------------------------------------------- answers
    def snapshot(self) -> dict:
        now = time.time()
        with self.lock:
            orbit, where = None, {}
            if self.orbit is not None:
                t_plan = track.plan_time(self.orbit, now)
                where = track.positions(self.orbit, t_plan)
                orbit = {"t_plan": round(t_plan, 3), "duration": self.orbit["duration"], "epoch": self.orbit["epoch"],
                         "speedup": self.orbit["speedup"], "release": self.orbit["release"]}
            return {
                "swarm": self.swarm.name, "backend": self.swarm.backend.traits.name, "t": now, "down": self.down,
                "nodes": [{"name": n.name, "isl_ip": n.isl_ip, "ground_ip": n.ground_ip, "role": n.spec.role,
                           "state": self.node_states.get(n.name, "?"), **self.rates.get(n.name, {}),
                           **where.get(n.name, {}), **({"dtn": self.dtn[n.name]} if n.name in self.dtn else {})}
                          for n in self.swarm.nodes],
                "links": [{"src": s, "dst": d, **v} for (s, d), v in sorted(self.links.items())],
                "link_rates": [{"src": s, "dst": d, "bps": round(v, 1)} for (s, d), v in sorted(self.link_rates.items())],
                "orbit": orbit,
                "next_event": self.first_event + len(self.events),
            }

    def tracks(self) -> dict:
        """The ground tracks (the page draws them once per orbit run): {"release", "times", "nodes"}."""
        with self.lock:
            doc = self.orbit
        if doc is None:
            return {}
        return {"release": doc["release"], "times": doc["times"], "nodes": doc["nodes"]}

    def events_since(self, since: int) -> dict:
        with self.lock:
            start = max(0, since - self.first_event)
            return {"events": self.events[start:], "next": self.first_event + len(self.events)}


def make_handler(state: LiveState):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:  # quiet: the terminal shows the URL, not every poll
            pass

        def _send(self, body: bytes, ctype: str, code: int = 200) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path, _, query = self.path.partition("?")
            if path in ASSETS:
                file, ctype = ASSETS[path]
                return self._send((STATIC / file).read_bytes(), ctype)
            if path == "/api/state":
                return self._send(json.dumps(state.snapshot()).encode(), "application/json")
            if path == "/api/track":
                return self._send(json.dumps(state.tracks()).encode(), "application/json")
            if path == "/api/events":
                m = re.search(r"(?:^|&)since=(\d+)", query)
                return self._send(json.dumps(state.events_since(int(m.group(1)) if m else 0)).encode(),
                                  "application/json")
            self._send(b"not found", "text/plain", 404)

    return Handler


def bind(host: str, port: int, state: LiveState) -> ThreadingHTTPServer:
    """The server, bound (SpecError, one line, when the port is taken or the address is not ours)."""
    try:
        server = ThreadingHTTPServer((host, port), make_handler(state))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise SpecError(f"--port {port}: in use on {host}; pick another (--port)") from None
        raise SpecError(f"--host {host!r} --port {port}: cannot listen ({exc.strerror})") from None
    server.daemon_threads = True
    return server
