"""Hardy (the Cargo registry's hardy-bpa and hardy-tcpclv4, Apache-2.0) as a DTN agent: flightsw/hardy-node."""
from swarm.dtn.agents.hardy.agent import Hardy

__all__ = ["Hardy"]
