"""Programs that run inside a node (standard library only): the agent, the traffic engines, the reference app.

A package so the host side and the tests import them by name (`flightsw.protocol`, `flightsw.agent`); inside a
node they run as scripts from /opt/swarm/flightsw/, where their siblings are on sys.path."""
