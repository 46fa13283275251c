#!/usr/bin/env bash
# Build swarm-hardy (flightsw/hardy-node: our node program on Hardy's crates from the Cargo registry) into a
# cache OUTSIDE the repository, like swarm-linkd; cargo returns at once when nothing changed.
#
#   images/hardy/build.sh          -> prints the folder holding swarm-hardy (<cache>/bin; last line of stdout)
#   SWARM_HARDY_CACHE=/path        the cargo target folder (default ~/.cache/swarm-emu/hardy-target)
#
# `--locked`: the dependency versions in flightsw/hardy-node/Cargo.lock, nothing newer. Nothing is committed.
set -euo pipefail

CACHE="${SWARM_HARDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/swarm-emu/hardy-target}"
if ! command -v cargo >/dev/null 2>&1; then
    for dir in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
        [ -x "$dir/cargo" ] && PATH="$dir:$PATH" && break
    done
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "hardy build: cargo not found; install a Rust toolchain (https://rustup.rs, Rust >= 1.95)" >&2
    exit 2
fi
manifest="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/flightsw/hardy-node/Cargo.toml"
# One build at a time on this host (two checkouts' `make setup` at once): cargo locks its target folder, but
# the copy into bin/ below is ours (two copies through one temporary name broke a CI setup, 2026-11-26).
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
CARGO_TARGET_DIR="$CACHE" nice -n 10 cargo build -q --release --locked --manifest-path "$manifest" >&2
# the program alone in bin/ (what the image copies and the netns backend runs), replaced only when it changed
mkdir -p "$CACHE/bin"
if ! cmp -s "$CACHE/release/swarm-hardy" "$CACHE/bin/swarm-hardy"; then
    cp -p "$CACHE/release/swarm-hardy" "$CACHE/bin/.swarm-hardy.$$.tmp" && mv -f "$CACHE/bin/.swarm-hardy.$$.tmp" "$CACHE/bin/swarm-hardy"
fi
touch "$CACHE/release/.complete"  # built: the framework says "building ... once" only before the first build
echo "$CACHE/bin"
