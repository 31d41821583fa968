# Stamp: every target sets up what it needs (a .venv with the project installed) first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` runs all but the `serial` tests on this many pytest-xdist workers (a module's
# tests on one worker, its stamps with them; the heavy modules one at a time: tests/conftest.py),
# then the `serial` ones alone. A 2-core machine is busy with 2.
TEST_WORKERS ?= 2

# The SDK (sdk/, issue 31) supports Python 3.9 on: its protocol code is generated, and its
# wheel tested, with the oldest one (pyenv's, else one on the PATH; tests skip without).
PYTHON39 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.9*/bin/python3.9) \
	$(shell command -v python3.9 2>/dev/null))
SDK_TOOLS := $(VENV)/sdk-tools

.PHONY: setup run test test-quick proto sdk sdk-proto lint bench down clean

setup: $(INSTALLED)

$(INSTALLED): pyproject.toml sdk/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Stamp needs Python 3.11"'
	@# libfuse 3 for the power-cut tests' lossy file system (tools/lossyfs); root only.
	@command -v fusermount3 >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& { apt-get update -qq && apt-get install -y -qq fuse3 >/dev/null; } \
		|| echo "note: no fusermount3 (package fuse3): the power-cut tests will be skipped"; }
	@# tmux, in which tests/probe/test_watch.py draws `stamp top` (skipped without); root only.
	@command -v tmux >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& { apt-get update -qq && apt-get install -y -qq tmux >/dev/null; } \
		|| echo "note: no tmux: the stamp top terminal test will be skipped"; }
	@# A JRE (17+) for Spark (spark/): Debian's headless OpenJDK when none is found; root only.
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1); \
	[ "$${v:-0}" -ge 17 ] 2>/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; } \
		|| echo "note: no Java 17+: the Spark jobs and tests need one (set JAVA_HOME)"; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# The SDK is a distribution of its own (sdk/): the tools, Spark and the tests use it.
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,bench,docs]' -e ./sdk
	touch $@

## run: start a local stamp on the default config (./stamp-data) and show a short demo
run: setup
	$(BIN)/stamp up
	$(BIN)/stamp demo
	@echo "The stamp keeps running: '$(BIN)/stamp status' shows it, '$(BIN)/stamp down' stops it."

## test: the whole suite (real processes included): in parallel, then the timing-sensitive
## (`serial`) tests alone; fails if either part fails
# The suite starts thousands of Python processes (every server of every stamp, every `stamp`
# command): with PYTHONDONTWRITEBYTECODE set, as it may be in the environment, each compiled
# the project's modules anew, a fifth to a quarter of a server's start-up CPU. Bytecode is
# cached here instead, under the venv, so the source tree gets no __pycache__.
test: export PYTHONDONTWRITEBYTECODE :=
test: export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
test: setup
	$(BIN)/ruff check .
	@# Exit status 5: no test of that part was selected (PYTEST_ARGS may pick a few). The
	@# slowest tests of each part are listed: where the next trim of the suite's time lies.
	@# Each part's failures are repeated at the very end: a CI log is often read from its tail.
	@rc=0; log=$(VENV)/test-log; rm -f $$log.*; set -x; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=30 \
		-m 'not serial' $(PYTEST_ARGS) 2>&1 | tee $$log.parallel; s=$${PIPESTATUS[0]}; \
	[ $$s = 0 ] || [ $$s = 5 ] || rc=1; \
	$(BIN)/pytest -q -m serial --durations=15 $(PYTEST_ARGS) 2>&1 | tee $$log.serial; \
	s=$${PIPESTATUS[0]}; [ $$s = 0 ] || [ $$s = 5 ] || rc=1; \
	{ set +x; } 2>/dev/null; [ $$rc = 0 ] || grep -h -E '^(FAILED|ERROR) |^[0-9]+ (passed|failed)|^=+ .*(failed|error)' \
		$$log.parallel $$log.serial; \
	exit $$rc

## test-quick: everything but the slow probe tests
test-quick: setup
	$(BIN)/pytest -q -m 'not slow' $(PYTEST_ARGS)

## proto: regenerate the gRPC code in common/proto from its .proto files
proto: setup
	$(BIN)/python -m common.proto.generate

## sdk: the SDK's wheel, in sdk/dist/ (pip install sdk/dist/stampsdk-*.whl)
sdk: setup
	rm -rf sdk/dist sdk/build
	$(BIN)/pip wheel --quiet --disable-pip-version-check --no-deps -w sdk/dist ./sdk
	@ls sdk/dist/*.whl

## sdk-proto: regenerate the SDK's copy of the public protocol's code (grpcio-tools 1.80 on
## Python 3.9, so that it runs on protobuf 6 and 7)
sdk-proto: setup
	@test -n "$(PYTHON39)" || { echo "sdk-proto needs Python 3.9 (PYTHON39=...)"; exit 1; }
	test -x $(SDK_TOOLS)/bin/python || $(PYTHON39) -m venv $(SDK_TOOLS)
	$(SDK_TOOLS)/bin/pip install --quiet --disable-pip-version-check grpcio-tools==1.80.1
	$(SDK_TOOLS)/bin/python -m common.proto.generate --sdk

## docs: the SDK's API reference, generated by pdoc from its docstrings, in docs/api/ (open
## docs/api/index.html; build output, not in git); the guide is docs/README.md
# Every public module by name: pdoc follows a package's __all__, which names no submodule
# but errors (named here too, pdoc would add it twice and warn). tests/unit/
# test_sdk_docstrings.py runs this recipe into a directory of its own.
DOCS_API ?= docs/api
SDK_MODULES := stampsdk $(sort $(patsubst sdk/src/stampsdk/%.py,stampsdk.%,\
	$(filter-out sdk/src/stampsdk/_% sdk/src/stampsdk/errors.py,\
	$(wildcard sdk/src/stampsdk/*.py))))
.PHONY: docs
docs: setup
	rm -rf $(DOCS_API)
	$(BIN)/pdoc -o $(DOCS_API) -d markdown $(SDK_MODULES)

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/stamp bench extent-append --json

down: setup
	$(BIN)/stamp down

clean:
	rm -rf $(VENV) stamp-data
