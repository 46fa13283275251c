"""µD3TN (D3TN's ud3tn, the user's own build) as a DTN agent: swarm.dtn.agents.ud3tn.agent."""
from swarm.dtn.agents.ud3tn.agent import Ud3tn

__all__ = ["Ud3tn"]
