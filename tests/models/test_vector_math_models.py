"""The zoo models' kernels, and the operators built on exp, log, tanh, erf and sigmoid, compute
their math on whole vectors (ember/codegen/c_vmath.py): no libm call lane by lane."""

import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ember
import ember.compiler
from ember.codegen.c import CRenderer
from ember.codegen.c_prelude import CPrelude
from ember.codegen.c_vmath import VECTOR_MATH

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import ZOO  # noqa: E402

# how a lane-by-lane helper is generated (CPrelude.lanewise): `for (...) r[l] = tanhf(x[l]);`
LANE_LOOP = re.compile(r"for \(int l = 0; l < \d+; \+\+l\) r\[l\] = (.*);")
LIBM = {f + suffix for f in CRenderer.MATH_FUNCS.values() for suffix in ("", CRenderer.MATH_FLOAT_SUFFIX)}
# libm's float functions that c_vmath replaces: none of them may be called at all in float32 code
REPLACED = {CRenderer.MATH_FUNCS[name] + CRenderer.MATH_FLOAT_SUFFIX for name in VECTOR_MATH["float32"]
            if name in CRenderer.MATH_FUNCS}


def lane_calls(source: str) -> set[str]:
    """The libm functions that the source calls lane by lane."""
    return {f for body in LANE_LOOP.findall(source) for f in re.findall(r"(\w+)\(", body)} & LIBM


class _Rendered(Exception):
    """Stops compilation once the C source is rendered (the test reads it; no C compiler runs)."""


def rendered_source(model, inputs, monkeypatch) -> str:
    def capture(source, **_):
        raise _Rendered(source)

    monkeypatch.setattr("ember.backends.c.build_library", capture)  # (where the C backend builds)
    with pytest.raises(_Rendered) as rendered:
        ember.compile(model, example_inputs=inputs)
    return rendered.value.args[0]


def test_lane_calls_finds_libm_calls_lane_by_lane():
    lib = CPrelude(CRenderer.SCALAR_TYPES)
    lib.lanewise("h", "float32x8", "float32x8 x", 8, "1.0f / sqrtf(x[l])")
    lib.lanewise("g", "float32x8", "float32x8 x", 8, "erff(x[l])")
    assert lane_calls(lib.text()) == {"sqrtf", "erff"}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_kernels_call_no_libm_lane_by_lane(name, monkeypatch):
    model, inputs = ZOO[name](small=True)
    source = rendered_source(model, inputs, monkeypatch)
    assert not lane_calls(source), f"{name}: libm called lane by lane: {sorted(lane_calls(source))}"
    assert not {f for f in REPLACED if re.search(rf"\b{f}\(", source)}
    if name in ("gpt2_small", "bert_base", "mlp"):  # their GELU is vector math
        assert re.search(r"ember_(tanh|erf)_float32x\d+\(", source)


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


OPERATORS = {
    "gelu": (F.gelu, "erf"),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "tanh"),
    # x**3 is x * x * x (ember.passes.algebraic), no pow
    "gelu_tanh_by_hand": (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
                          "tanh"),
    "pow": (lambda x: (x * x + 1) ** 2.5, "pow"),
    "silu": (F.silu, "sigmoid"),
    "sigmoid": (torch.sigmoid, "sigmoid"),
    "softplus": (F.softplus, "log1p"),
    "elu": (F.elu, "expm1"),
    "softmax": (lambda x: torch.softmax(x, -1), "exp"),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), "log"),
    "exp": (torch.exp, "exp"),
    "log": (lambda x: torch.log(x * x + 1), "log"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_operators_reach_vector_math(op, dtype, monkeypatch):
    fn, helper = OPERATORS[op]
    x = torch.randn(4, 96, dtype=dtype)
    source = rendered_source(Fn(fn), (x,), monkeypatch)
    assert not lane_calls(source)
    assert not {f for f in REPLACED if re.search(rf"\b{f}\(", source)}
    assert re.search(rf"ember_{helper}_float32(x\d+)?\(", source), f"{op} does not call ember_{helper}"
