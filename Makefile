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

# torchvision and timm for the hub models' tests and benchmarks/hub_sweep.py: their model definitions only,
# in a folder of their own (benchmarks/models/hub_libs.py says why); offline, the tests that need them skip.
HUB_LIBS := .hub-libs
HUB_PACKAGES := torchvision==0.29.1 timm==1.0.31

.PHONY: setup hub-libs demo test lint bench
setup: $(VENV)/.installed

hub-libs: setup
	@test -f $(HUB_LIBS)/.installed || { $(PY) -m pip install -q --no-deps --target $(HUB_LIBS) $(HUB_PACKAGES) \
		&& touch $(HUB_LIBS)/.installed; } || echo "hub-libs: not installed; the tests of torchvision and timm models skip"

demo: setup
	$(PY) examples/models/resnet18.py

test: setup hub-libs
	$(PY) -m ruff check ember tests benchmarks examples
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadscope

lint: setup
	$(PY) -m ruff check ember tests benchmarks examples

bench: setup
	$(PY) -m pip install -q -e ".[test,bench]"
	$(PY) benchmarks/gemm.py
	$(PY) benchmarks/compare.py
