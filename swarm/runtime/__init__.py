"""swarm/runtime"""
