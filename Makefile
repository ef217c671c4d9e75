# luapipe: `make demo` runs the main job, `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test demo generate deps server-deps venv lint typecheck pytest clean \
	engine-deps engines test-engines

## System packages: redis-server and redis-cli, and luacheck (Debian lua-check, which runs on
## lua5.1, Redis's Lua) for `scripts lint`, installed if missing.
server-deps:
	@if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
	    || ! command -v lua5.1 >/dev/null || ! command -v luacheck >/dev/null; then \
	  if command -v apt-get >/dev/null; then \
	    echo "installing redis-server redis-tools lua5.1 lua-check with apt-get"; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      redis-server redis-tools lua5.1 lua-check; \
	  else \
	    echo "error: install Redis 7 (redis-server, redis-cli) and luacheck first" >&2; exit 1; \
	  fi; \
	fi

## Everything the checks need: the server packages, and Debian's chromium, in which a test
## lays out the HTML report at 1280 px and 390 px (driven by playwright, never its own browser).
deps: server-deps
	@if ! command -v chromium >/dev/null; then \
	  if command -v apt-get >/dev/null; then \
	    echo "installing chromium with apt-get"; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "error: chromium not found; install it (the report's layout test runs in it)" >&2; exit 1; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP) $(RUN_STAMP)

venv: $(STAMP)

## What `make demo` needs and no more: luapipe with its runtime dependencies, not the test
## extras (mypy, ruff, playwright...); a venv made for the tests has them already.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e .
	touch $(RUN_STAMP)

lint: venv
	$(BIN)/ruff check toolkit tests examples .ci/engines.py
	$(BIN)/ruff format --check toolkit tests examples .ci/engines.py
	$(BIN)/lint-imports --no-logo

typecheck: venv
	$(BIN)/mypy --strict toolkit/luapipe

pytest: deps venv
	$(BIN)/python -m pytest -q

test: deps venv lint typecheck pytest

demo: server-deps $(RUN_STAMP)
	$(BIN)/luapipe demo

## The catalogue's checked-in generated files: each spec's Lua into scripts_lua/ (the registry
## loads it like any script) and its Python module into examples/operations/generated/.
generate: venv
	$(BIN)/luapipe generate examples/operations/*.toml --out scripts_lua \
	  --py-out examples/operations/generated

## The engine matrix (README "Servers tested"). `make engines` builds the server and redis-cli
## of every source tarball of ENGINES_SRC listed in its SHA256SUMS (checked) once, with TLS,
## into ENGINES_CACHE (outside the tree; a changed tarball is a new directory). `make test-engines` runs the guarantee
## tests (`pytest -m engines`, selected in tests/engine_matrix.py) on Debian's redis-server and
## on each built engine, and prints a table. ENGINES_ONLY=valkey-8.0.1 picks engines and
## ENGINES_SKIP=default leaves some out (names as the table shows them: default,
## redis-7.2.6, ...); ENGINES_PYTEST='tests/x.py -k y' replaces `-m engines` (e.g.
## ENGINES_PYTEST=tests for the whole suite on each engine).
ENGINES_SRC   ?= $(abspath ../shared/engines)
ENGINES_CACHE ?= $(HOME)/.cache/luapipe/engines
ENGINES_ONLY  ?=
ENGINES_SKIP  ?=
ENGINES_PYTEST ?=
ENGINES_TOOL = .ci/engines.py --src "$(ENGINES_SRC)" --cache "$(ENGINES_CACHE)"

## A C compiler and OpenSSL's headers for the TLS builds (Debian: libssl-dev), if missing.
engine-deps:
	@if [ -d "$(ENGINES_SRC)" ] && { ! command -v cc >/dev/null || ! command -v make >/dev/null \
	    || ! command -v pkg-config >/dev/null || ! pkg-config --exists libssl; }; then \
	  if command -v apt-get >/dev/null; then \
	    echo "installing gcc make pkg-config libssl-dev with apt-get"; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      gcc make pkg-config libssl-dev; \
	  else \
	    echo "error: install a C compiler, make, pkg-config and OpenSSL's headers first" >&2; \
	    exit 1; \
	  fi; \
	fi

engines: engine-deps
	$(PYTHON) $(ENGINES_TOOL) build --jobs 2

test-engines: deps venv engines
	$(BIN)/python $(ENGINES_TOOL) test $(foreach e,$(ENGINES_ONLY),--only $(e)) \
	  $(foreach e,$(ENGINES_SKIP),--skip $(e)) \
	  $(if $(ENGINES_PYTEST),-- $(ENGINES_PYTEST))

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
