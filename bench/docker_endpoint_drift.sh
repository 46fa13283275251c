#!/bin/bash
# Docker 20.10's endpoint-count drift, with plain docker calls (no framework code): how often a network refuses
# removal ("has active endpoints", nothing attached) after its containers are stopped in parallel (MODE=parallel,
# what `swarm down` did before 2026-12-02) or after each endpoint is released in a call of its own
# (MODE=serialdisc, what the compose backend's down does now). Two background loops start and stop 8 containers
# at a time on networks of their own meanwhile: the drift showed with other containers coming and going (none in
# 5 rounds of 60 containers without them).
#   usage: MODE=parallel|serialdisc bench/docker_endpoint_drift.sh IMAGE [NODES] [ROUNDS] [TAG]
# Everything it makes carries the label drifttest=1 and its own subnets (10.233-10.236.x); a drifted network
# stays until the Docker daemon restarts (its log then says "Fixing inconsistent endpoint_cnt").
IMG=$1; N=${2:-12}; ROUNDS=${3:-10}; TAG=${4:-x}
bg() { # another workload on its own network
  docker network create --label drifttest=1 --subnet 10.23$1.${BGOCT:-0}.0/24 drift-bg$1-$TAG >/dev/null
  while [ ! -e /tmp/drift.stop ]; do
    ids=$(seq 1 8 | xargs -P 8 -I{} docker run -d --label drifttest=1 --network drift-bg$1-$TAG $IMG sleep 600)
    docker stop -t 1 $ids >/dev/null; docker rm -f $ids >/dev/null
  done
  docker network rm drift-bg$1-$TAG >/dev/null || echo "bg net refused"
}
rm -f /tmp/drift.stop; bg 5 & B1=$!; bg 6 & B2=$!
refused=0
for round in $(seq 1 $ROUNDS); do
  a=drift-a$round-$TAG; b=drift-b$round-$TAG
  docker network create --label drifttest=1 --subnet 10.233.$round.0/24 $a >/dev/null
  docker network create --label drifttest=1 --subnet 10.234.$round.0/24 $b >/dev/null
  seq 1 $N | xargs -P 8 -I{} docker create --label drifttest=1 --label drift=main --name drift-{} --network $a $IMG sleep 600 >/dev/null
  seq 1 $N | xargs -P 8 -I{} docker network connect $b drift-{}
  seq 1 $N | xargs -P 8 -I{} docker start drift-{} >/dev/null
  ids=$(docker ps -aq --filter label=drift=main)
  if [ "$MODE" = serialdisc ]; then for i in $ids; do for net in $a $b; do docker network disconnect -f $net $i; done; done; fi
  docker stop -t 1 $ids >/dev/null; docker rm -f -v $ids >/dev/null
  for net in $a $b; do
    docker network rm $net >/dev/null 2>&1 || { refused=$((refused+1)); echo "round $round: $net refused"; }
  done
done
touch /tmp/drift.stop; wait $B1 $B2; echo "MODE=$MODE rounds=$ROUNDS refused=$refused"
