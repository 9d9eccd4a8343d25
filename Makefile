# Every target builds .venv itself, so a fresh clone needs nothing but python3 and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed

.PHONY: demo check test lint typecheck unit integration docs bench bench-quick bench-serve-peers stress mutate mutant clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.core: $(BIN)/python pyproject.toml
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,cli,serve,spark,docs,celery,metrics]'
	touch $@

## demo: producers and consumers in separate processes share one queue
demo: $(VENV)/.core
	$(PY) -m vsqs._demo

LINTED := vsqs tests benchmarks examples docs
# Coverage of every process the tests start (xdist's workers included), combined after.
COVER  := COVERAGE_FILE=$(CURDIR)/.coverage COVERAGE_PROCESS_START=$(CURDIR)/pyproject.toml $(BIN)/coverage run

## check: the quick tier, in minutes: ruff, mypy, the import contracts and the tests that
## need nothing but Python and a local filesystem (tests/conftest.py INTEGRATION lists the
## rest), on every core; a quick-tier test slower than 15 s fails, so the tier stays quick
check: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -m "not integration" -n auto --slow-budget 15

## unit: the quick tier's tests alone
unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration" -n auto

# The integration tier: its parallel part (tests/conftest.py PARALLEL) on every core, a
# worker taking over another's queue when its own runs out (worksteal: one long file does
# not finish the pass alone), then the rest one test at a time.
INTEGRATION_PARALLEL := -m "integration and parallel" -n auto --dist worksteal
INTEGRATION_SERIAL   := -m "integration and not parallel"

## integration: the integration tier alone (what make test adds to make check)
integration: $(STAMP)
	$(BIN)/pytest -q $(INTEGRATION_PARALLEL)
	$(BIN)/pytest -q $(INTEGRATION_SERIAL)

## typecheck: mypy --strict on vsqs and tests
typecheck: $(STAMP)
	$(BIN)/mypy

## test: lint, type-check, the whole suite with coverage (the quick tier on every core, then
## the integration tier: its parallel part on every core, the rest in sequence), and the
## docs build
test: $(STAMP)
	sh tests/reliability/setup-filesystems.sh
	sh tests/multihost/setup-sshfs.sh
	PYTHON=$(PYTHON) sh tests/multihost/setup-juicefs.sh
	sh tests/setup-java.sh
	sh tests/setup-browser.sh
	PYTHON=$(PYTHON) sh tests/setup-sqs-clients.sh
	PYTHON=$(PYTHON) sh tests/outside/setup-moto.sh
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/coverage erase
	$(COVER) -m pytest -q -m "not integration" -n auto
	$(COVER) -m pytest -q $(INTEGRATION_PARALLEL)
	$(COVER) -m pytest $(INTEGRATION_SERIAL)
	$(BIN)/coverage combine -q
	$(BIN)/coverage report
	$(MAKE) docs

## lint: ruff and the import contracts
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/lint-imports

docs: $(STAMP)
	PYTHONWARNINGS=ignore::DeprecationWarning $(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]' -r benchmarks/requirements-peers.txt
	touch $@

## bench and bench-quick: sqslite and the query-protocol boto3 for bench_serve too
bench bench-quick: bench-serve-peers
bench-serve-peers:
	PYTHON=$(PYTHON) sh benchmarks/setup-sqslite.sh

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
## and bytecode is written: each child would otherwise compile every mutant again. mutants/
## exists before Python starts, so the tests load this checkout's modules, not another's.
mutate: $(VENV)/.mutate
	mkdir -p $(CURDIR)/mutants
	cd $(CURDIR) && PYTHONDONTWRITEBYTECODE= PYTHONPATH=$(CURDIR)/mutants $(BIN)/mutmut run --max-children $(MUTATE_JOBS) \
		$(if $(MODULE),'vsqs.$(MODULE)*')
	$(PY) -m tests.mutation.report $(if $(MODULE),--module $(MODULE))

MUTATE_JOBS ?= 2

## mutant: one mutant of the last `make mutate` against TESTS (default tests/mutation/).
## Run inside mutants/ (mutmut's copy, where the tests import the mutated package), with
## the checkout's current tests copied in: from the checkout, pytest would import the
## unmutated vsqs and every mutant would seem to survive.
mutant: $(VENV)/.mutate
	@test -n "$(NAME)" && test -d mutants/vsqs || { \
		echo "usage: make mutant NAME=<a mutant of mutmut's> [TESTS=tests/mutation/] (after make mutate)"; exit 2; }
	tar -cf - --exclude=node_modules --exclude=__pycache__ tests | tar -C mutants -xf -
	cd mutants && MUTANT_UNDER_TEST='$(NAME)' PYTHONPATH=$(CURDIR)/mutants \
		$(CURDIR)/$(BIN)/pytest -q -p no:randomly -p no:cacheprovider $(or $(TESTS),tests/mutation/)

clean:
	rm -rf mutants $(VENV) .venv-awscli .venv-query .venv-moto .venv-juicefs tests/serve/js/node_modules benchmarks/sqslite/node_modules docs/_build .pytest_cache .mypy_cache .ruff_cache .coverage*
