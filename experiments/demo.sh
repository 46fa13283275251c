#!/usr/bin/env bash
# The main job: bring up a small swarm, show its status and all-pairs ISL reachability, delay one link by
# 100 ms each way and show the ~200 ms round trip, tear it down; then a short full-mesh TCP + UDP sweep with
# its report. On a kernel without NetEm the delay is applied by the userspace link engine (swarm-linkd), which
# on compose runs on the host beside the swarm's bridge. Uses Docker Compose where a Docker daemon
# answers, the embedded netns backend otherwise (BACKEND=netns|compose to choose).
set -euo pipefail
cd "$(dirname "$0")/.."
backend=(${BACKEND:+--backend "$BACKEND"})

trap 'swarm down demo >/dev/null 2>&1 || true' EXIT
swarm probe
swarm up experiments/demo-swarm.yaml "${backend[@]}"
swarm status demo
swarm ping demo
echo "link delay: 100 ms each way between sat01 and sat02 (so ~200 ms round trip; sat01 -> sat03 stays direct)"
if swarm impair demo --between sat01 sat02 --delay 100ms; then
  swarm impair demo --show
  swarm exec demo sat01 ping -n -c 3 -i 0.3 10.60.0.3   # sat02's ISL address (experiments/demo-swarm.yaml)
  swarm exec demo sat01 ping -n -c 2 -i 0.3 10.60.0.4   # sat03: not delayed
else
  echo "no engine can delay a link on this host (see \`swarm probe\`); going on without"
fi
swarm down demo
trap - EXIT

echo "sweep: engine mux (one paced sender per node: holds its concurrent window on a loaded host)"
swarm sweep experiments/quick.yaml "${backend[@]}"
echo "open the newest results/*/report/report.html"
