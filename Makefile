# The two front-door commands: `make demo` and `make test`. Both build .venv from
# scratch when it is missing, installing exact versions from requirements.lock.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench screenshots sandbox-tools slurm-tools lock clean

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

# Slurm + munge back the single-node cluster of tests/slurm (the deploy/slurm recipe, for real).
slurm-tools: sandbox-tools  # after it: two apt-get runs at once (make -j) would fight over the dpkg lock
	@command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) >/dev/null 2>&1 \
	      || echo "note: could not install slurm-wlm/munge; Slurm tests will be skipped"; \
	  else echo "note: slurm-wlm/munge missing and not root; Slurm tests will be skipped"; fi; }

# TERMINAL_ENV=docker: an engine (installed/started here when root + apt, stopped after)
# and the sandbox base image (built once, cached) -- see hermes_console/docker_engine.py.
demo: $(STAMP)
ifeq ($(TERMINAL_ENV),docker)
	$(BIN)/python -m hermes_console.docker_engine run --image base --default-image -- \
	  $(BIN)/hermes-console demo --env.terminal_backend docker
else
	$(BIN)/hermes-console demo
endif

# Static checks (a few seconds): lint, types, import contracts.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The docker tests get a private engine (see hermes_console/docker_engine.py): started
# here when none answers and we are root with apt, stopped when pytest ends; without
# one they are skipped, naming the reason.
# The suite runs on TEST_WORKERS pytest-xdist workers (most tests wait on subprocesses,
# sandboxes and simulated latency, so more workers than cores pay); --dist loadgroup keeps
# each xdist group of tests/conftest.py (the Slurm cluster, the docker engine) on one worker.
# PYTHONDONTWRITEBYTECODE is cleared so the workers and the many `python -m` subprocesses
# of the tests reuse compiled bytecode instead of compiling the project over and over.
TEST_WORKERS ?= 4
test: $(STAMP) sandbox-tools slurm-tools lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m hermes_console.docker_engine run --image base -- \
	  $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

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
	-$(BIN)/python -m hermes_console.docker_engine stop 2>/dev/null
	rm -rf $(VENV)
