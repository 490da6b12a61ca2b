# The README's commands. Each installs what it needs from Debian's packages.
#   make build   the release binary at build/cordon
#   make run     build, then the main job: `cordon serve` on loopback
#                (scripts/serve.sh); `make demo` shows `cordon run` alone
#   make test    every test: unit, integration, Python, and the unit tests
#                again under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench   the side-by-side benchmarks (bench/)

BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)

# Build and test dependencies (docs/dependencies.md says why each is here).
PACKAGES := cmake ninja-build g++ make pkg-config \
	libsqlite3-dev nlohmann-json3-dev libcli11-dev libssl-dev libboost-dev \
	libseccomp-dev libtomlplusplus-dev \
	libgtest-dev libgmock-dev libzmq3-dev \
	python3 python3-pytest python3-ipykernel python3-venv python3-setuptools python3-wheel \
	python3-requests python3-websocket python3-jupyter-server \
	util-linux procps
BENCH_PACKAGES := hyperfine bubblewrap firejail

.PHONY: deps build run demo test unit asan bench clean format

deps:
	@scripts/install-deps.sh $(PACKAGES)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build
	scripts/serve.sh $(BUILD)/cordon

demo: build
	scripts/demo.sh $(BUILD)/cordon

test: build
	ctest --test-dir $(BUILD) --output-on-failure --timeout 900
	$(MAKE) --no-print-directory asan

asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target cordon_unit_tests
	$(ASAN_BUILD)/cordon_unit_tests --gtest_brief=1

bench: build
	@scripts/install-deps.sh $(BENCH_PACKAGES)
	bench/run.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
