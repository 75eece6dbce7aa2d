"""Fixtures of the tile-language tests: a fresh random generator, the tutorials of
examples/triton loaded as modules (each test module its own copies), and launches for target
"cuda" interpreted with GPU semantics (tile_cuda.py)."""
import importlib.util
import pathlib

import numpy as np
import pytest

TUTORIALS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "triton"


@pytest.fixture(scope="module")
def tutorials(request):
    """{stem: module} of the numbered tutorials, loaded under the requesting module's name."""
    prefix = request.module.__name__.rpartition(".")[2]
    loaded = {}
    for path in sorted(TUTORIALS.glob("0*.py")):
        spec = importlib.util.spec_from_file_location(f"{prefix}_{path.stem}", path)
        loaded[path.stem] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded[path.stem])
    return loaded


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def on_cuda(monkeypatch):
    """Launches compiled for "cuda" (interpret_cuda.target: the default GPU's unless a test names
    another) and interpreted; the CUDA C of each in the returned list."""
    from tile_cuda import CUDA, interpret_cuda

    from ember.triton import compiler

    interpret_cuda.launch, interpret_cuda.sources, interpret_cuda.target = [], [], CUDA
    monkeypatch.setattr(compiler, "launch", interpret_cuda)
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return interpret_cuda.sources
