# The two commands a newcomer needs:  `make demo`  (the main job)  and  `make test`.
# Both set up what they need first (`make setup`: Debian packages if root, a Python venv in .venv).

VENV   ?= .venv
PY     := $(VENV)/bin/python
SWARM  := $(VENV)/bin/swarm
# qemu-system-x86 + kmod: the kernel lab (tests/kernel_lab/), which boots Debian's generic kernel to run kernel
# NetEm and batman-adv where the host's kernel lacks them. Nothing here needs qemu-utils; on a host with a newer
# qemu-utils from backports, installing Debian's qemu-system-x86 replaces it (harmless for this project).
APT_PACKAGES := iperf3 iproute2 nftables fping iputils-ping traceroute procps util-linux \
                batmand batctl cyclonedds-tools debootstrap python3-venv qemu-system-x86 kmod \
                chromium  # headless, for the browser tests (test_report_browser.py, test_observe_live.py)
# tshark (pulls wireshark-common: dumpcap, mergecap, editcap, capinfos): `swarm capture` runs dumpcap from the host in
# a node's namespace (pcapng, ring buffer, duration stop), mergecap joins a link's two ends; tshark reads them back
APT_PACKAGES += tshark
# python3-paramiko: Debian's docker-compose v1 (docker-py) imports it for any ssh:// host, though it then runs the
# system's ssh client
APT_PACKAGES += python3-paramiko
# Packages only the test suite needs, installed by `make test`/`make integration`, not by `make setup`/`make demo`.
# openssh-server: sshd inside the second Docker Engine's namespace, so the multi-host backend's ssh:// endpoint is
# tested for real (tests/hosts/ssh_host.py: its own config and throw-away keys). Like every package here it is
# installed by images/apt-install.sh, which starts no service: the system's sshd is neither started nor enabled.
TEST_APT_PACKAGES := openssh-server

.PHONY: setup test-packages rust linkd ltpcla trafficd hardy linkd-static linkd-test bench-linkd dtn7 kernel-lab demo test unit integration image bench-up bench-sweep bench-dtn bench-dtn-delay wipe clean help lint lint-py lint-rust

help:
	@echo "make demo   - bring up a small swarm, status + ISL reachability, short TCP/UDP sweep, report, tear down"
	@echo "make test   - unit and integration tests (real Docker / netns / iperf3 where present)"
	@echo "make unit | integration | image | bench-up | bench-sweep | wipe | clean"
	@echo "make lint   - ruff + mypy (pyproject.toml) on the five packages and flightsw/; cargo fmt --check + clippy -D warnings on the Rust crates"

# The Debian packages + venv and the Rust builds at once (make -j): apt and pip wait on the network and the disk,
# cargo on the CPU, so on a cold machine the Rust builds (~5 min, dtn7 the longest) hide most of the Python install.
# Each Rust build is cached outside the repository and returns at once when nothing changed.
setup:
	@$(MAKE) --no-print-directory -j4 $(VENV)/.installed rust

rust: linkd dtn7 ltpcla trafficd hardy

# The userspace link engine (netem/linkd, Rust): built with cargo from the Cargo registry into a cache
# outside the repository; nothing binary is committed. Without cargo the `userspace` engine is unavailable
# (the capability probe says so) and kernel NetEm / nft are used as before.
LINKD_TARGET ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/swarm-emu/linkd-target
linkd:
	@if command -v cargo >/dev/null; then \
	  CARGO_TARGET_DIR="$(LINKD_TARGET)" cargo build -q --release --locked --manifest-path netem/linkd/Cargo.toml \
	  && echo "swarm-linkd: $(LINKD_TARGET)/release/swarm-linkd"; \
	else echo "cargo not found: the userspace link engine (swarm-linkd) is not built; install Rust (rustup) for it"; fi

# ltpcla: `cla: ltp` (flightsw/ltpcla, Rust): dtn7's external convergence layer carrying bundles over LTP on UDP,
# built with cargo from the Cargo registry into a cache outside the repository (like swarm-linkd).
LTPCLA_TARGET ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/swarm-emu/ltpcla-target
ltpcla:
	@if command -v cargo >/dev/null; then \
	  CARGO_TARGET_DIR="$(LTPCLA_TARGET)" nice -n 10 cargo build -q --release --locked --manifest-path flightsw/ltpcla/Cargo.toml \
	  && echo "swarm-ltpcla: $(LTPCLA_TARGET)/release/swarm-ltpcla"; \
	else echo "cargo not found: cla: ltp (swarm-ltpcla) is not built; install Rust (rustup) for it"; fi

# trafficd: the multiplexing traffic engine in Rust (flightsw/trafficd-rs, swarm-trafficd), the twin of flightsw/trafficd.py
# at a fraction of its CPU (issue 27); `agent.py mux` runs it where built (netns backend: the host's cache), else the
# Python engine. Built like swarm-linkd into a cache outside the repository.
TRAFFICD_TARGET ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/swarm-emu/trafficd-target
trafficd:
	@if command -v cargo >/dev/null; then \
	  CARGO_TARGET_DIR="$(TRAFFICD_TARGET)" nice -n 10 cargo build -q --release --locked --manifest-path flightsw/trafficd-rs/Cargo.toml \
	  && echo "swarm-trafficd: $(TRAFFICD_TARGET)/release/swarm-trafficd"; \
	else echo "cargo not found: the Rust traffic engine (swarm-trafficd) is not built; the Python engine runs instead"; fi

# hardy: `dtn.agent: hardy` (flightsw/hardy-node, Rust): our node program on Hardy's crates from the Cargo registry
# (hardy-bpa, hardy-tcpclv4), built by images/hardy/build.sh (`nice -n 10 cargo build -q --release`, the versions
# flightsw/hardy-node/Cargo.lock pins, hardy-tcpclv4 and hardy-bpa patched by images/hardy/<crate>.patch) into a
# cache outside the repository like swarm-linkd; the program is copied alone into <cache>/bin. First build ~6 min.
HARDY_TARGET ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/swarm-emu/hardy-target
hardy:
	@if command -v cargo >/dev/null; then \
	  SWARM_HARDY_CACHE="$(HARDY_TARGET)" bash images/hardy/build.sh >/dev/null \
	  && echo "swarm-hardy: $(HARDY_TARGET)/bin/swarm-hardy"; \
	else echo "cargo not found: dtn.agent hardy (swarm-hardy) is not built; install Rust (rustup) for it"; fi

# linkd-static: a self-contained (static-pie, glibc) swarm-linkd for a guest or an image without Debian's libc,
# e.g. the kernel-lab guest that cross-checks it against kernel NetEm: copy the file in and run it by hand.
LINKD_STATIC ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/swarm-emu/linkd-static
linkd-static:
	RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$(LINKD_STATIC)" cargo build -q --release --locked \
	  --target x86_64-unknown-linux-gnu --manifest-path netem/linkd/Cargo.toml
	@echo "swarm-linkd (static): $(LINKD_STATIC)/x86_64-unknown-linux-gnu/release/swarm-linkd"

# linkd-test: the engine's own unit tests (cargo)
linkd-test:
	CARGO_TARGET_DIR="$(LINKD_TARGET)" cargo test -q --release --locked --manifest-path netem/linkd/Cargo.toml

# dtn7-rs (Cargo crate dtn7 0.21.0: dtnd, dtnsend, dtnrecv, ...) for the DTN nodes, built once into
# ~/.cache/swarm-emu/dtn7 (never into the repository); returns at once when built. ~9-15 min on 2 cores.
# images/dtn/dtn7-0.21.0.patch is applied to the registry's source first (its header says why); a patch that
# no longer applies stops here with one line naming it (exit 2).
# Without a Rust toolchain this says so and goes on: DTN swarms then stop with that message (exit 2).
dtn7:
	@if command -v cargo >/dev/null 2>&1 || [ -x "$$HOME/.cargo/bin/cargo" ]; then \
	  bash images/dtn/build.sh >/dev/null; \
	else echo "no Rust toolchain (cargo): DTN agents (dtn7-rs) not built; see https://rustup.rs"; fi

$(VENV)/.installed: pyproject.toml
	@bash images/apt-install.sh "the framework" $(APT_PACKAGES)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash experiments/demo.sh

# The kernel lab's guest image (Debian kernel + initramfs, ~10 s to build, cached by content hash in
# ~/.cache/swarm-emu/kernel-lab, never in the repository); the kernel_lab tests build it too if missing.
kernel-lab: setup
	@if [ "$$(id -u)" = 0 ] && command -v qemu-system-x86_64 >/dev/null; then $(PY) tests/kernel_lab/klab.py build; \
	else echo "kernel lab not built (needs root and qemu-system-x86): its tests will skip, or fail under CI=true"; fi

# The suite (docs/TESTING.md): test files side by side on TEST_WORKERS workers, a file whole on one worker, the
# kernel lab and the serial files first and apart from the rest (tests/parallel.py); unit tests fill the gaps. The 30 slowest tests are printed at the end.
# TEST_WORKERS=0 runs everything in one process, in collection order.
TEST_WORKERS ?= 4
TEST_REPORT ?= .pytest-report.xml  # JUnit: python tests/durations.py $(TEST_REPORT) [--write] gives the time per file
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test-packages:
	@bash images/apt-install.sh "the test suite" $(TEST_APT_PACKAGES)

test: setup kernel-lab test-packages
	$(PY) -m pytest tests $(PYTEST_PARALLEL) --durations=30 --junitxml=$(TEST_REPORT) $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest tests/unit

integration: setup test-packages
	$(PY) -m pytest tests/integration $(PYTEST_PARALLEL) --durations=30 $(PYTEST_ARGS)

image: setup
	$(PY) -c "from swarm.runtime.image import ensure_image; from swarm.runtime.runner import Runner; from swarm.runtime.swarm import default_workdir; print(ensure_image(Runner(), default_workdir(), progress=print))"

bench-up: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) bench/bench_up.py

bench-linkd: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) bench/bench_linkd.py

bench-sweep: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) bench/bench_sweep.py

bench-dtn: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) bench/bench_dtn.py

# TCPCL goodput at 2 s and 4 s one-way / at 0 s (patched dtn7, issue 26), ~4 min
bench-dtn-delay: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) bench/bench_dtn_delay.py

# lint: the Python packages (ruff: pyflakes, pycodestyle, bugbear, mccabe <= 20; mypy with pydantic's plugin on every
# module, none exempt, see pyproject.toml) and the Rust crate (rustfmt, clippy with warnings as
# errors; its build dir under ~/.cache/swarm-emu like the release build's).
lint: lint-py lint-rust

lint-py: setup
	$(VENV)/bin/ruff check swarm netem compose experiments analysis flightsw
	$(VENV)/bin/mypy

lint-rust:
	cargo fmt --check --manifest-path netem/linkd/Cargo.toml
	cargo fmt --check --manifest-path flightsw/ltpcla/Cargo.toml
	cargo fmt --check --manifest-path flightsw/trafficd-rs/Cargo.toml
	cargo fmt --check --manifest-path flightsw/hardy-node/Cargo.toml
	CARGO_TARGET_DIR="$(LINKD_TARGET)-clippy" nice -n 10 cargo clippy -q --release --locked --manifest-path netem/linkd/Cargo.toml -- -D warnings
	CARGO_TARGET_DIR="$(LTPCLA_TARGET)-clippy" nice -n 10 cargo clippy -q --release --locked --manifest-path flightsw/ltpcla/Cargo.toml -- -D warnings
	CARGO_TARGET_DIR="$(TRAFFICD_TARGET)-clippy" nice -n 10 cargo clippy -q --release --locked --manifest-path flightsw/trafficd-rs/Cargo.toml -- -D warnings
	SWARM_HARDY_CACHE="$(HARDY_TARGET)" bash images/hardy/build.sh clippy  # against hardy-tcpclv4 and hardy-bpa as patched

wipe: setup
	$(SWARM) wipe --yes

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
