"""The kernel engines' driver (netem, nft): a node's plan applied as its tc tree (root handle 5eed: on its ISL
interface) and its nft table `netdev swarm_emu`, each rebuilt only where its plan changed (netem.state.parts_to_apply).

With open shells (open_shells) a node's change goes to its long-lived `tc -batch` and `nft -i` processes
(swarm.runtime.shell) instead of a process per change. A root qdisc the framework did not make is never replaced.
This is also the base of every driver: the userspace engine's driver adds its processes on top of the kernel part
(the nft drop of a cut link's frames).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from flightsw import protocol as proto
from netem.engines.base import Engine, KernelPlan
from netem.engines.hold import LinkdHold
from netem.state import LinkState, had_parts, parts_to_apply, signature
from netem.tc import TC_MAJOR, nft_clear_script
from swarm.errors import RuntimeFailure
from swarm.runtime.runner import Result
from swarm.runtime.shell import NFT, TC, Shells, one_line_nft

if TYPE_CHECKING:
    from netem.engines.drivers.linkd import Linkd
    from swarm.runtime.context import SwarmContext
    from swarm.spec.model import NodePlan

DEFAULT_QDISCS = {"noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo", "bfifo", "sfq", "cake"}
EXEC_TIMEOUT = 60


class KernelDriver:
    """Executes an engine's node plans on one running swarm. The interface every driver has: `hold` (where the
    engine takes a node's packets, for its plan), `apply` (one node's plan), `placement`, `notes`, `close`."""

    def __init__(self, engine: Engine, swarm: "SwarmContext", linkd: "Linkd"):
        self.engine = engine
        self.swarm = swarm
        self.shells: Shells | None = None  # open_shells(): tc and nft batches to long-lived processes
        self.not_answering: set[str] = set()  # nodes whose engine process did not answer (notes())

    # ------------------------------------------------------------------------------ the interface
    def hold(self, node: "NodePlan", iface: str, cut_frames: bool = True) -> LinkdHold:
        """Where the engine takes the node's packets (only the userspace engine holds them elsewhere)."""
        return LinkdHold(cut_frames=cut_frames)

    def apply(self, node: "NodePlan", iface: str, rec: dict, plan: KernelPlan, force: bool, clearing: bool) -> None:
        """Make the node's tc tree and nft table match `plan`, touching only the parts whose plan changed (all
        with `force` or `clearing`); `rec`, the node's record in the link state, is updated in place."""
        do_tc, do_nft = parts_to_apply(rec, plan, self.engine.owns_nft_table, force, clearing)
        # whether a tree of ours is in place, where the record knows (None: look)
        ours = None if (force or clearing or "tc" not in rec) else had_parts(rec)[0]
        if do_tc:
            self._apply_tc(node.name, iface, plan.tc, ours)
        rec["tc"] = signature(plan.tc)
        if do_nft:
            self._apply_nft(node.name, plan.nft)
        rec["nft"] = signature(plan.nft)

    def placement(self) -> str | None:
        """Where the engine's own processes run (None: it has none; the kernel does the work in each node)."""
        return None

    def notes(self, state: LinkState) -> list[str]:
        """What a user should know about the engine's state on the swarm (`impair --show`)."""
        return []

    def close(self) -> dict[str, int | float]:
        """End the long-lived processes (close_shells)."""
        return self.close_shells()

    # ------------------------------------------------------------------------- long-lived processes
    def open_shells(self) -> Shells:
        """From now on (until close_shells) the tc and nft changes of a node go to one long-lived `tc -batch`
        and one `nft -i` process in it (swarm.runtime.shell), each fed a node's whole change at once, instead of
        a process per change. A forced apply (a node's first, or after a failure) still looks at the node's
        root qdisc with a `tc qdisc show` process of its own: only then is what is there not known."""
        if self.shells is None:
            name, backend = self.swarm.name, self.swarm.backend
            self.shells = Shells(self.swarm.runner, lambda node, argv: backend.exec_prefix(name, node, interactive=True)
                                 + proto.labelled(argv, proto.label(name, node)))  # ps names the swarm
        return self.shells

    def close_shells(self) -> dict[str, int | float]:
        """End the long-lived processes; what they did (processes started, batches fed)."""
        shells, self.shells = self.shells, None
        if shells is None:
            return {}
        stats = shells.stats()
        shells.close()
        return stats

    def change_tc(self, node: str, changes: list[list[str]]) -> None:
        """Apply in-place tc changes (netem.incremental.tc_changes: `tc class/qdisc change` argvs) to a node's tree,
        so a changed delay or rate does not flush the packets queued in the link."""
        if changes and self.shells is not None:
            self.shells.run(node, TC, [" ".join(a[1:]) for a in changes])
        elif changes:
            self.run(node, ["tc", "-batch", "-"], input="\n".join(" ".join(a[1:]) for a in changes) + "\n")

    def run(self, node: str, argv: list[str], input: str | None = None, check: bool = True) -> Result:
        """Run `argv` in the node (the backend's exec prefix), through the one runner."""
        prefix = self.swarm.backend.exec_prefix(self.swarm.name, node, interactive=input is not None)
        return self.swarm.runner.run(prefix + argv, input=input, check=check, timeout=EXEC_TIMEOUT)

    # ------------------------------------------------------------------------------------ the parts
    def _apply_tc(self, node: str, iface: str, cmds: list[list[str]], ours: bool | None = None) -> None:
        """The node's tree rebuilt: ours (root handle 5eed:) deleted, the plan's added. `ours` (with open shells):
        the record says whether a tree of ours is there, so the lines go to the node's long-lived tc without
        looking first; None: look (a process), and refuse to replace a root qdisc swarm-emu did not make."""
        if ours is not None and self.shells is not None:
            lines = ([f"qdisc del dev {iface} root"] if ours else []) + [" ".join(argv[1:]) for argv in cmds]
            if lines:
                self.shells.run(node, TC, lines)
            return
        res = self.run(node, ["tc", "-j", "qdisc", "show", "dev", iface, "root"])
        roots = json.loads(res.stdout or "[]")
        root = roots[0] if roots else {}
        lines = []
        if root.get("handle") == f"{TC_MAJOR}:":
            lines.append(f"qdisc del dev {iface} root")
        elif cmds and root.get("kind") not in DEFAULT_QDISCS | {None}:
            raise RuntimeFailure(f"node {node!r}: {iface} has a root qdisc {root.get('kind')} {root.get('handle')} "
                                 "that swarm-emu did not make; not replacing it")
        lines += [" ".join(argv[1:]) for argv in cmds]
        if lines:
            self.run(node, ["tc", "-batch", "-"], input="\n".join(lines) + "\n")

    def _apply_nft(self, node: str, script: str | None) -> None:
        if script is None and not self.swarm.caps.nftables:
            return
        if self.shells is not None:  # one line: one transaction in `nft -i`, as the script is in `nft -f`
            self.shells.run(node, NFT, [one_line_nft(script or nft_clear_script())])
            return
        self.run(node, ["nft", "-f", "-"], input=script or nft_clear_script())
