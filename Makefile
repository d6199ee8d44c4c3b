# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test test-cluster check lint typecheck unit clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/evobus run examples/pendulum.toml --out runs

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck

test: check
	$(BIN)/pytest -q -n 2 -m "not cluster"

# Campaigns across three hosts on a three-node NATS cluster that loses nodes (network
# namespaces: needs root and iproute2, else skipped with the reason); about 3 minutes.
test-cluster: $(STAMP)
	$(BIN)/pytest -q -m cluster tests/cluster

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
