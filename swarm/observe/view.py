"""`swarm view`: a local web page that shows a running swarm live (topology, link states and conditions,
per-node ISL throughput, the event stream; while an orbit plan drives the links, a latitude/longitude map of
the nodes where the orbit puts them with the links the plan has up; each DTN agent's store).

Why Python's own http.server and a hand-written page (static/view.html: SVG + a little JavaScript) rather than
a web framework and a graph library: the page polls one JSON document twice a second and draws at most a few
hundred lines; stdlib serving means no new dependency, and every byte of the page ships in this package, so it
works offline (no CDN). The server is the only process that pays: it follows the swarm's event log
(swarm.observe.events) and an orbit run's tracks (swarm.observe.track), reading files; it asks the backend for
node states every 5 s, reads interface counters every second and, with DTN agents, their stores every 2 s, but
only while a page is open (one asked for the state in the last WATCHED_S): with nobody watching it starts no
process, so it does not load the host it measures. The map is the same SVG over a longitude/latitude grid
(equirectangular): no map tiles or coastline data to ship.

What it serves is read-only (other methods: 501) and meant for this machine: it binds 127.0.0.1 unless told,
answers only requests whose Host header names the address it listens on or localhost (a page of another site
whose name was rebound to 127.0.0.1 gets 403, its Host is that site's name), closes a connection that sends
nothing for IDLE_TIMEOUT_S and serves at most MAX_CONNECTIONS at once.
"""
from __future__ import annotations

import errno
import ipaddress
import json
import math
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

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
#: The swarm is polled only while someone watches: an open page asks for /api/state twice a second, so no such
#: request for this long means nobody does (the pollers wait, starting no process, until one comes).
WATCHED_S = 5.0
IDLE_TIMEOUT_S = 20.0  # a connection that sends nothing for this long is closed, its thread ends
MAX_CONNECTIONS = 32  # served at once; more are closed at accept (a page holds two)
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


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

    def __init__(self, swarm) -> None:
        self.swarm = swarm
        self.dir = swarm_dir(swarm.workdir, swarm.name)
        self.lock = threading.Lock()
        self.links: dict[tuple[str, str], dict] = {}  # directed, only links with a state or conditions
        self.events: list[dict] = []
        self.first_event = 0  # index of events[0] in the whole stream (the page asks `since`)
        self.node_states: dict[str, str] = {}
        self.rates: dict[str, dict] = {}  # node -> {tx_bps, rx_bps} on its ISL interface
        self.orbit: dict | None = None  # an orbit run's tracks and clock (swarm.observe.track), once published
        self.orbit_problem = ""  # why orbit.json is not shown (malformed), answered with every state
        self.dtn: dict[str, dict] = {}  # node -> its DTN agent's store: {bundles, forward_pending}
        self.link_rates: dict[tuple[str, str], float] = {}  # directed link -> bit/s into it (userspace engine)
        self.down = False
        self.stop = threading.Event()
        self.last_watched = -math.inf  # time.monotonic() of the last /api/state request
        self._wake = threading.Event()

    def watched(self) -> None:
        """A page asked for the state: the pollers run (again) for the next WATCHED_S."""
        self.last_watched = time.monotonic()
        self._wake.set()

    def _until_watched(self) -> bool:
        """Returns True at once while someone watches, else blocks until someone does; False once the view
        stops. The pollers call it before each round, so nobody watching means no process started."""
        while not self.stop.is_set():
            if time.monotonic() - self.last_watched < WATCHED_S:
                return True
            self._wake.clear()
            self._wake.wait(1.0)
        return False

    # ---------------------------------------------------------------------------------------- loops
    def start(self) -> None:
        loops = [self._follow, self._nodes, self._counters, self._orbit]
        if any(n.spec.dtn is not None for n in self.swarm.nodes):
            loops.append(self._dtn)
        links = self.swarm.links
        if links.engine.schedules:  # an engine of its own, which counts each link's packets
            loops.append(lambda: self._link_counters(links))
        for loop in loops:
            threading.Thread(target=loop, daemon=True).start()

    def _follow(self) -> None:
        """The event log into the page's state; an event it cannot apply is still shown, never ends the loop
        (follow() already skips lines that are no events)."""
        for ev in follow(self.dir, history=True, poll=0.1, alive=lambda: not self.stop.is_set()):
            with self.lock:
                try:
                    self._apply(ev)
                except (KeyError, TypeError, ValueError):
                    pass
                self.events.append(ev)
                if len(self.events) > MAX_EVENTS:
                    drop = len(self.events) - MAX_EVENTS
                    del self.events[:drop]
                    self.first_event += drop

    def _apply(self, ev: dict) -> None:
        """One event into the links and node states (under the lock)."""
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

    def _nodes(self) -> None:
        while self._until_watched():
            try:
                states = self.swarm.backend.node_states(self.swarm.name)
                with self.lock:
                    self.node_states = {n.name: states.get(n.name, "missing") for n in self.swarm.nodes}
            except Exception:  # noqa: BLE001 - the swarm going away while watched
                pass
            self.stop.wait(NODE_POLL_S)

    def _counters(self) -> None:
        last: dict[str, tuple[float, int, int]] = {}
        while self._until_watched():
            now = time.monotonic()
            try:
                counters = self.read_counters()
            except Exception:  # noqa: BLE001
                counters = {}
            rates = {}
            for node, (tx, rx) in counters.items():
                if node in last and now - last[node][0] < 3.0:  # not across a time nobody watched
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
                try:
                    doc, problem = (track.read(self.dir) if stamp is not None else None), ""
                except ValueError as exc:
                    doc, problem = None, str(exc)
                if doc is not None or stamp is None or problem:
                    seen = stamp
                    with self.lock:
                        self.orbit, self.orbit_problem = doc, problem
            self.stop.wait(1.0)

    def _dtn(self) -> None:
        """Each DTN agent's store (through its adapter, swarm.dtn.agents): bundles held and those waiting for a
        contact, every DTN_POLL_S."""
        agents = self.swarm.dtn
        while self._until_watched():
            found = {}
            for n in agents.nodes:
                try:
                    found[n.name] = store_counts(agents.store(n.name, timeout=1.0))
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
        while self._until_watched():
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
                    if pair in last and count >= last[pair][1] and now - last[pair][0] < 3 * LINK_POLL_S:
                        rates[pair] = (count - last[pair][1]) * 8 / max(1e-3, now - last[pair][0])
                    last[pair] = (now, count)
            with self.lock:
                self.link_rates = rates
            self.stop.wait(LINK_POLL_S)

    def read_counters(self) -> dict[str, tuple[int, int]]:
        """(tx bytes, rx bytes) of each node's ISL interface. netns: one `ip -s` in the swarm's switch, whose
        port towards each node (the backend's hop)  is the node's ISL veth seen from the other side (its rx
        is what the node sent); other backends: one per node, in the node's namespace."""
        runner, name = self.swarm.runner, self.swarm.name
        out: dict[str, tuple[int, int]] = {}
        hop = self.swarm.backend.hop()
        switch = hop.port(name, 0, "eth1") if hop else None
        if hop and switch and not self.swarm.backend.traits.containers:  # netns: the switch namespace holds every port
            from_switch = switch[0]
            res = runner.run([*from_switch, "ip", "-s", "-j", "link", "show"], check=False, timeout=10)
            ports = {p.get("ifname"): p.get("stats64", {}) for p in json.loads(res.stdout or "[]")}
            for n in self.swarm.nodes:
                port = hop.port(name, n.index, "eth1")
                st = ports.get(port[1]) if port else None
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
            orbit, where = self._orbit_now(now)
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

    def _orbit_now(self, now: float) -> tuple[dict | None, dict]:
        """(the orbit clock, node positions) for the page; a tracks file that cannot be shown is answered as
        {"error": ...} in this request's state, the rest of the state unharmed."""
        if self.orbit_problem:
            return {"error": self.orbit_problem}, {}
        if self.orbit is None:
            return None, {}
        try:
            t_plan = track.plan_time(self.orbit, now)
            where = track.positions(self.orbit, t_plan)
            return {"t_plan": round(t_plan, 3), "duration": self.orbit["duration"], "epoch": self.orbit.get("epoch"),
                    "speedup": self.orbit["speedup"], "release": self.orbit["release"]}, where
        except (KeyError, TypeError, ValueError) as exc:
            return {"error": f"{track.TRACK_FILE}: {exc}"}, {}

    def tracks(self) -> dict:
        """The ground tracks (the page draws them once per orbit run): {"release", "times", "nodes"}."""
        with self.lock:
            doc = self.orbit
        if doc is None:
            return {}
        return {"release": doc.get("release"), "times": doc.get("times"), "nodes": doc.get("nodes")}

    def events_since(self, since: int) -> dict:
        with self.lock:
            start = max(0, since - self.first_event)
            return {"events": self.events[start:], "next": self.first_event + len(self.events)}


def to_json(doc) -> bytes:
    """Valid JSON whatever a file put into `doc` (pure): NaN and infinities become null (json.dumps would
    write `NaN`, which no browser parses)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(doc), allow_nan=False).encode()


def host_allowlist(given: str, bound: str) -> tuple[frozenset[str], bool]:
    """(the Host names a request may carry, whether any IP literal passes) for a view started with `--host
    given` and listening on address `bound` (pure). Always localhost and the loopback addresses, the name given
    and the address bound; bound to every address (0.0.0.0, ::), also this machine's names and any IP literal.
    A DNS rebinding attack reaches the view with its own site's name in Host, never with an IP literal, so
    what is refused is a name this machine does not answer to."""
    names = set(LOCAL_NAMES) | {given.lower().rstrip("."), bound.lower()}
    wildcard = bound in ("0.0.0.0", "::", "")
    if wildcard:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(n for n in names if n), wildcard


def host_of(header: str) -> str:
    """The host part of a Host header, lower case, without port, brackets or a trailing dot (pure)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else ""
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def host_allowed(header: str | None, allowed: frozenset[str], any_ip: bool) -> bool:
    """Whether a request's Host header names this view (see host_allowlist); a missing one does not (pure)."""
    if not header:
        return False
    host = host_of(header)
    if host in allowed:
        return True
    if not any_ip:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def since_param(query: str) -> int | None:
    """`since` of /api/events: a whole number of at most 18 digits (0 when absent), None when it is not one (pure).
    Bounded so that a huge number is a 400, not int()'s limit on digits raising in the handler."""
    try:
        values = parse_qs(query, keep_blank_values=True, max_num_fields=20).get("since")
    except ValueError:
        return None
    if not values:
        return 0
    return int(values[-1]) if re.fullmatch(r"[0-9]{1,18}", values[-1]) else None


def is_loopback(address: str) -> bool:
    """Whether a bound address is this machine's own (pure): 127.0.0.0/8, ::1."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def make_handler(state: LiveState, allowed: frozenset[str] = LOCAL_NAMES, any_ip: bool = False):
    class Handler(BaseHTTPRequestHandler):
        timeout = IDLE_TIMEOUT_S  # per read and write on the connection: an idle client is let go

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
            if not host_allowed(self.headers.get("Host"), allowed, any_ip):
                return self._send(b"Host header does not name this view's address\n", "text/plain", 403)
            path, _, query = self.path.partition("?")
            if path in ASSETS:
                file, ctype = ASSETS[path]
                return self._send((STATIC / file).read_bytes(), ctype)
            if path == "/api/state":
                state.watched()
                return self._send(to_json(state.snapshot()), "application/json")
            if path == "/api/track":
                return self._send(to_json(state.tracks()), "application/json")
            if path == "/api/events":
                since = since_param(query)
                if since is None:
                    return self._send(b"since: expected a whole number of at most 18 digits\n", "text/plain", 400)
                return self._send(to_json(state.events_since(since)), "application/json")
            self._send(b"not found", "text/plain", 404)

    return Handler


class ViewServer(ThreadingHTTPServer):
    """One thread per connection, at most MAX_CONNECTIONS at once (more are closed at accept); a client gone
    or timed out mid-answer ends its thread quietly."""

    daemon_threads = True

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address) -> None:
        """A client that went away or timed out is no error worth a traceback on the terminal."""
        if not isinstance(sys.exc_info()[1], (OSError, TimeoutError)):
            super().handle_error(request, client_address)


def bind(host: str, port: int, state: LiveState) -> ThreadingHTTPServer:
    """The server, bound (SpecError, one line, when the port is taken or the address is not ours); it answers
    requests whose Host names `host`, the address bound or localhost (host_allowlist)."""
    try:
        server = ViewServer((host, port), make_handler(state))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise SpecError(f"--port {port}: in use on {host}; pick another (--port)") from None
        raise SpecError(f"--host {host!r} --port {port}: cannot listen ({exc.strerror})") from None
    allowed, any_ip = host_allowlist(host, str(server.server_address[0]))
    server.RequestHandlerClass = make_handler(state, allowed, any_ip)
    return server
