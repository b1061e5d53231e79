# The README's two commands. Everything else lives in CMake (CMakePresets.json).
PRESET ?= release
WERROR ?= OFF
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD := build/$(PRESET)

.PHONY: test run deps configure build asan bench results clean

deps:
	@cmake/install-deps.sh --with-browser

configure: deps
	@cmake --preset $(PRESET) -DKEVO_WERROR=$(WERROR) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

run: build
	@$(BUILD)/lib/cli/kevo search

asan:
	@$(MAKE) test PRESET=asan

bench: build
	@bench/run_all.sh $(BUILD) --quick

results: build
	@bench/run_all.sh $(BUILD)

clean:
	rm -rf build
