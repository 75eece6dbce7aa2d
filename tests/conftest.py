"""Shared test configuration: hypothesis runs derandomized under CI (a failure found there
reproduces exactly), randomized elsewhere (to keep finding new ones); `load_example` imports a
tutorial from examples/ without running it."""

import importlib.util
import os
import pathlib

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"examples.{name}", EXAMPLES / "kernels" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_example():
    """load_example("gemm") is examples/kernels/gemm.py as a module, its main() not run."""
    return _load_example


@pytest.fixture
def examples_dir():
    return EXAMPLES
