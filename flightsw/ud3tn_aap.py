#!/usr/bin/env python3
"""µD3TN in a node, over its Application Agent Protocol (AAP 1.0) with the user's own ud3tn-utils (ud3tn_utils.aap,
ud3tn_utils.config; the image built from their install tree puts its Python packages on the path).

    ud3tn_aap.py start --socket S --node-id EID --service in --rc node.ud3tnrc [--user user.ud3tnrc --source F]
                       --log dtnd.log --pid PID
        waits until the AAP socket answers with the node ID, sends each configuration message of the rc files to
        µD3TN's config agent (a `+N` contact time is N s from now), then keeps the applications' endpoint: every
        bundle delivered to it goes into inbox/ (one file each) and is counted in `delivered`. A message µD3TN
        refuses (a warning in its log) or a socket that never answers: one line "µD3TN start: ...", ud3tn is ended,
        exit 1. µD3TN drops bundles for an endpoint nobody holds, so the endpoint is held for the agent's life.
    ud3tn_aap.py ping --socket S                  the node ID µD3TN's AAP answers with
    ud3tn_aap.py send --socket S DST [SOURCE]     stdin as one bundle to DST: "<source EID> <bundle ID>"

The traffic program (dtn_traffic.py's ud3tn-aap client) uses send_bundle / take_bundle below.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

INBOX = "inbox"
DELIVERED = "delivered"
SENT = "sent"
CONTACT_TIME = re.compile(r"\{\+(\d+),\+(\d+),(\d+)\}")
DTN_EPOCH = 946_684_800  # 2000-01-01T00:00:00Z in Unix seconds


def aap(path: str):
    from ud3tn_utils.aap import AAPUnixClient  # the user's ud3tn-utils, in the node only
    client = AAPUnixClient(address=path)
    client.connect()
    return client


def config_eid(node_id: str) -> str:
    """µD3TN's config agent: dtn://<node>/config, or ipn:<n>.9000."""
    if node_id.startswith("ipn:"):
        return node_id.split(".")[0] + ".9000"
    return node_id.rstrip("/") + "/config"


def absolute(line: str, now: float) -> str:
    """A configuration message with its `+N` contact times made DTN times (s since 2000)."""
    base = int(now) - DTN_EPOCH
    return CONTACT_TIME.sub(lambda m: f"{{{base + int(m.group(1))},{base + int(m.group(2))},{m.group(3)}}}", line)


def source_id(node_id: str) -> str:
    """An agent ID to send from: a fresh one per client (µD3TN registers an ID once)."""
    tag = f"{os.getpid() % 100000:05d}{int(time.time() * 1000) % 10000:04d}"
    return ("2" + tag) if node_id.startswith("ipn:") else f"src-{tag}"


def send_bundle(client, dst: str, payload: bytes) -> str:
    """One bundle from a registered client; its bundle ID as µD3TN confirmed it."""
    from ud3tn_utils.aap import AAPMessageType
    answer = client.send_bundle(dst, payload)
    if answer is None or answer.msg_type != AAPMessageType.SENDCONFIRM:
        raise OSError(f"µD3TN did not confirm the bundle to {dst}")
    return str(answer.bundle_id)


def take_bundle(workdir: str) -> tuple[dict, bytes] | None:
    """The oldest bundle the endpoint keeper wrote into inbox/ (header, payload), removed; None when none."""
    box = os.path.join(workdir, INBOX)
    try:
        names = sorted(n for n in os.listdir(box) if n.endswith(".b"))
    except FileNotFoundError:
        return None
    for name in names:
        path = os.path.join(box, name)
        try:
            with open(path, "rb") as f:
                head, _, payload = f.read().partition(b"\n")
            os.unlink(path)
        except FileNotFoundError:  # another reader took it
            continue
        return json.loads(head), payload
    return None


def count(workdir: str, name: str, add: int = 1) -> int:
    path = os.path.join(workdir, name)
    try:
        with open(path) as f:
            n = int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        n = 0
    with open(path + ".tmp", "w") as f:
        f.write(f"{n + add}\n")
    os.replace(path + ".tmp", path)
    return n + add


def _warnings(log: str, offset: int) -> list[str]:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return [re.sub(r" \[[\w/.]+:\d+\]$", "", re.sub(r"^\[[^]]*\] \[\w+\] ", "", ln)).strip() for ln in text.splitlines()
            if "[WARNING]" in ln or "[ERROR]" in ln]


def _size(log: str) -> int:
    try:
        return os.path.getsize(log)
    except FileNotFoundError:
        return 0


def start(opts: dict) -> int:
    def fail(why: str) -> int:
        print(f"µD3TN start: {why}", flush=True)
        try:
            os.kill(int(opts["pid"]), signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            pass
        return 1

    deadline = time.time() + 30
    client = None
    while client is None:
        try:
            client = aap(opts["socket"])
        except OSError:
            if time.time() > deadline:
                return fail(f"AAP socket {opts['socket']} did not answer within 30 s")
            time.sleep(0.1)
    if client.node_eid != opts["node-id"]:
        return fail(f"ud3tn answers as {client.node_eid!r}, not {opts['node-id']!r}")
    client.register(source_id(opts["node-id"]))
    target = config_eid(opts["node-id"])
    messages = [(opts["rc"], n, ln) for n, ln in enumerate(open(opts["rc"]).read().splitlines(), start=1)
                if ln.strip() and not ln.startswith("#")]
    if opts.get("user"):
        for row in open(opts["user"]).read().splitlines():
            number, _, line = row.partition("\t")
            messages.append((opts.get("source", "dtn.config"), int(number), line))
    peers = []
    for source, n, line in messages:
        offset = _size(opts["log"])
        send_bundle(client, target, absolute(line, time.time()).encode())
        time.sleep(0.3)  # the config agent and the router take it in their own tasks
        said = [w for w in _warnings(opts["log"], offset) if "Config" in w or "Router" in w]
        if said:
            return fail(f"{source}: line {n}: {said[0]}")
        m = re.match(r"^1\(([^)]*)\)", line)
        if m:
            peers.append(m.group(1))
    client.disconnect()
    workdir = os.path.dirname(os.path.abspath(opts["rc"]))
    for name, text in (("peers", "".join(f"{p}\n" for p in peers)), ("node-id", opts["node-id"] + "\n")):
        with open(os.path.join(workdir, name), "w") as f:
            f.write(text)
    keeper = aap(opts["socket"])
    keeper.register(opts["service"])
    print(f"µD3TN started: {opts['node-id']}, {len(peers)} contacts configured, endpoint "
          f"{keeper.eid} held", flush=True)
    return keep(keeper, workdir)


def keep(client, workdir: str) -> int:
    """Every bundle delivered to the held endpoint into inbox/: '<JSON header>\\n<payload>' per file."""
    from ud3tn_utils.aap import AAPMessageType
    box = os.path.join(workdir, INBOX)
    os.makedirs(box, exist_ok=True)
    seq = 0
    while True:
        msg = client.receive()
        if msg is None:
            print("µD3TN: the AAP connection of the applications' endpoint closed", flush=True)
            return 1
        if msg.msg_type != AAPMessageType.RECVBUNDLE:
            continue
        seq += 1
        now = time.time()
        head = json.dumps({"src": msg.eid, "dst": client.eid, "t": now}).encode()
        name = os.path.join(box, f"{int(now * 1e6):017d}-{seq:08d}")
        with open(name + ".tmp", "wb") as f:
            f.write(head + b"\n" + bytes(msg.payload or b""))
        os.replace(name + ".tmp", name + ".b")
        count(workdir, DELIVERED)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    opts: dict = {}
    words = []
    i = 0
    while i < len(rest):
        if rest[i].startswith("--") and i + 1 < len(rest):
            opts[rest[i][2:]] = rest[i + 1]
            i += 2
        else:
            words.append(rest[i])
            i += 1
    if cmd == "start":
        return start(opts)
    if cmd == "ping":
        client = aap(opts["socket"])
        client.ping()
        print(client.node_eid)
        client.disconnect()
        return 0
    if cmd == "send" and words:
        client = aap(opts["socket"])
        client.register(words[1] if len(words) > 1 else source_id(client.node_eid))
        bid = send_bundle(client, words[0], sys.stdin.buffer.read())
        print(client.eid, bid)
        client.disconnect()
        count(os.path.dirname(os.path.abspath(opts["socket"])), SENT)
        return 0
    print(f"unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
