"""The paths a user takes to find what went wrong: the loop IR after every lowering pass, passes
switched off one at a time, the interpreter next to the C backend."""

import numpy as np
import pytest

import ember
from ember import te


def scheduled_gemm():
    A = te.placeholder((32, 16), name="A")
    B = te.placeholder((16, 32), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].vectorize(ji)
    s[C].unroll(ii)
    return s, [A, B, C]


def test_print_after_every_pass(capsys):
    s, args = scheduled_gemm()
    ember.lower(s, args, print_after=True)
    err = capsys.readouterr().err
    for name in ("hoist_init", "compact_buffers", "lower_blocks", "flatten", "simplify", "unroll", "vectorize"):
        assert f"# after {name}" in err
    assert "ramp(" in err


def test_print_after_from_environment(capsys, monkeypatch):
    monkeypatch.setenv("EMBER_PRINT_LOWER", "1")
    s, args = scheduled_gemm()
    ember.lower(s, args)
    assert "# after flatten" in capsys.readouterr().err


@pytest.mark.parametrize("skip", [[], ["vectorize"], ["unroll"], ["hoist_init"], ["compact_buffers"],
                                  ["vectorize", "unroll", "hoist_init", "compact_buffers"]])
def test_optional_passes_switch_off_without_changing_results(skip):
    s, args = scheduled_gemm()
    text = str(ember.lower(s, args, skip=skip))
    if "vectorize" in skip:
        assert "ramp(" not in text
    a = np.random.rand(32, 16).astype("float32")
    b = np.random.rand(16, 32).astype("float32")
    for target in ("c", "python"):
        c = np.full((32, 32), np.nan, "float32")
        ember.build(s, args, target=target, skip=skip)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_unknown_or_required_passes_are_named():
    s, args = scheduled_gemm()
    with pytest.raises(ValueError, match="unknown lowering passes \\['fuse'\\]"):
        ember.lower(s, args, skip=["fuse"])
    with pytest.raises(ValueError, match="required for code generation"):
        ember.lower(s, args, skip=["flatten"])


def test_interpreter_source_is_readable_python():
    s, args = scheduled_gemm()
    f = ember.build(s, args, target="python")
    assert "for " in f.source and "def " in f.source
