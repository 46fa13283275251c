"""swarm/spec"""
