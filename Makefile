# The two commands a newcomer needs:  `make demo`  (the main job)  and  `make test`.
# Both set up what they need first (`make setup`: Debian packages if root, a Python venv in .venv).

VENV   ?= .venv
PY     := $(VENV)/bin/python
SWARM  := $(VENV)/bin/swarm
APT_PACKAGES := iperf3 iproute2 nftables fping iputils-ping traceroute procps util-linux \
                batmand batctl cyclonedds-tools debootstrap python3-venv \
                chromium  # headless, for the report's browser test (tests/integration/test_report_browser.py)

.PHONY: setup linkd linkd-test bench-linkd demo test unit integration image bench-up bench-sweep wipe clean help

help:
	@echo "make demo   - bring up a small swarm, status + ISL reachability, short TCP/UDP sweep, report, tear down"
	@echo "make test   - unit and integration tests (real Docker / netns / iperf3 where present)"
	@echo "make unit | integration | image | bench-up | bench-sweep | wipe | clean"

setup: $(VENV)/.installed linkd

# The userspace link engine (netem/linkd, Rust): built with cargo from the Cargo registry into a cache
# outside the repository; nothing binary is committed. Without cargo the `userspace` engine is unavailable
# (the capability probe says so) and kernel NetEm / nft are used as before.
LINKD_TARGET ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/swarm-emu/linkd-target
linkd:
	@if command -v cargo >/dev/null; then \
	  CARGO_TARGET_DIR="$(LINKD_TARGET)" cargo build -q --release --locked --manifest-path netem/linkd/Cargo.toml \
	  && echo "swarm-linkd: $(LINKD_TARGET)/release/swarm-linkd"; \
	else echo "cargo not found: the userspace link engine (swarm-linkd) is not built; install Rust (rustup) for it"; fi

# linkd-test: the engine's own unit tests (cargo)
linkd-test:
	CARGO_TARGET_DIR="$(LINKD_TARGET)" cargo test -q --release --locked --manifest-path netem/linkd/Cargo.toml


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

bench-linkd: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) experiments/bench/bench_linkd.py

bench-sweep: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) experiments/bench/bench_sweep.py

wipe: setup
	$(SWARM) wipe --yes

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
