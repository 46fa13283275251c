"""An `ssh://` endpoint for the second Docker Engine (tests/hosts/second_engine.py): Debian's openssh-server
running inside the engine's network namespace, as sshd runs on a remote Docker host, so the multi-host backend
reaches that engine the way a user's `hosts: [{endpoint: ssh://root@lab2}]` does: the Docker CLI's own ssh
transport (`ssh ... docker system dial-stdio`), the system's OpenSSH client and server, nothing mocked.

Throw-away credentials, all in the engine's run dir (removed with it): a host key, a client key whose
authorized_keys entry may only run the dial-stdio of this engine's socket (`command=`, no pty, no forwarding: the
machine's own /var/run/docker.sock is the main Engine, so the forced command names the engine's socket), a
known_hosts with the host key (strict checking), and an ssh client config. The Docker CLI runs `ssh` from PATH
with no options of ours, so `env()` puts first in PATH a two-line `ssh` that adds `-F <that config>`, which is
what a user's ~/.ssh/config does for them. sshd runs in the engine's namespace: `SecondEngine.stop()` ends it
with every other process there. Nothing of the machine's own ssh set-up (/etc/ssh, ~/.ssh) is read or changed.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from swarm.errors import RuntimeFailure, SpecError

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without it (Debian's service creates it)


class SshEndpoint:
    """sshd in `engine`'s namespace on port 22 of its address; `start()` once, then `endpoint` and `env()`."""

    def __init__(self, engine):
        self.engine = engine
        self.dir = Path(engine.dir) / "ssh"
        self.endpoint = f"ssh://root@{engine.address}"

    def _answers(self) -> bool:
        try:
            with socket.create_connection((self.engine.address, 22), timeout=2) as s:
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def start(self, timeout: float = 30.0) -> "SshEndpoint":
        """Keys, configs and sshd (idempotent: an sshd already answering is kept)."""
        if not Path(SSHD).exists():
            raise SpecError(f"ssh endpoint: {SSHD} missing (Debian's openssh-server; `make test` installs it)")
        if self._answers() and (self.dir / "client_config").exists():
            return self
        d, run = self.dir, self.engine.runner.run
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        for key in ("host_ed25519", "id_ed25519"):
            for f in (d / key, d / f"{key}.pub"):
                f.unlink(missing_ok=True)
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"swarm-emu-test-{key}", "-f", str(d / key)],
                timeout=30)
        dial = f"exec env DOCKER_HOST=unix://{self.engine.socket} docker system dial-stdio"
        (d / "authorized_keys").write_text(f'command="{dial}",no-pty,no-port-forwarding,no-agent-forwarding,'
                                           f"no-X11-forwarding {(d / 'id_ed25519.pub').read_text().strip()}\n")
        (d / "known_hosts").write_text(f"{self.engine.address} {(d / 'host_ed25519.pub').read_text().strip()}\n")
        (d / "sshd_config").write_text("\n".join([
            f"ListenAddress {self.engine.address}:22", f"HostKey {d / 'host_ed25519'}", f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}", "AllowUsers root", "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            "StrictModes no", "X11Forwarding no", "AllowTcpForwarding no", "AllowAgentForwarding no", "PermitTTY no",
            "PrintMotd no", ""]))
        (d / "client_config").write_text("\n".join([
            f"Host {self.engine.address}", "  User root", f"  IdentityFile {d / 'id_ed25519'}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {d / 'known_hosts'}", "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes", "  BatchMode yes", "  ConnectTimeout 10", ""]))
        bindir = d / "bin"
        bindir.mkdir(exist_ok=True)
        wrapper = bindir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F "{d / "client_config"}" "$@"\n')
        wrapper.chmod(0o755)
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        run(["nsenter", f"--net=/var/run/netns/{self.engine.netns}", SSHD, "-f", str(d / "sshd_config"),
             "-E", str(d / "sshd.log")], timeout=30)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if time.monotonic() > deadline:
                log = (d / "sshd.log").read_text(errors="replace").strip().splitlines()[-3:] \
                    if (d / "sshd.log").exists() else []
                raise RuntimeFailure(f"ssh endpoint: sshd in {self.engine.netns} did not answer on "
                                     f"{self.engine.address}:22 within {timeout:.0f} s: {' | '.join(log)}")
            time.sleep(0.2)
        return self

    def env(self) -> dict[str, str]:
        """The environment under which `docker -H ssh://root@<address>` uses the throw-away key and known host."""
        return {"PATH": f"{self.dir / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
