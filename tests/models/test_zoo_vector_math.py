"""The zoo models' kernels compute their math on whole vectors: no libm call lane by lane."""

import re
import sys
from pathlib import Path

import pytest

import ember
import ember.compiler
from ember.codegen.c import CRenderer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import ZOO  # noqa: E402

# how a lane-by-lane helper is generated (CPrelude.lanewise): `for (...) r[l] = tanhf(x[l]);`
LANE_LOOP = re.compile(r"for \(int l = 0; l < \d+; \+\+l\) r\[l\] = (.*);")
LIBM = {f + suffix for f in CRenderer.MATH_FUNCS.values() for suffix in ("", CRenderer.MATH_FLOAT_SUFFIX)}


def lane_calls(source: str) -> set[str]:
    """The libm functions that the source calls lane by lane."""
    return {f for body in LANE_LOOP.findall(source) for f in re.findall(r"(\w+)\(", body)} & LIBM


class _Rendered(Exception):
    """Stops compilation once the C source is rendered (the test reads it; no C compiler runs)."""


def _source(model, inputs, monkeypatch) -> str:
    def capture(source, **_):
        raise _Rendered(source)

    monkeypatch.setattr(ember.compiler, "build_library", capture)
    with pytest.raises(_Rendered) as rendered:
        ember.compile(model, example_inputs=inputs)
    return rendered.value.args[0]


def test_lane_call_pattern_matches_a_libm_call_lane_by_lane():
    from ember.codegen.c_prelude import CPrelude

    lib = CPrelude(CRenderer.SCALAR_TYPES)
    lib.lanewise("h", "float32x8", "float32x8 x", 8, "1.0f / sqrtf(x[l])")
    lib.lanewise("g", "float32x8", "float32x8 x", 8, "erff(x[l])")
    assert lane_calls(lib.text()) == {"sqrtf", "erff"}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_kernels_call_no_libm_lane_by_lane(name, monkeypatch):
    model, inputs = ZOO[name](small=True)
    source = _source(model, inputs, monkeypatch)
    calls = lane_calls(source)
    assert not calls, f"{name}: libm called lane by lane: {sorted(calls)}"
    if name in ("gpt2_small", "bert_base", "mlp"):  # their GELU is vector math
        assert re.search(r"ember_(tanh|erf)_float32x\d+\(", source)
