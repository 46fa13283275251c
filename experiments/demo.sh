#!/usr/bin/env bash
# The main job: bring up a small swarm, show its status and all-pairs ISL reachability, tear it down;
# then a short full-mesh TCP + UDP sweep with its report. Uses Docker Compose where a Docker daemon
# answers, the embedded netns backend otherwise (BACKEND=netns|compose to choose).
set -euo pipefail
cd "$(dirname "$0")/.."
backend=(${BACKEND:+--backend "$BACKEND"})

trap 'swarm down demo >/dev/null 2>&1 || true' EXIT
swarm probe
swarm up experiments/demo-swarm.yaml "${backend[@]}"
swarm status demo
swarm ping demo
swarm down demo
trap - EXIT

echo "sweep: engine mux (one paced sender per node: holds its concurrent window on a loaded host)"
swarm sweep experiments/quick.yaml "${backend[@]}"
echo "open the newest results/*/report/report.html"
