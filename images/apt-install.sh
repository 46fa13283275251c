#!/usr/bin/env bash
# Install the Debian packages named that are missing, as root, and start no service on this host by doing so.
#
#   images/apt-install.sh WHAT PKG...     WHAT says who needs them ("the framework", "the test suite")
#
# Why no service: a package such as openssh-server (the multi-host tests run their own sshd in a namespace) would
# otherwise start and enable the system's daemon (sshd on port 22 on a systemd host). So, only for the packages
# this installs: a policy-rc.d that refuses starts while apt runs (Debian's own mechanism, honoured by
# invoke-rc.d and deb-systemd-invoke; one already there is kept and left alone), and the .service/.socket
# units they enabled are disabled again (and stopped where systemd runs), and said. A package that was already installed is not
# touched. Not root or no apt-get: prints what to install and returns 0.
set -euo pipefail
what="$1"; shift
missing=()
for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ "${#missing[@]}" = 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "not root: make sure these Debian packages ($what) are installed: $*"
  exit 0
fi
echo "installing Debian packages ($what):" "${missing[@]}"
policy=/usr/sbin/policy-rc.d
ours=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# swarm-emu: no service starts while its packages install (removed after)\nexit 101\n' >"$policy"
  chmod 755 "$policy"; ours=1
fi
trap 'if [ -n "$ours" ]; then rm -f "$policy"; fi' EXIT
for try in $(seq 1 12); do
  apt-get update -q && break
  [ "$try" = 12 ] && exit 100
  echo "apt-get update failed (another apt holding its lock?): retry in 10 s"; sleep 10
done
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
if command -v systemctl >/dev/null; then
  now=""; [ -d /run/systemd/system ] && now="--now"   # systemd running: stop the unit too (else it only has links)
  for p in "${missing[@]}"; do
    for unit in $(dpkg -L "$p" 2>/dev/null | grep -E '^/(usr/)?lib/systemd/system/[^/@]+\.(service|socket)$' | xargs -r -n1 basename); do
      if systemctl is-enabled -q "$unit" 2>/dev/null; then
        systemctl disable -q $now "$unit" && echo "$p: its unit $unit was enabled by the package: disabled again (nothing here needs it)"
      fi
    done
  done
fi
