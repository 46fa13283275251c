"""HDTN (NASA's High-rate DTN, the user's own build) as a DTN agent: swarm.dtn.agents.hdtn.agent."""
from swarm.dtn.agents.hdtn.agent import Hdtn

__all__ = ["Hdtn"]
