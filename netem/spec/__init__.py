"""The link and orbit sections of a swarm spec (`links:`, `orbits:`): pydantic models and their one-line errors.
Spec layer: imports only swarm.errors, swarm.units and swarm.spec.validation, and loads no numpy."""
