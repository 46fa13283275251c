"""ION (nasa-jpl/ION-DTN, the user's own build) as a DTN agent: swarm.dtn.agents.ion.agent."""
from swarm.dtn.agents.ion.agent import Ion

__all__ = ["Ion"]
