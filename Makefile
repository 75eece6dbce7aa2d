# The two commands a user needs: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# test workers (pytest-xdist): one per core; a module's tests (or a class's) run in one worker, so
# its module- and class-scoped compiled fixtures are made once
TEST_WORKERS ?= auto

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $@

.PHONY: setup demo test lint bench
setup: $(VENV)/.installed

demo: setup
	$(PY) examples/models/resnet18.py

test: setup
	$(PY) -m ruff check ember tests benchmarks examples
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadscope

lint: setup
	$(PY) -m ruff check ember tests benchmarks examples

bench: setup
	$(PY) -m pip install -q -e ".[test,bench]"
	$(PY) benchmarks/gemm.py
	$(PY) benchmarks/compare.py
