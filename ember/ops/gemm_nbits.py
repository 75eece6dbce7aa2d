"""gemm_nbits(x, codes, scales[, offsets][, bias]; bits, group, n, offsets): x w + bias for a
float32 x (M, K) and a weight-only quantized w (K, n), int8 per output channel (group 0) or per
group of `group` rows, or int4 per group, in the packed layout of ember.tir.nbits (codes in panels of 32 columns, scales
and bias over the N' padded columns). The weight stays in its codes: what a language model's
linear layers read per token is a quarter (int8) or an eighth (int4) of their float32 bytes.

The kernel is one te.extern: a parallel loop over (block of GEMM_NBITS_ROWS rows, panel) calls
the gemm_nbits routine (ember.tir.routines; its C in ember.codegen.c_gemm_nbits), which
dequantizes in registers (a GEMV) or into one panel-sized tile (more rows). Pattern opaque.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import Var, as_int, const, min_
from ..tir.nbits import BITS, GROUPS, PANEL, dequantize, panels
from ..tir.routines import GEMM_NBITS
from ..tir.stmt import CallRoutine, For, Pointer
from ..tir.work import PARALLEL_MIN_WORK
from .common import te_shape
from .registry import OpDef, OpTypeError, register

GEMM_NBITS_ROWS = 64  # rows of x per call: a prefill's dequantized panel serves this many


def _infer(types, attrs):
    bits, group, n = attrs["bits"], attrs["group"], attrs["n"]
    x, codes, scales = types[:3]
    name = "gemm_nbits"
    if bits not in BITS:
        raise OpTypeError(f"{name}: bits must be one of {BITS}, got {bits!r}")
    if group not in GROUPS and not (bits == 8 and group == 0):
        raise OpTypeError(f"{name}: the group must be one of {GROUPS} (int8 also 0: per channel), got {group!r}")
    if x.dtype != "float32" or x.rank != 2:
        raise OpTypeError(f"{name}: x must be float32 (M, K), got {x.dtype} {x.shape}")
    k = x.shape[1]
    if not isinstance(n, int) or n < 1 or not isinstance(k, int):
        raise OpTypeError(f"{name}: n and K must be static, got n={n!r}, x {x.shape}")
    width = PANEL if bits == 8 else PANEL // 2
    want = (panels(n), k, width)
    code_dtype = "int8" if bits == 8 else "uint8"
    if codes.dtype != code_dtype or codes.shape != want:
        raise OpTypeError(f"{name}: int{bits} codes must be {code_dtype} {want}, got {codes.dtype} {codes.shape}")
    cols = panels(n) * PANEL
    if group and k % group:
        raise OpTypeError(f"{name}: K = {k} is not a multiple of the group size {group}")
    per_group = (k // group, cols) if group else (cols,)
    extra = list(types[3:])
    if attrs["offsets"]:
        if bits == 8 or not extra:
            raise OpTypeError(f"{name}: offsets (zero points) are int4's, as its fourth input")
        per = [scales, extra.pop(0)]
    else:
        per = [scales]
    for t in per:
        if t.dtype != "float32" or t.shape != per_group:
            raise OpTypeError(f"{name}: scales and offsets must be float32 {per_group}, got {t.dtype} {t.shape}")
    if extra and (extra[0].dtype != "float32" or extra[0].shape != (cols,)):
        raise OpTypeError(f"{name}: bias must be float32 ({cols},), got {extra[0].dtype} {extra[0].shape}")
    if len(extra) > 1:
        raise OpTypeError(f"{name}: takes x, codes, scales[, offsets][, bias]; got {len(types)} inputs")
    return [TensorType((x.shape[0], n), "float32")]


def weight(inputs, attrs) -> np.ndarray:
    """The (K, n) float32 weight of the codes, scales (and offsets) of a node's inputs."""
    offsets = inputs[3] if attrs["offsets"] else None
    return dequantize(inputs[1], inputs[2], offsets, attrs["bits"])[:, :attrs["n"]]


def _reference(inputs, attrs):
    y = inputs[0].astype(np.float64) @ weight(inputs, attrs).astype(np.float64)
    if len(inputs) == 4 + attrs["offsets"]:
        y = y + inputs[-1][:attrs["n"]]
    return [y.astype(np.float32)]


def _compute(inputs, attrs, out_types):
    x, codes, scales = inputs[:3]
    bits, n = attrs["bits"], attrs["n"]
    has_bias = len(inputs) == 4 + attrs["offsets"]
    k = as_int(x.shape[1])
    (m, _) = te_shape(out_types[0], inputs)
    count = panels(n)
    rows = as_int(m)
    blocks = const(-(-rows // GEMM_NBITS_ROWS)) if rows is not None else (m + GEMM_NBITS_ROWS - 1) // GEMM_NBITS_ROWS
    width = PANEL if bits == 8 else PANEL // 2
    cols = count * PANEL

    def build(bufs, outs):
        (out,) = outs
        t = Var("tile", dt.INDEX_DTYPE)
        p, b = t % count, t // count
        m0 = b * GEMM_NBITS_ROWS
        reads = [Pointer(bufs[0], m0 * k), Pointer(bufs[1], p * (k * width)), Pointer(bufs[2], p * PANEL)]
        reads += [Pointer(buf, p * PANEL) for buf in bufs[3:]]
        scalars = (min_(const(GEMM_NBITS_ROWS), m - m0), const(k), min_(const(PANEL), n - p * PANEL), const(k),
                   const(n), const(cols))
        params = (("bits", bits), ("group", attrs["group"]), ("offsets", bool(attrs["offsets"])),
                  ("bias", has_bias), ("lanes", attrs["lanes"]))
        call = CallRoutine(GEMM_NBITS, params, tuple(reads), (Pointer(out, m0 * n + p * PANEL),), scalars)
        return For(t, const(0), blocks * count, kind, call)

    # threads where the work pays for them (a few vector FMAs of a small model's GEMV do not)
    fmas = None if rows is None else rows * k * cols // 16
    kind = "parallel" if fmas is None or fmas >= PARALLEL_MIN_WORK else "serial"

    return te.extern([((m, const(n)), "float32")], list(inputs), build, name="gemm_nbits")


register(OpDef(
    name="gemm_nbits",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"bits": None, "group": 0, "n": None, "offsets": False},
    num_inputs=(3, 5),
    doc="x w + bias with w weight-only quantized (int8 per channel or group, int4 per group) in packed panels.",
    lanes=True,
))
