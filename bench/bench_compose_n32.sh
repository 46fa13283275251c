#!/usr/bin/env bash
# Issue 27's "compose with the engine on the host: the n=32 figure": the n=32 mux pair of
# bench/bench-udp32-mux-{nodelay,linkd}.yaml on the compose backend (the userspace engine on the host is the
# default there without sch_netem), one right after the other; prints datagrams per flow and the ratio.
#   flock /tmp/swarm-emu-itest.lock bash bench/bench_compose_n32.sh [OUTDIR]
# Each run has its own subnets (Docker 20.10 can leave an empty network behind a `down`: see BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
sub() { sed -e "s/^name: bench-udp32-mux-$1/name: compose32-$1/" -e "s/backend: netns/backend: compose/" \
            -e "s/10\.208\.0\.0/10.$2.0.0/" -e "s/10\.209\.0\.0/10.$(($2 + 1)).0.0/" "bench/bench-udp32-mux-$1.yaml"; }
sub nodelay 182 > "$out/compose32-nodelay.yaml"
sub linkd 184 > "$out/compose32-linkd.yaml"
for k in nodelay linkd; do
  echo "== $k $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/swarm sweep "$out/compose32-$k.yaml" --no-report --results "$out/results" | tail -2
done
.venv/bin/python - "$out/results" <<'PY'
import glob, sys
import pandas as pd
runs = {k: pd.read_csv(sorted(glob.glob(f"{sys.argv[1]}/*-compose32-{k}/flows.csv"))[-1]) for k in ("nodelay", "linkd")}
for k, d in runs.items():
    print(f"{k}: {len(d)} flows, ok {d['ok'].all()}, datagrams/flow {d['packets'].mean():.1f}, "
          f"lost {d['lost_packets'].sum()}, receiver jitter median {d['jitter_ms'].median():.2f} ms")
print(f"ratio delayed / no delay: {runs['linkd']['packets'].mean() / runs['nodelay']['packets'].mean():.3f}")
PY
