"""DTN agents behind one interface (swarm.dtn.agents.base.Agent), looked up in an explicit registry.

`dtn.agent` names an entry; the spec checks the name and that the agent carries the piece's `dtn.cla` here (one
line naming the field and value). Nothing outside this package compares an agent's name: what differs is asked
of the adapter (tests/unit/test_layering.py holds the rule).
"""
from __future__ import annotations

from typing import Optional

from swarm.dtn.agents.base import Agent, AgentFailed, AgentPlan, Counters, Install, LinkView, NodeShell, Peer
from swarm.dtn.agents.dtn7 import Dtn7
from swarm.dtn.agents.hardy import Hardy
from swarm.dtn.agents.hdtn import Hdtn
from swarm.dtn.agents.ion import Ion
from swarm.dtn.agents.ud3tn import Ud3tn
from swarm.spec.dtn import CLAS, DtnSpec

REGISTRY: dict[str, Agent] = {a.name: a for a in (Dtn7(), Hardy(), Ion(), Ud3tn(), Hdtn())}


def get_agent(name: str) -> Agent:
    """The adapter called `name`; ValueError naming the field and value for an unknown one."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"dtn.agent {name!r}: unknown agent (known: {', '.join(REGISTRY)})") from None


def carriers(cla: str) -> list[str]:
    """The agents that carry `cla` (a CLA says which agents carry it)."""
    return [name for name, agent in REGISTRY.items() if cla in agent.clas]


def check_agent(piece: Optional[DtnSpec]) -> None:
    """A known agent that carries the piece's CLA; ValueError with one line otherwise."""
    if piece is None:
        return
    agent = get_agent(piece.agent)
    check_user_files(piece, agent)
    if piece.cla not in agent.clas:
        raise ValueError(f"dtn.cla {piece.cla!r}: agent {piece.agent!r} does not carry it (it carries "
                         f"{', '.join(agent.clas)}; {piece.cla} is carried by {', '.join(carriers(piece.cla)) or 'none'})")


def check_user_files(piece: DtnSpec, agent: Agent) -> None:
    """`dtn.install` and `dtn.config` only for an agent the user builds (the framework builds the others)."""
    if agent.install.user_tree:
        return
    for key in ("install", "config"):
        if getattr(piece, key) is not None:
            users = [n for n, a in REGISTRY.items() if a.install.user_tree]
            raise ValueError(f"dtn.{key} {getattr(piece, key)!r}: agent {piece.agent!r} is built by the framework "
                             f"({agent.install.script}); {key} is for agents you build ({', '.join(users)})")


def agent_of(piece: DtnSpec) -> Agent:
    return get_agent(piece.agent)


__all__ = ["Agent", "AgentFailed", "AgentPlan", "CLAS", "Counters", "Install", "LinkView", "NodeShell", "Peer", "REGISTRY",
           "agent_of", "carriers", "check_agent", "get_agent"]
