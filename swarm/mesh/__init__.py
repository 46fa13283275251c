"""swarm/mesh"""
