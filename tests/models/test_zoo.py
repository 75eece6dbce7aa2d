"""The model zoo, compiled by ember and compared with torch eager (fp32, rtol = atol = 1e-4).

Reduced-size variants for the breadth; one full-size test per model; the reduced ones for an
AVX2-only x86 target too (another machine's vectors, run here)."""

import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ember
from ember.target import Target

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


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 target")
@pytest.mark.parametrize("name", sorted(ZOO))
def test_small_variant_for_an_avx2_target_matches_torch(name):
    """Code for an AVX2 machine (8 float lanes, no AVX-512) runs here and agrees with torch."""
    avx2 = Target.x86("avx2")
    if avx2.missing():
        pytest.skip(f"this machine lacks {avx2.missing()}")
    model, inputs = ZOO[name](small=True)
    cm = check(model, inputs, target=avx2)
    assert cm.spec.target["vector_bytes"] == 32
    types = re.findall(r"\b(?:float|u?int)(8|16|32|64)x(\d+)\b", cm.source)  # the C vector types
    vectors = {(int(bits), int(lanes)) for bits, lanes in types}
    assert (32, 8) in vectors and all(bits * lanes <= 256 for bits, lanes in vectors)  # one AVX2 register at most
    if shutil.which("objdump"):  # the machine code itself: no AVX-512 register
        code = subprocess.run(["objdump", "-d", str(cm.library_path)], capture_output=True, text=True).stdout
        assert "ymm" in code and "zmm" not in code


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
    """GPT-2's reduced variant (attention, layer norm, GELU through dynamo's graph): a third of
    MobileNetV2's compile time; conv, batch norm and pooling under torch.compile are
    tests/frontend/test_torch_compile.py's."""
    model, inputs = ZOO["gpt2_small"](small=True)
    compiled = torch.compile(model, backend="ember")
    with torch.no_grad():
        np.testing.assert_allclose(compiled(*inputs).numpy(), model(*inputs).numpy(), rtol=RTOL, atol=ATOL)
