"""swarm/cfs"""
