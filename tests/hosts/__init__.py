"""Test hosts: real extra Docker Engines on this machine for the multi-host (`swarm`) backend."""
