#!/usr/bin/env bash
# Build dtn7-rs (the Cargo registry's crate `dtn7`: dtnd, dtnsend, dtnrecv, dtnquery, dtntrigger) into a
# cache OUTSIDE the repository, once per (crate version, rustc version, host triple).
#
#   images/dtn/build.sh            -> prints the folder holding the binaries (last line of stdout)
#   DTN7_VERSION=0.21.0            the crate version (default below)
#   SWARM_DTN7_CACHE=/path         the cache root (default ~/.cache/swarm-emu/dtn7)
#
# The cache is content-addressed: <cache>/dtn7-<version>-<12 hex of sha256(rustc -vV)>/bin. A folder is
# complete only when its `.complete` stamp exists (written last, after the install moved into place), so an
# interrupted build never counts as done and a second run with nothing changed returns at once.
# `cargo install --locked` uses the crate's own Cargo.lock: the dependency versions its authors tested.
# Nothing here is committed: binaries live in the cache, sources in Cargo's registry cache.
set -euo pipefail

VERSION="${DTN7_VERSION:-0.21.0}"
CACHE="${SWARM_DTN7_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/swarm-emu/dtn7}"
BINARIES=(dtnd dtnsend dtnrecv dtnquery dtntrigger)

if ! command -v cargo >/dev/null 2>&1; then
    for dir in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
        [ -x "$dir/cargo" ] && PATH="$dir:$PATH" && break
    done
fi
if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    echo "dtn7 build: cargo/rustc not found; install a Rust toolchain (https://rustup.rs, Rust >= 1.74)" >&2
    exit 2
fi

key="$(rustc -vV | sha256sum | cut -c1-12)"
dest="$CACHE/dtn7-$VERSION-$key"
if [ -f "$dest/.complete" ]; then
    for b in "${BINARIES[@]}"; do
        [ -x "$dest/bin/$b" ] || { echo "dtn7 build: $dest/bin/$b missing though stamped; rebuilding" >&2; rm -f "$dest/.complete"; break; }
    done
fi
if [ -f "$dest/.complete" ]; then
    echo "$dest/bin"
    exit 0
fi

mkdir -p "$CACHE"
tmp="$(mktemp -d "$CACHE/.build-$VERSION-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
jobs="${CARGO_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
echo "dtn7 build: cargo install --locked dtn7 --version $VERSION ($(rustc -V)), $jobs jobs; takes 10-25 min on 2 cores" >&2
started=$(date +%s)
# Progress goes to stderr; --target-dir inside the temporary folder keeps the build away from other
# projects' target folders and is removed afterwards (only the binaries are kept).
cargo install --locked dtn7 --version "$VERSION" --root "$tmp/root" --target-dir "$tmp/target" -j "$jobs" >&2
for b in "${BINARIES[@]}"; do
    [ -x "$tmp/root/bin/$b" ] || { echo "dtn7 build: cargo install produced no $b" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest"
mv "$tmp/root/bin" "$dest/bin"
{
    echo "crate=dtn7 $VERSION"
    echo "rustc=$(rustc -V)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$(( $(date +%s) - started ))"
    (cd "$dest/bin" && sha256sum "${BINARIES[@]}")
} > "$dest/BUILD-INFO"
touch "$dest/.complete"
echo "dtn7 build: done in $(( $(date +%s) - started )) s -> $dest/bin" >&2
echo "$dest/bin"
