# The two front-door commands: `make demo` and `make test`. Both build .venv from
# scratch when it is missing, installing exact versions from requirements.lock.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench screenshots sandbox-tools lock clean

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# bubblewrap backs the `bwrap` sandbox backend; install it when we can (root + apt).
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
	      || echo "note: could not install bubblewrap; bwrap sandbox tests will be skipped"; \
	  else echo "note: bubblewrap missing and not root; bwrap sandbox tests will be skipped"; fi; }

demo: $(STAMP)
	$(BIN)/hermes-console demo

# Static checks (a few seconds): lint, types, import contracts.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: $(STAMP) sandbox-tools lint
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

screenshots: $(STAMP)
	$(BIN)/python -m hermes_console_dev.screenshots screenshots

# Regenerate the lock from pyproject (needs registry access).
lock:
	rm -rf /tmp/hc-lock-venv && $(PYTHON) -m venv /tmp/hc-lock-venv
	/tmp/hc-lock-venv/bin/pip install --quiet --upgrade pip
	/tmp/hc-lock-venv/bin/pip install --quiet '.[test]'
	/tmp/hc-lock-venv/bin/pip freeze --exclude hermes-console > requirements.lock

clean:
	rm -rf $(VENV)
