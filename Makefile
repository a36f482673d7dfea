# The two commands of the README: `make render` (set up, then render the dev stack into build/dev)
# and `make test`. Both create .venv from requirements.lock on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: setup render test bench clean

$(BIN)/pytest: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

setup: $(BIN)/pytest

render: setup
	$(BIN)/python -m gpuctl render --stack $(STACK) --out build/$(STACK) --offline

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m benchmarks.fleet

clean:
	rm -rf build
