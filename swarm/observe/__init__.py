"""Looking inside a running swarm: packet capture (capture.py), the event log (events.py) and the live
web view (view.py with its page in static/). New modules with few call sites in the rest of the runtime, so
a swarm nobody watches pays nothing for them."""
