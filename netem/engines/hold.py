"""Where the userspace engine takes a node's packets (LinkdHold): its iptables chain and NFQUEUE number, and the
fixed paths of its process inside a node. Every engine's plan_node receives a hold (its `cut_frames` says whether
a cut also drops a link's non-IP frames), so it sits below the engines."""
from __future__ import annotations

from dataclasses import dataclass

from netem.spec.links import Impairment

# userspace engine (swarm-linkd): where its rules and process live, see LinkdHold and netem.engines.userspace
LINKD_CHAIN = "SWARM_EMU_LINKS"  # the framework's own chain in the node's mangle table (PREROUTING jumps to it)
LINKD_QUEUE = 0  # NFQUEUE number (queues are per network namespace: one engine per node)
LINKD_MAX_BYTES = 1 << 30  # data one node's engine may hold (rate x delay); beyond: a SpecError, nothing applied
LINKD_CONTROL = "/run/swarm-linkd.sock"  # the engine's control socket inside the node (its own /run)
LINKD_STATE = "/run/swarm-linkd.conf"  # its last configuration, read again if it restarts


@dataclass(frozen=True)
class LinkdHold:
    """Where a node's userspace engine takes the packets sent to the node: its iptables chain and NFQUEUE number.
    The default holds at the node's own ingress (mangle PREROUTING in the node; queues are per namespace, so 0).
    At a forwarding hop (the netns backend's switch namespace, mangle FORWARD) every node's engine shares one
    namespace, so each gets its own chain and queue there (`at_hop`)."""
    chain: str = LINKD_CHAIN
    queue: int = LINKD_QUEUE
    #: a cut (link down) also drops the link's non-IP frames (ARP, ...) at the node's ingress with nftables, which
    #: costs a process per change; False for plan-driven up/down at orbit rate: the engine drops the IP packets
    cut_frames: bool = True
    #: source MACs held with no conditions (pass-through: the rule and an empty `link <mac>` line exist, the engine
    #: passes their packets unchanged): links a timeline the engine runs will change (experiments.fault_schedule)
    passthrough: frozenset[str] = frozenset()
    #: the MACs of every other node of the swarm (empty: not known): with them, a condition most senders share is
    #: held once, as the engine's default (`link *`) behind one catch-all rule, with the others as exceptions
    senders: frozenset[str] = frozenset()
    #: the condition of every sender the plan does not list (None: they have none). An orbit plan's receivers hold
    #: `down` for the ~N pairs the plan never brings up as one default behind one catch-all rule, so their plan is
    #: made from the links that exist, not from all N(N-1) pairs (netem.engines.userspace.split_ingress). Only the
    #: userspace engine takes it (Engine.holds_others); with it the senders listed without a condition pass through
    #: the engine (a bare line), so a timeline can change them, and a cut drops IP packets only (no nft drop).
    others: Impairment | None = None

    @classmethod
    def at_hop(cls, node_index: int, cut_frames: bool = True) -> "LinkdHold":
        return cls(chain=f"{LINKD_CHAIN}_{node_index}", queue=node_index + 1, cut_frames=cut_frames)


AT_INGRESS = LinkdHold()  # the default: in the node, at its own ingress
