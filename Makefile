# The two commands a newcomer needs:  `make demo`  (the main job)  and  `make test`.
# Both set up what they need first (`make setup`: Debian packages if root, a Python venv in .venv).

VENV   ?= .venv
PY     := $(VENV)/bin/python
SWARM  := $(VENV)/bin/swarm
APT_PACKAGES := iperf3 iproute2 nftables fping iputils-ping traceroute procps util-linux \
                batmand batctl cyclonedds-tools debootstrap python3-venv \
                chromium  # headless, for the report's browser test (tests/integration/test_report_browser.py)

.PHONY: setup demo test unit integration image bench-up bench-sweep wipe clean help

help:
	@echo "make demo   - bring up a small swarm, status + ISL reachability, short TCP/UDP sweep, report, tear down"
	@echo "make test   - unit and integration tests (real Docker / netns / iperf3 where present)"
	@echo "make unit | integration | image | bench-up | bench-sweep | wipe | clean"

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then echo "installing Debian packages:" $$missing; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; fi; \
	else echo "not root: make sure these Debian packages are installed: $(APT_PACKAGES)"; fi
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash experiments/demo.sh

test: setup
	$(PY) -m pytest tests

unit: setup
	$(PY) -m pytest tests/unit

integration: setup
	$(PY) -m pytest tests/integration

image: setup
	$(PY) -c "from swarm.image import ensure_image; from swarm.runner import Runner; from swarm.core import default_workdir; print(ensure_image(Runner(), default_workdir(), progress=print))"

bench-up: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) experiments/bench/bench_up.py

bench-sweep: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) experiments/bench/bench_sweep.py

wipe: setup
	$(SWARM) wipe --yes

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
