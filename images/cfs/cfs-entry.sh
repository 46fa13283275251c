#!/bin/sh
# Entry of a cFS node: CI_LAB listens on UDP 1234 + CPU ID - 1, so with distinct CPU IDs only CPU 1 uses
# 1234. Redirect UDP 1234 of this node to that port (nftables, this container's own namespace), so a
# ground tool reaches every node's CI_LAB on 1234 at the node's address; then become core-cpu1.
set -eu
port="${SWARM_CFS_CI_PORT:-1234}"
if [ "$port" != 1234 ]; then
    nft -f - <<RULES
table ip swarm_cfs {
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        udp dport 1234 redirect to :$port
    }
}
RULES
fi
exec "$@"
