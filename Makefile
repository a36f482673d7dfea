# The commands of the README: `make render` (set up, then render the dev stack into build/dev), `make test`,
# and `make e2e` (build the real control plane from Go modules, then run every stack against it).
# All create .venv from requirements.lock on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: setup render test e2e-tools e2e bench bench-engine clean

$(BIN)/pytest: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

setup: $(BIN)/pytest

render: setup
	$(BIN)/python -m gpuctl render --stack $(STACK) --out build/$(STACK) --offline

test: setup
	$(BIN)/python -m pytest -q -n auto

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, promtool, Kueue, Karpenter (its kwok
# provider), and the Pulumi engine, its Python language host and Kubernetes provider, from the pins in
# e2e/tools/*/go.mod, into .e2e-cache/bin; rebuilt only when a pin changes.
e2e-tools:
	e2e/tools/build.sh

# Every core runs a test file at a time (a file's tests share their planes); the tests mostly wait on the servers.
e2e: setup e2e-tools
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder e2e

bench: setup
	$(BIN)/python -m benchmarks.fleet
	$(BIN)/python -m benchmarks.preview

# `pulumi preview` against `gpuctl preview`, and the program's share of `pulumi up`, under the real engine.
bench-engine: setup e2e-tools
	$(BIN)/python -m benchmarks.engine

clean:
	rm -rf build
