# Two commands: `make run` (the service on embedded defaults) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test test-serial test-fast lint sdk clean

setup: $(VENV)/.installed-dev

# Idempotent: each stamp re-runs only when pyproject.toml changes. `make run` installs the runtime
# dependencies only; the test and bench tools (`.[dev]`) come with `make test` (and `setup`). The CPU
# torch wheel goes in first on machines without CUDA, so pip never pulls the multi-GB CUDA build.
$(VENV)/.created:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install -q "torch==2.13.0"; fi
	touch $@

$(VENV)/.installed-runtime: pyproject.toml $(VENV)/.created
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.created
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps 'tinker-cookbook==0.6.*'  # see pyproject's dev list
	touch $@

run: $(VENV)/.installed-runtime
	$(BIN)/keel up

test: setup
	bash scripts/test-services.sh
	bash scripts/test-browser.sh
	$(BIN)/python scripts/test-groups.py

# One pytest session, in order (to debug a test's interaction with the ones before it).
test-serial: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not faults"

lint: setup
	$(BIN)/ruff check .

sdk: setup
	$(BIN)/python -m sdk.generate

clean:
	rm -rf $(VENV) .keel .pytest_cache
