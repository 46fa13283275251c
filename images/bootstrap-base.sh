#!/usr/bin/env bash
# Make sure the base image of the node image exists locally.
#
#   bash images/bootstrap-base.sh [IMAGE]
#
# IMAGE defaults to $BASE_IMAGE, else debian:bookworm-slim. If the tag is already present, nothing is
# done. Otherwise `docker pull` is tried (a normal host with a registry ends here); if that fails (no
# registry reachable), the image is bootstrapped from Debian packages: debootstrap --variant=minbase
# of $SUITE from $DEBIAN_MIRROR into a temporary directory, then `docker import` under the same tag,
# labelled io.swarm-emu.bootstrapped=true. Needs root (or sudo) for debootstrap only.
#
# Environment:
#   BASE_IMAGE              tag to ensure (default debian:bookworm-slim)
#   SUITE                   Debian suite to bootstrap (default bookworm)
#   DEBIAN_MIRROR           (default http://deb.debian.org/debian)
#   DEBIAN_SECURITY_MIRROR  (default http://deb.debian.org/debian-security)
#   PULL_TIMEOUT            seconds allowed for `docker pull` (default 60)
set -euo pipefail

IMAGE="${1:-${BASE_IMAGE:-debian:bookworm-slim}}"
SUITE="${SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
PULL_TIMEOUT="${PULL_TIMEOUT:-60}"

say() { printf 'bootstrap-base: %s\n' "$*"; }
die() { printf 'bootstrap-base: error: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker not found on PATH"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "base image $IMAGE is present, nothing to do"
    exit 0
fi

say "base image $IMAGE not present, trying docker pull (timeout ${PULL_TIMEOUT}s)"
if timeout "$PULL_TIMEOUT" docker pull "$IMAGE" >/dev/null 2>&1; then
    say "pulled $IMAGE"
    exit 0
fi
say "pull failed (no registry?), bootstrapping $IMAGE from $DEBIAN_MIRROR ($SUITE, minbase)"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "bootstrapping needs root (debootstrap); run as root or install sudo"
    SUDO="sudo"
fi

if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
    command -v apt-get >/dev/null 2>&1 || die "debootstrap missing and no apt-get to install it"
    say "installing debootstrap with apt-get"
    # `make setup` may be running apt beside us: update does not wait for the lists lock, so retry it
    for try in 1 2 3 4 5 6 7 8 9 10 11 12; do
        $SUDO apt-get -o Acquire::Retries=3 update -qq && break
        [ "$try" = 12 ] && die "apt-get update failed 12 times"
        say "apt-get update failed (another apt holding its lock?): retry in 10 s"; sleep 10
    done
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends debootstrap >/dev/null
fi
DEBOOTSTRAP="$(command -v debootstrap || echo /usr/sbin/debootstrap)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/swarm-base.XXXXXX")"
ROOTFS="$WORK/rootfs"
cleanup() {
    # debootstrap mounts proc/sys (and sometimes dev) inside the target; an interrupted run can leave
    # them mounted, and rm -rf must never descend into those: unmount first, deepest first.
    local m
    if [ -n "${DEBOOTSTRAP_PID:-}" ]; then
        # debootstrap is a shell script that would finish its current step before acting on a
        # signal: stop its whole process group (its own session, see below).
        kill -TERM -- "-$DEBOOTSTRAP_PID" 2>/dev/null || kill -TERM "$DEBOOTSTRAP_PID" 2>/dev/null || true
        wait "$DEBOOTSTRAP_PID" 2>/dev/null || true
    fi
    if [ -r /proc/mounts ]; then
        awk -v d="$WORK" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
            $SUDO umount -l "$m" 2>/dev/null || true
        done || true
    fi
    $SUDO rm -rf --one-file-system "$WORK" || say "warning: could not remove $WORK"
}
DEBOOTSTRAP_PID=""
trap cleanup EXIT
trap "exit 130" INT TERM

say "running debootstrap into $ROOTFS (about a minute)"
start=$(date +%s)
# In its own session, in the background + wait: INT/TERM then interrupt the script at once (bash runs
# traps only between foreground commands) and cleanup stops debootstrap before removing its target.
$SUDO setsid "$DEBOOTSTRAP" --variant=minbase "$SUITE" "$ROOTFS" "$DEBIAN_MIRROR" >"$WORK/debootstrap.log" 2>&1 &
DEBOOTSTRAP_PID=$!
if ! wait "$DEBOOTSTRAP_PID"; then
    DEBOOTSTRAP_PID=""
    tail -n 20 "$WORK/debootstrap.log" >&2 || true
    die "debootstrap failed (last lines above)"
fi
DEBOOTSTRAP_PID=""
say "debootstrap finished in $(( $(date +%s) - start ))s"

say "writing apt sources.list"
{
    echo "deb $DEBIAN_MIRROR $SUITE main"
    echo "deb $DEBIAN_MIRROR $SUITE-updates main"
    echo "deb $DEBIAN_SECURITY_MIRROR $SUITE-security main"
} | $SUDO tee "$ROOTFS/etc/apt/sources.list" >/dev/null

say "cleaning apt caches and logs"
$SUDO rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
    "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/archives/partial/* \
    "$ROOTFS"/var/log/apt/* "$ROOTFS"/var/log/dpkg.log "$ROOTFS"/var/log/bootstrap.log
# Same as the official image: containers keep no resolver/hostname of the build host.
$SUDO rm -f "$ROOTFS/etc/hostname"
$SUDO sh -c ": > '$ROOTFS/etc/resolv.conf'"

say "importing rootfs as $IMAGE"
$SUDO tar -C "$ROOTFS" --numeric-owner -c . | docker import \
    --change 'CMD ["bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'LABEL io.swarm-emu.bootstrapped=true' \
    --message "debootstrap --variant=minbase $SUITE $DEBIAN_MIRROR" \
    - "$IMAGE" >/dev/null
say "created $IMAGE ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
