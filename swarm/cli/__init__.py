"""swarm/cli"""
