"""The model zoo, compiled by ember and compared with torch eager (fp32, rtol = atol = 1e-4).

Reduced-size variants for the breadth; one full-size test per model."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import ZOO  # noqa: E402

RTOL = ATOL = 1e-4


def check(model, inputs, **options):
    with torch.no_grad():
        expected = model(*inputs)
    cm = ember.compile(model, example_inputs=inputs, **options)
    got = cm(*inputs)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)
    got_np = cm(*[x.numpy() for x in inputs])  # NumPy in, NumPy out
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, expected.numpy(), rtol=RTOL, atol=ATOL)
    return cm


@pytest.mark.parametrize("opt_level", [0, 2, 3])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_small_variant_matches_torch(name, opt_level):
    model, inputs = ZOO[name](small=True)
    check(model, inputs, opt_level=opt_level)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_full_size_matches_torch(name):
    model, inputs = ZOO[name](small=False)
    check(model, inputs)


def test_saved_model_loads_and_runs_without_recompiling(tmp_path, monkeypatch):
    model, inputs = ZOO["resnet18"](small=True)
    cm = check(model, inputs)
    cm.save(tmp_path / "resnet.ember")
    import ember.compiler

    monkeypatch.setattr(ember.compiler, "compile_graph", lambda *a, **k: pytest.fail("recompiled on load"))
    loaded = ember.load(tmp_path / "resnet.ember")
    with torch.no_grad():
        np.testing.assert_allclose(loaded(*inputs).numpy(), model(*inputs).numpy(), rtol=RTOL, atol=ATOL)


def test_torch_compile_backend_on_a_zoo_model():
    model, inputs = ZOO["mobilenet_v2"](small=True)
    compiled = torch.compile(model, backend="ember")
    with torch.no_grad():
        np.testing.assert_allclose(compiled(*inputs).numpy(), model(*inputs).numpy(), rtol=RTOL, atol=ATOL)
