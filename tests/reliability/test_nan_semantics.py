"""NaN, infinities, signed zeros and masked rows as torch (and ONNX, where it differs) defines them,
compiled and interpreted (docs/operators.md says which each operator follows):

- scaled-dot-product attention over a row whose keys are all masked out (a bool mask, or -inf added)
  is 0, as torch 2.13 gives; it was NaN (0 / 0 in the softmax);
- torch's pow of a float to 0.5 or -0.5 is its sqrt or rsqrt (NaN for -inf, -0 for -0), and C's pow of
  -inf or -0 to a non-integer (1.5) is positive: ember gave inf, -inf and -0;
- torch's sign of NaN is 0, ONNX's (NumPy's) NaN;
- topk ranks NaN above every number (torch's order): a row holding NaN gave garbage and read past
  its end (an index equal to the row's length), so it runs in a child process;
- a linear layer of int8 or int4 weights whose input rows are quantized to int8 gives a row of NaN
  for a row holding a NaN or an infinity, as float32 gives for a NaN (a finite row before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember

F = torch.nn.functional


class Attention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", ["c", "python"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # fused, and staged
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_over_fully_masked_rows_is_zero(kind, dtype, target):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, dtype=dtype, generator=g) for n in (6, 5, 5))
    keep = torch.rand(6, 5, generator=g) < 0.6
    keep[1], keep[4] = False, False  # two rows with no key
    keep[2] = True
    mask = keep if kind == "bool" else torch.where(keep, torch.randn(6, 5, dtype=dtype, generator=g), -torch.inf)
    want = Attention()(q, k, v, mask)
    got = ember.compile(Attention(), (q, k, v, mask), target=target)(q, k, v, mask)
    assert torch.equal(want[:, :, [1, 4]], torch.zeros_like(want[:, :, [1, 4]]))  # torch's own answer
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


class Powers(torch.nn.Module):
    def forward(self, x):
        return (torch.pow(x, 0.5), torch.pow(x, -0.5), torch.pow(x, 1.5), torch.pow(x, 3.0), torch.pow(x, -1.0),
                torch.pow(x, 2.5), torch.sign(x))


@pytest.mark.parametrize("target", ["c", "python"])
def test_powers_and_sign_of_special_values_match_torch(target):
    special = [-np.inf, -4.0, -1.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, np.inf, np.nan]
    x = torch.tensor(special * 3 + list(np.random.default_rng().standard_normal(7)), dtype=torch.float32)
    want = Powers()(x)
    got = ember.compile(Powers(), (x,), target=target)(x)
    for k, (w, o) in enumerate(zip(want, got)):
        w, o = w.numpy(), o.numpy()
        np.testing.assert_allclose(o, w, rtol=2e-7, atol=0, err_msg=f"output {k}")
        finite = np.isfinite(w) & (w == 0)
        np.testing.assert_array_equal(np.signbit(o[finite]), np.signbit(w[finite]), err_msg=f"output {k}: zeros' signs")


def test_onnx_sign_of_nan_is_nan():
    node = helper.make_node("Sign", ["x"], ["y"])
    graph = helper.make_graph([node], "sign", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.array([np.nan, -2.0, 0.0, 3.0], "float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for target in ("c", "python"):
        np.testing.assert_array_equal(ember.compile(model, target=target)(x), want)


def test_topk_over_nan_ranks_it_first(python):
    python("""
        import numpy as np, torch, ember

        class TopK(torch.nn.Module):
            def __init__(self, largest):
                super().__init__()
                self.largest = largest

            def forward(self, x):
                return torch.topk(x, 4, largest=self.largest)

        rng = np.random.default_rng()
        x = rng.standard_normal((8, 33)).astype("float32")
        x[0, 5] = x[1, [0, 7, 9]] = x[2, :] = x[3, -1] = np.nan
        x[4, 3], x[4, 6] = np.inf, -np.inf
        x[5, [1, 2]] = np.nan; x[5, 3] = np.inf
        t = torch.from_numpy(x)
        for largest in (True, False):
            want_v, want_i = TopK(largest)(t)
            for target in ("c", "python"):
                got_v, got_i = ember.compile(TopK(largest), (t,), target=target)(t)
                np.testing.assert_array_equal(got_v.numpy(), want_v.numpy())
                assert (0 <= got_i.numpy()).all() and (got_i.numpy() < 33).all()
                np.testing.assert_array_equal(x[np.arange(8)[:, None], got_i.numpy()], want_v.numpy())
                ties = ~np.isnan(want_v.numpy())  # (torch orders NaNs among themselves as it likes)
                np.testing.assert_array_equal(got_i.numpy()[ties], want_i.numpy()[ties])
        print("ok")
    """, timeout=300).assert_ok()


@pytest.fixture(scope="module", params=[{"weights": "int8"}, {"weights": "int4"},
                                        {"weights": "int4", "zero_points": True, "group_size": 64}],
                ids=["int8", "int4", "int4_zp_g64"])
def quantized_linear(request):
    torch.manual_seed(0)
    model = torch.nn.Linear(128, 64).eval()
    x = torch.randn(5, 128)
    m = torch.export.Dim("m", min=1, max=16)
    return model, ember.compile(model, (x,), dynamic_shapes=({0: m},), **request.param)


@given(rows=st.integers(1, 9), data=st.data())
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_a_quantized_linear_keeps_a_nan_or_infinity_of_its_input(quantized_linear, rows, data):
    """x's rows quantized to int8 for the int8 and int4 weights' products (a decode step's groups,
    a prefill's rows): a row holding a NaN or an infinity gives a row of NaN (float32's for a NaN,
    docs/operators.md; where x stays float32, an infinity gives torch's +-inf) and the other rows
    as they were; its scale was 1 or inf and its codes those of a row of zeros, so the row came out
    finite (a NaN lost, or 1.7e8 for an infinity)."""
    model, compiled = quantized_linear
    x = torch.randn(rows, 128)
    clean = np.asarray(compiled(x))
    r, k = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, 127))
    x[r, k] = bad = data.draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    got = np.asarray(compiled(x))
    with torch.no_grad():
        want = model(x).numpy()
    assert not np.isfinite(got[r]).any() and not np.isfinite(want[r]).any(), got[r]
    assert np.isnan(got[r]).all() or not np.isnan(bad) and np.array_equal(got[r], want[r]), (got[r], want[r])
    np.testing.assert_array_equal(np.delete(got, r, axis=0), np.delete(clean, r, axis=0))
