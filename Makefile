# luapipe: `make demo` runs the main job, `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test demo deps venv lint typecheck pytest clean

## System packages: redis-server and redis-cli, and luacheck (Debian lua-check) for
## `scripts lint`, installed if missing.
deps:
	@if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
	    || ! command -v luacheck >/dev/null; then \
	  if command -v apt-get >/dev/null; then \
	    echo "installing redis-server redis-tools lua-check with apt-get"; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools lua-check; \
	  else \
	    echo "error: install Redis 7 (redis-server, redis-cli) and luacheck first" >&2; exit 1; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

lint: venv
	$(BIN)/ruff check toolkit tests examples
	$(BIN)/ruff format --check toolkit tests examples
	$(BIN)/lint-imports --no-logo

typecheck: venv
	$(BIN)/mypy --strict toolkit/luapipe

pytest: deps venv
	$(BIN)/python -m pytest -q

test: deps venv lint typecheck pytest

demo: deps venv
	$(BIN)/luapipe demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
