# Every target builds .venv itself, so a fresh clone needs nothing but python3 and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit docs bench bench-quick stress mutate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.core: $(BIN)/python pyproject.toml
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,cli,spark,docs,celery,metrics]'
	touch $@

## demo: producers and consumers in separate processes share one queue
demo: $(VENV)/.core
	$(PY) -m vsqs._demo

## test: lint, type-check, the whole suite with coverage, and the docs build
test: $(STAMP)
	sh tests/reliability/setup-filesystems.sh
	sh tests/multihost/setup-sshfs.sh
	sh tests/setup-java.sh
	sh tests/setup-browser.sh
	PYTHON=$(PYTHON) sh tests/setup-sqs-clients.sh
	$(BIN)/ruff check vsqs tests benchmarks examples docs
	$(BIN)/ruff format --check vsqs tests benchmarks examples docs
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/coverage erase
	COVERAGE_FILE=$(CURDIR)/.coverage COVERAGE_PROCESS_START=$(CURDIR)/pyproject.toml $(BIN)/coverage run -m pytest
	$(BIN)/coverage combine -q
	$(BIN)/coverage report
	$(MAKE) docs

lint: $(STAMP)
	$(BIN)/ruff check vsqs tests benchmarks examples docs
	$(BIN)/ruff format --check vsqs tests benchmarks examples docs
	$(BIN)/lint-imports

docs: $(STAMP)
	PYTHONWARNINGS=ignore::DeprecationWarning $(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]' -r benchmarks/requirements-peers.txt
	touch $@

## bench: the full side-by-side benchmark (peers installed from PyPI)
bench: $(VENV)/.bench
	$(PY) -m benchmarks.run --full

## bench-quick: a subset that finishes in under two minutes
bench-quick: $(VENV)/.bench
	$(PY) -m benchmarks.run --quick

## stress: the long crash-injection and fault runs
stress: $(STAMP)
	sh tests/reliability/setup-filesystems.sh
	sh tests/multihost/setup-sshfs.sh
	$(BIN)/pytest -m stress --stress-long tests

$(VENV)/.mutate: $(STAMP)
	$(PY) -m pip install --quiet -e '.[mutate]'
	touch $@

## mutate: mutation testing of the core modules (long: not part of `make test`).
##   make mutate MODULE=_capacity    one module (_sets for the package, _sets._spread for a file)
##   make mutate                     every core module ([tool.mutmut] in pyproject.toml)
## Mutated copies live in mutants/ (kept between runs: a rerun reuses the recorded test
## coverage); PYTHONPATH points there so that the tests' child processes run the mutant too,
## and bytecode is written: each child would otherwise compile every mutant again.
mutate: $(VENV)/.mutate
	cd $(CURDIR) && PYTHONDONTWRITEBYTECODE= PYTHONPATH=$(CURDIR)/mutants $(BIN)/mutmut run --max-children $(MUTATE_JOBS) \
		$(if $(MODULE),'vsqs.$(MODULE)*')
	$(PY) -m tests.mutation.report $(if $(MODULE),--module $(MODULE))

MUTATE_JOBS ?= 2

clean:
	rm -rf mutants $(VENV) .venv-awscli .venv-query tests/serve/js/node_modules docs/_build .pytest_cache .mypy_cache .ruff_cache .coverage*
