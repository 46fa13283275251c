"""The `orbits` experiment type: a swarm whose links follow an orbit plan live (`swarm run`)."""
