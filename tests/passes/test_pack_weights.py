"""Compile-time weight packing (ember.passes.pack_weights): linear layers whose constant weights
go into the register tile's panels compute what NumPy computes in float64 (row counts the tile
does not divide, K of no particular multiple, the fused epilogues bias, bias + GELU, bias +
residual; a symbolic number of rows, one compile for every count; a single row, a GEMV, in its
own wider panels at one and two threads), and the products the pass leaves alone stay as they
were."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_check import check_same

import ember
from ember.graph import Graph, TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.matmul import gemv_panel_width
from ember.ops.nodes import add_op
from ember.passes.pack_weights import MIN_WEIGHTS, pack_weights
from ember.target import Target, as_target

RNG = np.random.default_rng()
RTOL, ATOL = 1e-4, 2e-4  # fp32 accumulation over K <= 2100 of terms of order 1 / sqrt(K)
ERF = np.frompyfunc(math.erf, 1, 1)


def _rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


class Linear(torch.nn.Module):
    def __init__(self, k, n, epilogue):
        super().__init__()
        self.epilogue = epilogue
        self.fc = torch.nn.Linear(k, n, bias=epilogue != "bare")

    def forward(self, x, res=None):
        y = self.fc(x)
        if self.epilogue == "bias+gelu":
            y = torch.nn.functional.gelu(y)
        return y + res if self.epilogue == "bias+res" else y


def _reference(model, x, res):
    """The layer in float64 NumPy."""
    w = model.fc.weight.detach().numpy().astype(np.float64)
    y = x.astype(np.float64) @ w.T
    if model.fc.bias is not None:
        y = y + model.fc.bias.detach().numpy().astype(np.float64)
    if model.epilogue == "bias+gelu":
        y = 0.5 * y * (1.0 + ERF(y / math.sqrt(2.0)).astype(np.float64))
    return y + res if model.epilogue == "bias+res" else y


def _panels(cm) -> list[int]:
    return [n.attrs["b_panels"] for n in cm.graph.nodes if n.op == "gemm"]


@pytest.mark.parametrize("m, k, n, epilogue", [
    (37, 257, 256, "bare"),  # 37 rows: a tail of 5 under 8-row tiles; K = 257 a prime
    (13, 777, 288, "bias"),  # 288 columns: 9 panels of 32
    (3, 300, 320, "bias+gelu"),  # fewer than 4 rows: 64-column panels where they divide (320 = 5 * 64)
    (2, 260, 288, "bias+res"),  # ... and 32-column ones where they do not
    (64, 256, 512, "bias+gelu"),
    (100, 2100, 64, "bias+res"),  # long rows: blocks of 56 and 44 rows (at most 64 fit a 1 MiB L2)
])
def test_packed_linear_layers_match_float64(m, k, n, epilogue):
    model = Linear(k, n, epilogue).eval()
    x, res = _rand(m, k), _rand(m, n)
    inputs = (x, res) if epilogue == "bias+res" else (x,)
    cm = ember.compile(model, tuple(torch.from_numpy(v) for v in inputs))
    width = 64 if m < 4 and n % 64 == 0 else 32
    assert _panels(cm) == [width]
    np.testing.assert_allclose(cm(*inputs), _reference(model, x, res), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("m, k, n", [
    (1, 300, 500),  # a single row (GEMV) whose columns no vector divides (under GEMV_COLS: not padded)
    (16, 512, 100),  # N not a multiple of a panel
    (16, 64, 64),  # small weights
])
def test_what_stays_unpacked(m, k, n):
    model = Linear(k, n, "bias").eval()
    x = _rand(m, k)
    cm = ember.compile(model, (torch.from_numpy(x),))
    assert _panels(cm) == [0]
    np.testing.assert_allclose(cm(x), _reference(model, x, None), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("k, n, epilogue, width", [
    (257, 2304, "bias", 128),  # GPT-2's QKV columns: 18 panels of 8 AVX-512 vectors, K a prime
    (300, 768, "bare", 64),  # 6 panels of 128 are fewer than GEMV_TILES: 12 of 64
    (129, 1000, "bias+gelu", 128),  # pad_gemv's 1024 columns, the slice back to 1000 after
    (520, 160, "bias+res", 16),  # 5 panels of 32: 10 of 16
    (2100, 48, "bias", 16),  # 3 panels, the narrowest
])
def test_gemv_panels_match_float64(k, n, epilogue, width):
    """A single row's weights in the GEMV's panels (ember.ops.matmul.gemv_panel_width), at one and
    two threads: each thread's tiles read their panels from end to end."""
    model = Linear(k, n, epilogue).eval()
    x, res = _rand(1, k), _rand(1, n)
    inputs = (x, res) if epilogue == "bias+res" else (x,)
    cm = ember.compile(model, tuple(torch.from_numpy(v) for v in inputs), target=Target(vector_bytes=64))
    assert _panels(cm) == [width]
    for threads in (1, 2):
        cm.num_threads = threads
        np.testing.assert_allclose(cm(*inputs), _reference(model, x, res), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{threads} threads")


@settings(max_examples=6, deadline=None)
@given(k=st.integers(1, 600), vectors=st.integers(16, 160), trans_a=st.booleans(), trans_b=st.booleans(),
       seed=st.integers(0, 2**31))
def test_gemv_panels_of_any_shape_match_numpy(k, vectors, trans_a, trans_b, seed):
    """gemm(x[1, K], W) over K and N = 8 * `vectors` columns (AVX2's vectors: panels of 64 down to
    8 columns), x and W given as they are or transposed (ONNX Gemm's transA and transB), fresh
    random values, one and two threads."""
    rng = np.random.default_rng(seed)
    n = 8 * vectors
    k = max(k, -(-MIN_WEIGHTS // n))  # weights the pass packs
    w = rng.uniform(-1, 1, (n, k) if trans_b else (k, n)).astype("float32")
    g = Graph()
    x = g.add_input("x", TensorType((k, 1) if trans_a else (1, k)))
    y, = add_op(g, "gemm", [x, g.add_constant(w, "w")], {"trans_a": trans_a, "trans_b": trans_b})
    g.set_outputs([y])
    target = Target(vector_bytes=32)
    (node,) = pack_weights(g, target).nodes
    assert node.attrs["b_panels"] == gemv_panel_width(n, 8)
    cm = ember.compile(g, target=target)
    xv = rng.uniform(-1, 1, x.type.shape).astype("float32")
    want = (xv.T if trans_a else xv).astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)
    for threads in (1, 2):
        cm.num_threads = threads
        np.testing.assert_allclose(cm(xv), want, rtol=RTOL, atol=ATOL, err_msg=f"{threads} threads")


def test_gemv_panel_widths():
    """Up to 8 vectors (AVX-512: 128 columns, AVX2: 64) in at least GEMV_TILES panels, else the
    most panels; none where no vector divides the columns, nor without vectors."""
    assert [gemv_panel_width(n, 16) for n in (2304, 768, 1024, 160, 48, 500)] == [128, 64, 128, 16, 16, None]
    assert [gemv_panel_width(n, 8) for n in (2304, 768, 272, 24)] == [64, 64, 16, 8]
    assert gemv_panel_width(2304, 1) is None


def test_symbolic_rows_are_packed():
    """A product over any number of rows (a prefill compiled for every length) takes panels too."""
    g = Graph()
    x = g.add_input("x", TensorType(("m", 256)))
    y, = add_op(g, "matmul", [x, g.add_constant(_rand(256, 512), "w")])
    g.set_outputs([y])
    (node,) = pack_weights(g).nodes
    assert node.op == "gemm" and node.attrs["b_panels"] == 32


def test_panels_are_sized_to_the_targets_vectors():
    """Two vectors of the target per panel (four for fewer than 4 rows); no panels without vectors."""
    def panels(rows: int, target: Target) -> int:
        g = Graph()
        x = g.add_input("x", TensorType((rows, 256)))
        y, = add_op(g, "matmul", [x, g.add_constant(_rand(256, 512), "w")])
        g.set_outputs([y])
        return pack_weights(g, target).nodes[0].attrs.get("b_panels", 0)

    assert panels(16, Target(vector_bytes=64)) == 32 and panels(2, Target(vector_bytes=64)) == 64
    assert panels(16, Target(vector_bytes=32)) == 16 and panels(2, Target(vector_bytes=32)) == 32
    assert panels(16, as_target("python")) == 0


def test_packed_for_an_avx2_target_matches_float64():
    avx2 = Target.x86("avx2")
    if avx2.missing():
        pytest.skip(f"this machine lacks {avx2.missing()}")
    model = Linear(300, 272, "bias+gelu").eval()  # 272 columns: 17 AVX2 panels of 16, no AVX-512 ones of 32
    x = _rand(24, 300)
    cm = ember.compile(model, (torch.from_numpy(x),), target=avx2)
    assert _panels(cm) == [16]
    np.testing.assert_allclose(cm(x), _reference(model, x, None), rtol=RTOL, atol=ATOL)


def _symbolic_layer(k: int, n: int, epilogue: str) -> Graph:
    """x (m rows, a symbol) @ w, then the epilogue: + bias, GELU (erf or tanh), + a residual."""
    g = Graph()
    x = g.add_input("x", TensorType(("m", k)))
    y, = add_op(g, "matmul", [x, g.add_constant(_rand(k, n), "w")])
    if epilogue != "bare":
        y, = add_op(g, "add", [y, g.add_constant(_rand(n), "bias")])
    if epilogue.startswith("gelu"):
        y, = add_op(g, "gelu", [y], {"approximate": epilogue.removeprefix("gelu_")})
    if epilogue == "residual":
        y, = add_op(g, "add", [y, g.add_input("res", TensorType(("m", n)))])
    g.set_outputs([y])
    return g


def _layer_float64(g: Graph, epilogue: str, x, res):
    y = x.astype(np.float64) @ g.constants["w"].astype(np.float64)
    if epilogue != "bare":
        y = y + g.constants["bias"]
    if epilogue == "gelu_none":
        y = 0.5 * y * (1.0 + ERF(y / math.sqrt(2.0)).astype(np.float64))
    if epilogue == "gelu_tanh":
        y = 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))
    return y + res if epilogue == "residual" else y


@pytest.mark.parametrize("k, n, epilogue", [
    (257, 288, "bare"),  # K a prime, 9 panels
    (300, 256, "gelu_none"),
    (128, 512, "gelu_tanh"),
    (520, 320, "residual"),
])
def test_symbolic_rows_match_float64(k, n, epilogue):
    """One compile, every row count: full tiles of 8 rows (the copy without guards), a tail of
    each length, a single row, fewer rows than a tile."""
    g = _symbolic_layer(k, n, epilogue)
    cm = ember.compile(g)
    assert _panels(cm) == [32]
    for m in (1, 2, 7, 8, 13, 37, 64):
        x, res = _rand(m, k), _rand(m, n)
        got = cm(x, res) if epilogue == "residual" else cm(x)
        np.testing.assert_allclose(got, _layer_float64(g, epilogue, x, res), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{m} rows")


@pytest.mark.parametrize("trans_a, trans_b", [(False, True), (True, False), (True, True)])
def test_gemm_attributes_kept(trans_a, trans_b):
    """ONNX's Gemm: transposed operands, alpha and beta, a bias broadcast per row."""
    m, k, n = 19, 300, 256
    g = Graph()
    x = g.add_input("x", TensorType((k, m) if trans_a else (m, k)))
    w = g.add_constant(_rand(n, k) if trans_b else _rand(k, n), "w")
    c = g.add_constant(_rand(m, 1), "c")
    y, = add_op(g, "gemm", [x, w, c], {"trans_a": trans_a, "trans_b": trans_b, "alpha": 0.5, "beta": 2.0})
    g.set_outputs([y])
    out = pack_weights(g)
    (node,) = out.nodes
    assert node.attrs["b_panels"] == 32 and not node.attrs["trans_b"]
    assert out.constants[node.inputs[1].name].shape == (n // 32, k, 32)
    check_same(g, out)
    xv = _rand(*x.type.shape)
    a64 = xv.astype(np.float64).T if trans_a else xv.astype(np.float64)
    w64 = g.constants[w.name].astype(np.float64)
    want = 0.5 * a64 @ (w64.T if trans_b else w64) + 2.0 * g.constants[c.name]
    np.testing.assert_allclose(ember.compile(g)(xv), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("b_shape, attrs, message", [
    ((8, 300, 32), {"b_panels": 32, "trans_b": True}, "trans_b=False"),
    ((8, 300, 16), {"b_panels": 32}, "(N / 32, K, 32)"),
    ((300, 256), {"b_panels": 32}, "3-D"),
    ((8, 200, 32), {"b_panels": 32}, "contracted dimensions"),
])
def test_panel_shape_errors(b_shape, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types("gemm", [TensorType((5, 300)), TensorType(b_shape)], attrs)
    assert message in str(e.value)
