#!/usr/bin/env bash
# Build dtn7-rs (the Cargo registry's crate `dtn7`: dtnd, dtnsend, dtnrecv, dtnquery, dtntrigger) into a
# cache OUTSIDE the repository, once per (crate version, rustc version, host triple).
#
#   images/dtn/build.sh            -> prints the folder holding the binaries (last line of stdout)
#   DTN7_VERSION=0.21.0            the crate version (default below)
#   SWARM_DTN7_CACHE=/path         the cache root (default ~/.cache/swarm-emu/dtn7)
#   DTN7_PATCH=/path               the patch to apply (default images/dtn/dtn7-<version>.patch); DTN7_PATCH=
#                                  (empty) builds the published crate unchanged, e.g. to show what the patch fixes
#
# The cache is content-addressed: <cache>/dtn7-<version>-<12 hex of sha256(rustc -vV + the patch)>/bin. A
# folder is complete only when its `.complete` stamp exists (written last, after the install moved into place),
# so an interrupted build never counts as done and a second run with nothing changed returns at once.
# images/dtn/dtn7-<version>.patch (its header says what and why) is applied to a copy of the registry's own
# .crate source; a patch that no longer applies is a one-line error naming it (exit 2), nothing is built.
# `cargo install --locked` uses the crate's own Cargo.lock: the dependency versions its authors tested.
# Nothing here is committed: binaries live in the cache, sources in Cargo's registry cache; the compiled
# dependencies stay in <cache>/.target-<version> so that a changed patch rebuilds only dtn7 itself.
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

PATCH="${DTN7_PATCH-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/dtn7-$VERSION.patch}"
if [ -n "$PATCH" ] && [ ! -f "$PATCH" ]; then
    echo "dtn7 build: DTN7_PATCH $PATCH: no such file" >&2
    exit 2
fi
if [ -n "$PATCH" ]; then
    key="$( { rustc -vV; cat "$PATCH"; } | sha256sum | cut -c1-12)"
else
    PATCH=""
    key="$(rustc -vV | sha256sum | cut -c1-12)"
fi
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
# One build of an entry at a time on this host (two checkouts' `make setup` at once): the second waits, then
# finds the entry complete. Without it the two installs moved into one entry and broke it (seen 2026-11-26).
exec 9>"$CACHE/.lock-$VERSION-$key"
if ! flock -n 9; then
    echo "dtn7 build: another build of $dest is running; waiting for it" >&2
    flock 9
fi
if [ -f "$dest/.complete" ]; then
    echo "$dest/bin"
    exit 0
fi
tmp="$(mktemp -d "$CACHE/.build-$VERSION-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
jobs="${CARGO_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
started=$(date +%s)
# The registry's .crate (downloaded by Cargo, by name and version, when this machine has not yet got it).
CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
# `|| true`: on a machine whose Cargo cache lacks the crate, ls fails and (pipefail + set -e) would end the script.
find_crate() { ls "$CARGO_HOME"/registry/cache/*/"dtn7-$VERSION.crate" 2>/dev/null | head -1 || true; }
crate="$(find_crate)"
if [ -z "$crate" ]; then
    mkdir -p "$tmp/fetch/src" && touch "$tmp/fetch/src/lib.rs"
    printf '[package]\nname = "fetch-dtn7"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\ndtn7 = "=%s"\n' \
        "$VERSION" > "$tmp/fetch/Cargo.toml"
    (cd "$tmp/fetch" && cargo fetch >&2)
    crate="$(find_crate)"
    [ -n "$crate" ] || { echo "dtn7 build: cargo fetched no dtn7-$VERSION.crate" >&2; exit 1; }
fi
mkdir -p "$tmp/src"
tar -xzf "$crate" -C "$tmp/src"
src="$tmp/src/dtn7-$VERSION"
if [ -n "$PATCH" ]; then
    if ! patch -p1 --dry-run --quiet -d "$src" < "$PATCH" >/dev/null 2>&1; then
        echo "dtn7 build: $PATCH no longer applies to dtn7 $VERSION (update the patch or DTN7_VERSION)" >&2
        exit 2
    fi
    patch -p1 --quiet -d "$src" < "$PATCH" >&2
fi
echo "dtn7 build: cargo install --locked dtn7 $VERSION${PATCH:+ + $(basename "$PATCH")} ($(rustc -V)), $jobs jobs; takes 10-25 min on 2 cores the first time" >&2
# Progress goes to stderr; the target folder in the cache keeps the build away from other projects' target
# folders (only the binaries are installed into the cache entry).
cargo install --locked --path "$src" --root "$tmp/root" --target-dir "$CACHE/.target-$VERSION" -j "$jobs" >&2
for b in "${BINARIES[@]}"; do
    [ -x "$tmp/root/bin/$b" ] || { echo "dtn7 build: cargo install produced no $b" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest"
mv "$tmp/root/bin" "$dest/bin"
{
    echo "crate=dtn7 $VERSION"
    [ -z "$PATCH" ] || echo "patch=$(basename "$PATCH") $(sha256sum < "$PATCH" | cut -c1-12)"
    echo "rustc=$(rustc -V)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$(( $(date +%s) - started ))"
    (cd "$dest/bin" && sha256sum "${BINARIES[@]}")
} > "$dest/BUILD-INFO"
touch "$dest/.complete"
echo "dtn7 build: done in $(( $(date +%s) - started )) s -> $dest/bin" >&2
echo "$dest/bin"
