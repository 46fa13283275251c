"""dtn7-rs as one DTN agent adapter (agent.py: the adapter; plan.py: dtnd's command, pure)."""
from swarm.dtn.agents.dtn7.agent import Dtn7

__all__ = ["Dtn7"]
