#!/usr/bin/env bash
# Build swarm-hardy (flightsw/hardy-node: our node program on Hardy's crates from the Cargo registry) into a
# cache OUTSIDE the repository, like swarm-linkd; cargo returns at once when nothing changed.
#
#   images/hardy/build.sh          -> prints the folder holding swarm-hardy (<cache>/bin; last line of stdout)
#   images/hardy/build.sh clippy   -> clippy -D warnings on the same sources and tests (make lint-rust), target <cache>-clippy
#   images/hardy/build.sh test     -> the node's unit tests (cargo test, the same patched crates)
#   SWARM_HARDY_CACHE=/path        the cargo target folder (default ~/.cache/swarm-emu/hardy-target)
#
# hardy-tcpclv4 and hardy-bpa are built patched: images/hardy/<crate>-<version>.patch (each header says what and why)
# is applied to a copy of the registry's own .crate source in <cache>/patched/, and the node is built against it through a
# `[patch.crates-io]` given on cargo's command line, from a copy of flightsw/hardy-node in <cache>/node (cargo
# records the patched source in that copy's Cargo.lock, never in the checkout's). Every version stays as
# flightsw/hardy-node/Cargo.lock pins it (`--offline` after `cargo fetch --locked`; checked after the build). A
# patch that no longer applies is a one-line error naming it (exit 2), nothing is built. Nothing is committed.
set -euo pipefail

mode="${1:-build}"
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
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_src="$(cd "$here/../.." && pwd)/flightsw/hardy-node"
PATCHED_CRATES=(hardy-tcpclv4-0.4.0 hardy-bpa-0.2.0)  # each with images/hardy/<crate>.patch
# One build at a time on this host (two checkouts' `make setup` at once): cargo locks its target folder, but
# the patched source, the node copy and the copy into bin/ below are ours (two copies through one temporary
# name broke a CI setup, 2026-11-26).
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9

# The registry's .crate files, by the versions the lock pins (downloaded when this machine has not got them).
cargo fetch -q --locked --manifest-path "$node_src/Cargo.toml" >&2
CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
use_patch=()
for CRATE in "${PATCHED_CRATES[@]}"; do
    PATCH="$here/$CRATE.patch"
    crate="$(ls "$CARGO_HOME"/registry/cache/*/"$CRATE.crate" 2>/dev/null | head -1 || true)"
    [ -n "$crate" ] || { echo "hardy build: cargo fetched no $CRATE.crate" >&2; exit 1; }
    key="$(sha256sum < "$PATCH" | cut -c1-12)"
    patched="$CACHE/patched/$CRATE-$key"
    if [ ! -f "$patched/.complete" ]; then
        rm -rf "$patched" "$patched.tmp"
        mkdir -p "$patched.tmp"
        tar -xzf "$crate" -C "$patched.tmp"
        if ! patch -p1 --dry-run --quiet -d "$patched.tmp/$CRATE" < "$PATCH" >/dev/null 2>&1; then
            rm -rf "$patched.tmp"
            echo "hardy build: $PATCH no longer applies to $CRATE (update the patch or the crate version)" >&2
            exit 2
        fi
        patch -p1 --quiet -d "$patched.tmp/$CRATE" < "$PATCH" >&2
        mv "$patched.tmp/$CRATE" "$patched"
        rm -rf "$patched.tmp"
        touch "$patched/.complete"
    fi
    use_patch+=(--config "patch.crates-io.${CRATE%-*}.path=\"$patched\"")
done

# The node's sources in the cache: a file is copied (and so dated now) only when its content differs, so cargo
# rebuilds exactly what changed. Copying with the checkout's times (cp -p) let a change older than the cache's
# last build, from another checkout, be taken as built (seen: an edit in a worktree, then the cache built from a
# newer clone of main; swarm-hardy stayed the clone's).
node="$CACHE/node"
mkdir -p "$node/src"
(cd "$node_src" && find Cargo.toml Cargo.lock src -type f) | while read -r f; do
    if ! cmp -s "$node_src/$f" "$node/$f"; then
        mkdir -p "$(dirname "$node/$f")"
        cp "$node_src/$f" "$node/$f"
    fi
done
(cd "$node" && find src -type f) | while read -r f; do  # a file the checkout no longer has
    [ -e "$node_src/$f" ] || rm -f "$node/$f"
done
if [ "$mode" = clippy ]; then
    CARGO_TARGET_DIR="$CACHE-clippy" nice -n 10 cargo clippy -q --release --offline "${use_patch[@]}" \
        --all-targets --manifest-path "$node/Cargo.toml" -- -D warnings
    exit 0
fi
if [ "$mode" = test ]; then  # the node's own unit tests, against the patched crates, in the build's target folder
    CARGO_TARGET_DIR="$CACHE" nice -n 10 cargo test -q --release --offline "${use_patch[@]}" \
        --manifest-path "$node/Cargo.toml"
    exit 0
fi
CARGO_TARGET_DIR="$CACHE" nice -n 10 cargo build -q --release --offline "${use_patch[@]}" \
    --manifest-path "$node/Cargo.toml" >&2
# the same versions as the checkout's lock, and the patched crate in use (no registry source for it)
patched_from_registry() {  # a crate we patch that cargo took from the registry after all
    local c
    for c in "${PATCHED_CRATES[@]}"; do
        grep -A2 "^name = \"${c%-*}\"" "$node/Cargo.lock" | grep -q '^source' && return 0
    done
    return 1
}
if ! diff -q <(grep -E '^(name|version) = ' "$node_src/Cargo.lock") <(grep -E '^(name|version) = ' "$node/Cargo.lock") >/dev/null \
   || patched_from_registry; then
    echo "hardy build: the patched build resolved other crates than flightsw/hardy-node/Cargo.lock pins" >&2
    exit 1
fi
# the program alone in bin/ (what the image copies and the netns backend runs), replaced only when it changed
mkdir -p "$CACHE/bin"
if ! cmp -s "$CACHE/release/swarm-hardy" "$CACHE/bin/swarm-hardy"; then
    cp -p "$CACHE/release/swarm-hardy" "$CACHE/bin/.swarm-hardy.$$.tmp" && mv -f "$CACHE/bin/.swarm-hardy.$$.tmp" "$CACHE/bin/swarm-hardy"
fi
touch "$CACHE/release/.complete"  # built: the framework says "building ... once" only before the first build
echo "$CACHE/bin"
