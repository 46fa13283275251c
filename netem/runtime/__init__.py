"""The link runtime: the controller that applies link conditions to running nodes (links), the userspace
engine swarm-linkd's driver (linkd) and the live orbit driver (orbits). Runtime layer: it runs commands."""
