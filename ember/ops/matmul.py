"""Matrix products: `matmul(a, b)` with NumPy semantics (1-D operands promoted and the added
dimension removed, batch dimensions broadcast) and `gemm(a, b, c?)` = alpha * a' @ b' + beta * c
(ONNX Gemm: 2-D, a' and b' optionally transposed, c broadcast to the result). gemm's b may
also come in panels (b_panels=P > 0, set by ember.passes.pack_weights on constant weights): b of
shape (N / P, K, P), panel p holding columns p*P .. p*P + P - 1 of the (K, N) matrix, so that the
register tile of P columns reads its k-th row of b next to its (k-1)-th, the weights packed once at
compile time instead of read N floats apart.

The te compute accumulates a @ b in a stage tagged "matmul" whose last axis the schedule
vectorizes, so the b operand is read along that axis. When b would be read across it (gemm
with trans_b and many rows) or its columns do not fill whole vectors, b is first copied into a
(K, N padded to a multiple of L, or of L/2 for fewer than L rows; L the target's fp32 lanes,
attrs["lanes"]) panel, a PACK stage, and the result is cut back to N. float16 accumulates in
float32. `tf32` (set by ember.passes.tf32_products): the operands are TF32 values, which a GPU
multiplies on Tensor Cores as TF32; the compute and the reference are the float32 product's.

Schedules (tiling.tile_rows_cols): an mr x nr register tile of the output (up to 12 x 32); a
single row (a GEMV) in column tiles one panel wide when b comes in panels (gemv_panel_width: its
accumulators in registers, one contiguous stream of b per tile), else in tiles of up to 512
columns whose accumulators sit in L1 while rows of b stream by; and gemm with trans_b and a few
rows (a linear layer at batch 1, b not in panels) as dot products along k, with vectors of
partial sums (rfactor) instead of a transposed copy of b.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast, const
from .common import broadcast_index, broadcast_shapes, result_dtype
from .hints import PACK, lanes_dividing
from .registry import OpDef, OpTypeError, register

ANCHOR = "matmul"
GEMV_COLS = 512  # columns of one tile of a single-row product
GEMV_MIN_COLS = 64  # the narrowest tile a single-row product streams its weight rows in at full speed
GEMV_TILES = 8  # column tiles a GEMV is cut into at least, that its threads share evenly
GEMV_PANEL_VECTORS = 8  # vectors of a GEMV's widest panel: its accumulators and x[k] fit AVX2's 16 registers
DOT_ROWS = 32  # gemm with trans_b and fewer rows than this computes dot products along k


def gemv_panel_width(n: int, lanes: int) -> int | None:
    """The panel width of a single row's (K, n) weights for vectors of `lanes` fp32 lanes: the
    widest of GEMV_PANEL_VECTORS, 4, 2 and 1 vectors dividing n into at least GEMV_TILES tiles,
    else the narrowest dividing n (the most tiles); None where no vector divides n (or none
    without vectors). A tile one panel wide keeps its accumulators in registers, each k one
    broadcast of x[k] and one FMA per vector of the panel's row, and streams its panel from end
    to end; 8 vectors (128 columns on AVX-512) ran 5-10% faster than 4 at one thread (AMD EPYC
    Zen 4: fewer instructions per byte in flight)."""
    if lanes < 2:
        return None
    widths = [v * lanes for v in (GEMV_PANEL_VECTORS, 4, 2, 1) if n % (v * lanes) == 0]
    return next((w for w in widths if n // w >= GEMV_TILES), widths[-1] if widths else None)


def _check_numeric(op: str, t: TensorType) -> None:
    if dt.is_bool(t.dtype):
        raise OpTypeError(f"{op}: bool operands are not supported")


def _same_dim(op: str, what: str, x, y) -> None:
    if x != y:
        raise OpTypeError(f"{op}: {what} differ: {x!r} vs {y!r}")


def _infer_matmul(types, attrs):
    a, b = types
    dtype = result_dtype("matmul", a, b)
    _check_numeric("matmul", a)
    if a.rank == 0 or b.rank == 0:
        raise OpTypeError(f"matmul: operands must have rank >= 1, got shapes {a.shape} and {b.shape}")
    _same_dim("matmul", f"the contracted dimensions of {a.shape} @ {b.shape}", a.shape[-1],
              b.shape[-2] if b.rank >= 2 else b.shape[0])
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    rows = (a.shape[-2],) if a.rank >= 2 else ()
    cols = (b.shape[-1],) if b.rank >= 2 else ()
    return [TensorType(batch + rows + cols, dtype)]


def _infer_gemm(types, attrs):
    a, b = types[:2]
    dtype = result_dtype("gemm", *types)
    _check_numeric("gemm", a)
    panels = attrs["b_panels"]
    if a.rank != 2 or b.rank != (3 if panels else 2):
        what = f"a must be 2-D and b (in panels, b_panels={panels}) 3-D" if panels else "a and b must be 2-D"
        raise OpTypeError(f"gemm: {what}, got shapes {a.shape} and {b.shape}")
    m, ka = a.shape[::-1] if attrs["trans_a"] else a.shape
    if panels:
        if attrs["trans_b"] or b.shape[2] != panels:
            raise OpTypeError(f"gemm: b in panels of {panels} columns must have shape (N / {panels}, K, {panels}) "
                              f"and trans_b=False, got shape {b.shape}, trans_b={attrs['trans_b']}")
        kb, n = b.shape[1], b.shape[0] * panels
    else:
        kb, n = b.shape[::-1] if attrs["trans_b"] else b.shape
    _same_dim("gemm", "the contracted dimensions of a and b", ka, kb)
    if len(types) == 3:
        c = types[2]
        if c.rank > 2 or any(d not in (1, want) for d, want in zip(c.shape[::-1], (n, m))):
            raise OpTypeError(f"gemm: c of shape {c.shape} does not broadcast to the result {(m, n)}")
    return [TensorType((m, n), dtype)]


def _unpanel(b: np.ndarray) -> np.ndarray:
    """The (K, N) matrix of weights in panels (N / P, K, P)."""
    return b.transpose(1, 0, 2).reshape(b.shape[1], -1)


def _reference_gemm(inputs, attrs):
    a, b = inputs[:2]
    b = _unpanel(b) if attrs["b_panels"] else b
    a = a.T if attrs["trans_a"] else a
    b = b.T if attrs["trans_b"] else b
    acc = dt.to_numpy(dt.compute_dtype(a.dtype.name))
    out = attrs["alpha"] * (a.astype(acc) @ b.astype(acc))
    if len(inputs) == 3:
        out = out + attrs["beta"] * inputs[2].astype(acc)
    return [np.asarray(out).astype(a.dtype)]


def _reference_matmul(inputs, attrs):
    a, b = inputs
    acc = dt.to_numpy(dt.compute_dtype(a.dtype.name))
    return [np.asarray(np.matmul(a.astype(acc), b.astype(acc))).astype(a.dtype)]


def _broadcast_te(x, y):
    rank = max(len(x), len(y))
    x, y = (None,) * (rank - len(x)) + tuple(x), (None,) * (rank - len(y)) + tuple(y)
    return [q if p is None or (as_int(p) == 1 and q is not None) else p for p, q in zip(x, y)]


def product(a, b, lanes: int, trans_a: bool = False, trans_b: bool = False, panels: int = 0, tf32: bool = False):
    """The te stages of a' @ b' (a', b' transposed when asked; 1-D operands as in NumPy; with
    `panels`, b is a 2-D operand given in panels of that many columns, see the module docstring),
    packed for vectors of `lanes` fp32 lanes.
    Returns (acc, shape, value): the accumulating stage (tagged ANCHOR; its last axis padded to
    whole vectors where b is packed, float32 for float16 operands), the shape of the
    product, and its value at an index of that shape (None when acc is exactly the product)."""
    rows, cols = a.ndim >= 2, b.ndim >= 2
    k_dim = a.shape[-2] if trans_a else a.shape[-1]
    a_batch, b_batch = (a.shape[:-2], () if panels else b.shape[:-2])
    batch = _broadcast_te(a_batch, b_batch)
    m = (a.shape[-1] if trans_a else a.shape[-2]) if rows else None
    n = (const(as_int(b.shape[0]) * panels) if panels else b.shape[-2] if trans_b else b.shape[-1]) if cols else None
    n_int = as_int(n) if cols else None
    m_int = as_int(m) if rows else 1
    # few rows times b transposed: dot products along k (see _tile_dot) instead of packing b
    dot_lanes = lanes_dividing(as_int(k_dim), (lanes, lanes // 2)) \
        if trans_b and not trans_a and m_int is not None and m_int < DOT_ROWS else None
    pad_to = max(1, lanes if m_int is None or m_int >= lanes else lanes // 2)
    # (a single row streams b once: packing it would copy all of b per call, so a GEMV takes b as it is)
    pack = cols and not panels and dot_lanes is None and (
        trans_b or (n_int is not None and n_int % pad_to != 0 and n_int > pad_to and m_int != 1))
    n_acc = n
    if pack:
        if n_int is not None and n_int % pad_to:
            n_acc = const(-(-n_int // pad_to) * pad_to)

        def packed(*i):
            kk, j = i[-2], i[-1]
            value = b[i[:-2] + ((j, kk) if trans_b else (kk, j))]
            return value if n_acc is n else te.if_then_else(j < n, value, te.const(0, b.dtype))

        b = te.compute(tuple(b_batch) + (k_dim, n_acc), packed, name="b_packed", tag=PACK)
        trans_b = False
    acc_dtype = dt.compute_dtype(a.dtype)
    r = te.reduce_axis((0, k_dim), name="k")
    nb = len(batch)

    def element(*i):
        bi = i[:nb]
        row = i[nb] if rows else None
        col = i[-1] if cols else None
        ai = broadcast_index(bi, a_batch) + (((r, row) if trans_a else (row, r)) if rows else (r,))
        if panels:
            bj = (col // panels, r, col % panels)
        else:
            bj = broadcast_index(bi, b_batch) + (((col, r) if trans_b else (r, col)) if cols else (r,))
        return te.sum(cast(acc_dtype, a[ai]) * cast(acc_dtype, b[bj]), axis=r)

    shape = list(batch) + ([m] if rows else []) + ([n_acc] if cols else [])
    acc = te.compute(shape, element, name="matmul", tag=ANCHOR,
                     attrs={"rows": rows, "cols": cols, "dot_lanes": dot_lanes, "panels": panels, "tf32": tf32})
    out_shape = list(batch) + ([m] if rows else []) + ([n] if cols else [])
    exact = n_acc is n and acc_dtype == a.dtype
    return acc, out_shape, None if exact else (lambda *i: cast(a.dtype, acc[i]))


def _compute_matmul(inputs, attrs, out_types):
    acc, shape, value = product(*inputs, attrs["lanes"], tf32=attrs["tf32"])
    return [acc if value is None else te.compute(shape, value, name="matmul_out")]


def _compute_gemm(inputs, attrs, out_types):
    a, b = inputs[:2]
    acc, shape, value = product(a, b, attrs["lanes"], attrs["trans_a"], attrs["trans_b"], attrs["b_panels"],
                                attrs["tf32"])
    alpha, beta = attrs["alpha"], attrs["beta"]
    c = inputs[2] if len(inputs) == 3 else None
    if c is None and alpha == 1 and value is None:
        return [acc]

    def element(i, j):
        v = acc[i, j] if alpha == 1 else acc[i, j] * alpha
        if c is not None:
            cv = cast(acc.dtype, c[broadcast_index((i, j), c.shape)])
            v = v + (cv if beta == 1 else cv * beta)
        return cast(a.dtype, v)

    return [te.compute(shape, element, name="gemm")]


register(OpDef(
    name="matmul",
    infer=_infer_matmul,
    reference=_reference_matmul,
    compute=_compute_matmul,
    pattern="out_elementwise_fusable",
    attrs={"tf32": False},
    num_inputs=(2, 2),
    doc="NumPy matmul: 1-D operands promoted, batch dimensions broadcast.",
    lanes=True,
))

register(OpDef(
    name="gemm",
    infer=_infer_gemm,
    reference=_reference_gemm,
    compute=_compute_gemm,
    pattern="out_elementwise_fusable",
    attrs={"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False, "b_panels": 0, "tf32": False},
    num_inputs=(2, 3),
    doc="alpha * a' @ b' + beta * c (ONNX Gemm); b_panels > 0: b in panels (N / P, K, P).",
    lanes=True,
))
