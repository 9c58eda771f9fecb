# Makefile — one-command set-up, build, demo and test of kiln on a fresh Debian 12 machine.
#
#   make run        install what is missing, build (build/, Release), compile models/sample_cnn.onnx
#                   into build/sample_cnn.kiln and run it on a random input
#   make test       the same set-up, then: ctest in build/ (unit, conformance, e2e); the unit,
#                   bad-input and conformance tests in an ASan+UBSan build (build-asan/); every fuzz
#                   target for FUZZ_SECONDS each in a libFuzzer build (build-fuzz/)
#   make build      set-up and build only
#   make clean      remove build/, build-asan/, build-fuzz/   (make distclean: also .venv/)
#
# Variables: JOBS (parallel jobs; default: number of CPUs), FUZZ_SECONDS (per target; default 11),
# PYTHON (the interpreter that creates .venv; default python3).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

APT_PACKAGES := build-essential cmake pkg-config libopenblas-dev libcurl4-openssl-dev libmicrohttpd-dev libcjson-dev python3-venv clang \
                libclang-rt-14-dev chromium
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON ?= python3
FUZZ_SECONDS ?= 11

VENV := .venv
VPY := $(CURDIR)/$(VENV)/bin/python
VENV_STAMP := $(VENV)/.kiln-requirements-installed
BUILD := build
ASAN_BUILD := build-asan
FUZZ_BUILD := build-fuzz
CASES := $(BUILD)/onnx_cases
CASES_STAMP := $(BUILD)/.onnx-cases-generated
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1 \
                 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# $(call configure,DIR,EXTRA CMAKE ARGS): configures DIR, first dropping a CMake cache that was made
# for another checkout (a moved or copied tree), which CMake would otherwise refuse.
define configure
	@if [ -f $(1)/CMakeCache.txt ] && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$(CURDIR)" $(1)/CMakeCache.txt; then \
	  echo "    $(1)/CMakeCache.txt belongs to another source tree: removing it"; \
	  rm -rf $(1)/CMakeCache.txt $(1)/CMakeFiles; \
	fi
	cmake -S . -B $(1) -DKILN_PYTHON=$(VPY) $(2)
endef

.PHONY: build run test test-build test-asan test-fuzz apt-deps clean distclean

# ------------------------------------------------------------------------------ set-up

apt-deps:
	@echo "==> checking apt packages: $(APT_PACKAGES)"
	@if ! command -v dpkg >/dev/null; then \
	  echo "    dpkg not found (not Debian?): make sure these are installed: $(APT_PACKAGES)"; exit 0; \
	fi; \
	missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "    ✓ all installed"; exit 0; fi; \
	echo "    installing:$$missing"; \
	$(SUDO) apt-get update -q; \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

$(VENV_STAMP): tests/requirements.txt | apt-deps
	@echo "==> python environment $(VENV)/ with tests/requirements.txt"
	@[ -x $(VENV)/bin/python ] || { echo "    $(PYTHON) -m venv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	$(VENV)/bin/python -m pip install -q -r tests/requirements.txt
	@touch $@

build: apt-deps $(VENV_STAMP)
	@echo "==> configure and build $(BUILD)/ (Release)"
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Release)
	cmake --build $(BUILD) -j $(JOBS)

# ------------------------------------------------------------------------------ demo

run: build
	@echo "==> compile the sample model into an engine"
	$(BUILD)/kiln build models/sample_cnn.onnx -o $(BUILD)/sample_cnn.kiln
	@echo "==> run the engine on a random input"
	$(BUILD)/kiln run $(BUILD)/sample_cnn.kiln
	@echo "==> generate text with the bundled language model (models/kjv-gpt2, docs/bundled-model.md)"
	$(BUILD)/kiln generate models/kjv-gpt2 --prompt "And God said" --max-tokens 64 --seed 7

# ------------------------------------------------------------------------------ tests

$(CASES_STAMP): tests/conformance/gen_onnx_node_tests.py $(VENV_STAMP)
	@echo "==> write the ONNX node test cases to $(CASES)/"
	rm -rf $(CASES)
	$(VPY) tests/conformance/gen_onnx_node_tests.py $(CASES)
	@touch $@

test: test-build test-asan test-fuzz
	@echo "==> all tests passed"

# Both ctest runs happen even if the first fails; the conformance run prints its per-op table.
test-build: build $(CASES_STAMP)
	@echo "==> ctest in $(BUILD)/: unit, bad-input and e2e tests"
	@rc=0; \
	(cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE conformance) || rc=1; \
	echo "==> ctest in $(BUILD)/: ONNX conformance (cases in $(CASES)/)"; \
	(cd $(BUILD) && ctest --output-on-failure -V -L conformance) || rc=1; \
	exit $$rc

# CPU only: AddressSanitizer's shadow memory and the CUDA driver do not mix (GPU code is tested in
# tests/gpu/ against the CPU backend instead).
test-asan: apt-deps $(VENV_STAMP) $(CASES_STAMP)
	@echo "==> configure and build $(ASAN_BUILD)/ (clang, AddressSanitizer + UndefinedBehaviorSanitizer)"
	$(call configure,$(ASAN_BUILD),-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_ONNX_CASES=$(CURDIR)/$(CASES))
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	@echo "==> ctest in $(ASAN_BUILD)/: unit, bad-input and conformance tests under the sanitizers"
	cd $(ASAN_BUILD) && $(SANITIZER_ENV) ctest --output-on-failure -j $(JOBS) -L 'unit|badinput|conformance'

# Only fuzz/'s targets are built (the instrumented library and the fuzzers, not the CLI and tests).
# Each executable the fuzz/ CMake project builds is a libFuzzer target (11 of them: ~2 min in all). New
# inputs go to build-fuzz/corpus/<target>/; the committed seeds in fuzz/corpus/<target>/ are only read.
# Long runs (10 million executions per target): scripts/fuzz-long, results in docs/fuzzing.md.
test-fuzz: apt-deps $(VENV_STAMP)
ifeq ($(wildcard fuzz/CMakeLists.txt),)
	@echo "==> fuzz/CMakeLists.txt not found: no fuzz targets, skipping"
else
	@echo "==> configure and build $(FUZZ_BUILD)/ (clang, libFuzzer)"
	$(call configure,$(FUZZ_BUILD),-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DKILN_FUZZ=ON -DKILN_CUDA=OFF)
	cmake --build $(FUZZ_BUILD)/fuzz -j $(JOBS)
	@targets=$$(find $(FUZZ_BUILD)/fuzz -maxdepth 1 -type f -perm -u+x | sort); \
	if [ -z "$$targets" ]; then echo "no fuzz target was built in $(FUZZ_BUILD)/fuzz/"; exit 1; fi; \
	for t in $$targets; do \
	  name=$$(basename $$t); work=$(FUZZ_BUILD)/corpus/$$name; log=$(FUZZ_BUILD)/$$name.log; \
	  mkdir -p $$work $(FUZZ_BUILD)/artifacts; \
	  seeds=""; if [ -d fuzz/corpus/$$name ]; then seeds=fuzz/corpus/$$name; fi; \
	  echo "==> fuzz $$name for $(FUZZ_SECONDS) s (seeds: $${seeds:-none}; log: $$log)"; \
	  if ! $(SANITIZER_ENV) $$t -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=2048 \
	       -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$name- $$work $$seeds >$$log 2>&1; then \
	    tail -n 60 $$log; echo "FAILED: fuzz target $$name (reproducer in $(FUZZ_BUILD)/artifacts/)"; exit 1; \
	  fi; \
	  grep -E "^(#[0-9]+\s+DONE|Done [0-9]+ runs)" $$log | tail -n 1 | sed 's/^/    /' || true; \
	done
endif

# ------------------------------------------------------------------------------ cleaning

clean:
	@echo "==> remove $(BUILD)/ $(ASAN_BUILD)/ $(FUZZ_BUILD)/"
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)

distclean: clean
	@echo "==> remove $(VENV)/"
	rm -rf $(VENV)
