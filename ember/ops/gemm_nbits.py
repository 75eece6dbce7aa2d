"""gemm_nbits(x, [xq, meta,] codes, scales[, offsets][, bias]; bits, group, n, offsets, act, packed): x w + bias for a
float32 x (M, K) and a weight-only quantized w (K, n), int8 per output channel (group 0) or per
group of `group` rows, or int4 per group, in the packed layout of ember.tir.nbits (codes in panels of 32 columns, scales
and bias over the N' padded columns). The weight stays in its codes: what a language model's
linear layers read per token is a quarter (int8) or an eighth (int4) of their float32 bytes.

The kernel is one te.extern: a parallel loop over (panel, block of GEMM_NBITS_ROWS rows) calls
the gemm_nbits routine (ember.tir.routines; its C in ember.codegen.c_gemm_nbits), which
dequantizes in registers (a GEMV) or into one panel-sized tile (more rows). Pattern opaque.

act "int8" (ember.passes.quantize_rows, for a prefill on VNNI, from act "auto": weights that
ember.compile(weights=...) or a GGUF file quantized, not an ONNX MatMulNBits of an accuracy level
other than 4, which keeps float32): x's rows also come quantized to
uint8 by quantize_rows (xq, meta: its scale per row and sums of 32 columns), and GEMM_NBITS_STREAM
rows or more are computed from them, xq's integers times the codes (ember.codegen.c_gemm_nbits_vnni);
fewer read x. quantize_rows(x) -> (xq, meta) is the routine of the same name (ember.tir.routines).

act "int8_rows" (ember.passes.quantize_rows, for constant codes, which it packs: `packed`, the
products' own layout, ember.tir.nbits.pack_vnni: vpdpbusd's order and each group's column sums,
made once at compile time instead of at every call): the kernel quantizes x's rows itself and
multiplies each block of GEMM_NBITS_ROWS rows by the panels, in one parallel region that the threads
split by blocks, and by panels where the blocks are fewer than the threads (a short prompt on many
cores: ember.tir.nbits_split), every M computed from the int8 rows: the quantization is no parallel
region of its own. Its epilogues
(ember.passes.nbits_epilogues): `residual`, a float32 (M, n) input after the others, added to the
product; glu "silu", the output (M, n / 2) = silu(the first n / 2 columns) * the last n / 2 (a
LLaMA MLP's gate and up projections side by side); `activation` (ACTIVATIONS: "gelu_tanh",
GPT-2's, and "gelu") of every output column, also act int8_groups' (a decode step's GEMV).

act "int8_groups" (ember.passes.quantize_rows, for a decode step's GEMV on VNNI): x's rows come
quantized per group to int8 by quantize_groups(x; group) -> (xq, meta: each group's scale and sum of
xq), the group ember.tir.nbits.row_group's (the weights' group; for int8 per channel 32), and
every row is computed from them (ember.codegen.c_gemv_nbits_vnni): x ~ the group's
scale times xq, the codes times xq in int32 per group. The reference computes the same quantized x
times the dequantized weight.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import Var, as_int, const, min_
from ..tir.nbits import (
    ACTIVATIONS,
    BITS,
    GROUPS,
    PANEL,
    QUANTIZE_BLOCK,
    activate,
    dequantize,
    dequantize_groups,
    int8_products,
    panels,
    quantize_groups,
    quantize_rows,
    row_group,
    unpack_vnni,
    vnni_rows,
)
from ..tir.nbits_split import ROWS_BLOCK
from ..tir.routines import GEMM_NBITS, GEMM_NBITS_STREAM, QUANTIZE_GROUPS, QUANTIZE_ROWS
from ..tir.stmt import CallRoutine, For, Pointer
from ..tir.work import PARALLEL_MIN_WORK
from .common import te_shape
from .registry import OpDef, OpTypeError, register

# rows of x per call: a prefill's dequantized panel serves this many; act int8_rows quantizes this
# many rows together and multiplies them by every panel (32 rows a block cost 3-7% more at one
# thread, every block reading every panel's codes): ember.tir.nbits_split's ROWS_BLOCK
GEMM_NBITS_ROWS = ROWS_BLOCK
# what the products of M >= GEMM_NBITS_STREAM rows multiply: float32 x; int8 rows; "auto": float32
# rows that ember.passes.quantize_rows may turn into int8 ones (the weights' quantization was asked for)
# int8_groups: int8 rows per group of the weights' (quantize_groups), every M computed from them
# int8_rows: x's rows quantized by the kernel itself (quantize_rows' formulas, per block of
# GEMM_NBITS_ROWS rows), the codes packed (pack_vnni), every M computed from them
ACTS = ("float32", "int8", "int8_groups", "int8_rows", "auto")
QUANTIZED = ("int8", "int8_groups")  # the acts whose x comes with its quantized rows (xq, meta)


def _infer(types, attrs):
    bits, group, n = attrs["bits"], attrs["group"], attrs["n"]
    name = "gemm_nbits"
    if attrs["act"] not in ACTS:
        raise OpTypeError(f"{name}: act must be one of {ACTS}, got {attrs['act']!r}")
    if attrs["act"] == "int8":
        if len(types) < 5 or types[1:3] != _quantized_types(types[0]):
            raise OpTypeError(f"{name}: act int8 takes x, then quantize_rows(x)'s xq and meta, "
                              f"{_quantized_types(types[0])}; got {types[1:3]}")
        types = [types[0], *types[3:]]
    if attrs["act"] == "int8_groups":
        k = types[0].shape[1] if types[0].rank == 2 else None
        rows = row_group(group, k) if isinstance(k, int) else 0
        if not rows or len(types) < 5 or types[1:3] != _grouped_types(types[0], rows):
            raise OpTypeError(f"{name}: act int8_groups takes x, then quantize_groups(x)'s xq and meta per group "
                              f"of {rows or 'a static K divisible by 32'}; got x {types[0].shape}, "
                              f"{types[1:3]}")
        types = [types[0], *types[3:]]
    out = n
    if attrs["activation"] is not None and (attrs["activation"] not in ACTIVATIONS or attrs["glu"] or
                                            attrs["act"] not in ("int8_rows", "int8_groups") or attrs["residual"]):
        raise OpTypeError(f"{name}: an activation ({', '.join(ACTIVATIONS)}) is act int8_rows' or int8_groups', "
                              f"without glu or residual; got activation {attrs['activation']!r}, act {attrs['act']!r}")
    if attrs["glu"] is not None:
        if attrs["glu"] != "silu" or attrs["act"] != "int8_rows" or attrs["residual"] or n % (2 * PANEL):
            raise OpTypeError(f"{name}: glu 'silu' is act int8_rows' without a residual, n a multiple of "
                              f"{2 * PANEL}; got glu {attrs['glu']!r}, act {attrs['act']!r}, n {n}, "
                              f"residual {attrs['residual']!r}")
        out = n // 2
    if attrs["residual"]:
        if attrs["act"] != "int8_rows" or len(types) < 4 or types[-1] != TensorType((types[0].shape[0], n), "float32"):
            raise OpTypeError(f"{name}: a residual is act int8_rows' last input, float32 (M, n); got act "
                              f"{attrs['act']!r}, {types[-1] if len(types) > 3 else 'none'}")
        types = types[:-1]
    x, codes, scales = types[:3]
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
    if attrs["packed"] != (attrs["act"] == "int8_rows"):
        raise OpTypeError(f"{name}: packed codes are act int8_rows' and it takes them packed; got act "
                          f"{attrs['act']!r}, packed={attrs['packed']!r}")
    if attrs["packed"]:
        if k % QUANTIZE_BLOCK:
            raise OpTypeError(f"{name}: act int8_rows takes a K that is a multiple of {QUANTIZE_BLOCK}, got {k}")
        want = (panels(n), vnni_rows(k, group, bits), width)
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
    return [TensorType((x.shape[0], out), "float32")]


def _quantized_types(x: TensorType) -> list[TensorType]:
    """The types of quantize_rows(x): xq (M, K) uint8, meta (M, 1 + K / 32) float32."""
    m, k = x.shape
    return [TensorType((m, k), "uint8"), TensorType((m, 1 + k // QUANTIZE_BLOCK), "float32")]


def _grouped_types(x: TensorType, group: int) -> list[TensorType]:
    """The types of quantize_groups(x; group): xq (M, K) int8, meta (M, 2 K / group) float32."""
    m, k = x.shape
    return [TensorType((m, k), "int8"), TensorType((m, 2 * (k // group) if group else 0), "float32")]


def _weights(inputs, attrs) -> list:
    """A node's inputs from the codes on (x and its quantized rows left out, and a residual)."""
    return inputs[3 if attrs["act"] in QUANTIZED else 1:len(inputs) - attrs["residual"]]


def _codes(inputs, attrs) -> np.ndarray:
    """A node's codes in the layout of ember.tir.nbits' panels (packed ones unpacked)."""
    codes = _weights(inputs, attrs)[0]
    return unpack_vnni(codes, attrs["bits"], inputs[0].shape[1]) if attrs["packed"] else codes


def weight(inputs, attrs) -> np.ndarray:
    """The (K, n) float32 weight of the codes, scales (and offsets) of a node's inputs."""
    _, scales, *rest = _weights(inputs, attrs)
    return dequantize(_codes(inputs, attrs), scales, rest[0] if attrs["offsets"] else None,
                      attrs["bits"])[:, :attrs["n"]]


def _reference(inputs, attrs):
    x, w = inputs[0], _weights(inputs, attrs)
    offsets = w[2] if attrs["offsets"] else None
    if attrs["act"] == "int8_groups":
        y = dequantize_groups(inputs[1], inputs[2]) @ weight(inputs, attrs).astype(np.float64)
    elif attrs["act"] == "int8_rows":
        y = int8_products(*quantize_rows(x), _codes(inputs, attrs), w[1], offsets, attrs["bits"])[:, :attrs["n"]]
    elif attrs["act"] == "int8" and x.shape[0] >= GEMM_NBITS_STREAM:
        y = int8_products(inputs[1], inputs[2], w[0], w[1], offsets, attrs["bits"])[:, :attrs["n"]]
    else:
        y = x.astype(np.float64) @ weight(inputs, attrs).astype(np.float64)
    if len(w) == 3 + attrs["offsets"]:
        y = y + w[-1][:attrs["n"]]
    if attrs["residual"]:
        y = y + inputs[-1]
    if attrs["glu"]:  # silu(gate) * up, the products rounded to float32 first as the kernel's are
        gate, up = np.split(y.astype(np.float32).astype(np.float64), 2, axis=1)
        y = gate / (1 + np.exp(-gate)) * up
    return [activate(y, attrs["activation"]).astype(np.float32)]


def _compute(inputs, attrs, out_types):
    if attrs["act"] == "int8_rows":
        return _rows_compute(inputs, attrs, out_types)
    x = inputs[0]
    bits, n = attrs["bits"], attrs["n"]
    act = attrs["act"]
    has_bias = len(_weights(inputs, attrs)) == 3 + attrs["offsets"]
    k = as_int(x.shape[1])
    (m, _) = te_shape(out_types[0], inputs)
    count = panels(n)
    rows = as_int(m)
    blocks = _row_blocks(m)
    width = PANEL if bits == 8 else PANEL // 2
    panel_bytes = (vnni_rows(k, attrs["group"], bits) if attrs["packed"] else k) * width
    cols = count * PANEL

    def build(bufs, outs):
        (out,) = outs
        t = Var("tile", dt.INDEX_DTYPE)
        p, b = t // blocks, t % blocks  # a panel's blocks of rows in a row: its codes read from memory once
        m0 = b * GEMM_NBITS_ROWS
        reads = [Pointer(bufs[0], m0 * k)]
        if act in QUANTIZED:
            meta = 1 + k // QUANTIZE_BLOCK if act == "int8" else 2 * (k // row_group(attrs["group"], k))
            reads += [Pointer(bufs[1], m0 * k), Pointer(bufs[2], m0 * meta)]
            bufs = [bufs[0], *bufs[3:]]
        reads += [Pointer(bufs[1], p * panel_bytes), Pointer(bufs[2], p * PANEL)]
        reads += [Pointer(buf, p * PANEL) for buf in bufs[3:]]
        scalars = (min_(const(GEMM_NBITS_ROWS), m - m0), const(k), min_(const(PANEL), n - p * PANEL), const(k),
                   const(n), const(cols))
        params = (("bits", bits), ("group", attrs["group"]), ("offsets", bool(attrs["offsets"])),
                  ("bias", has_bias), ("lanes", attrs["lanes"])) + ((("act", act),) if act in QUANTIZED else ()) + \
            ((("packed", True),) if attrs["packed"] else ())
        if act == "int8_groups":
            params += (("xgroup", row_group(attrs["group"], k)), ("activation", attrs["activation"]))
        call = CallRoutine(GEMM_NBITS, params, tuple(reads), (Pointer(out, m0 * n + p * PANEL),), scalars)
        return For(t, const(0), blocks * count, kind, call)

    kind = _loop_kind(rows, k, cols)
    return te.extern([((m, const(n)), "float32")], list(inputs), build, name="gemm_nbits")


def _row_blocks(m):
    """The calls of GEMM_NBITS_ROWS rows that cover m rows (a constant where m is static)."""
    rows = as_int(m)
    return const(-(-rows // GEMM_NBITS_ROWS)) if rows is not None else (m + GEMM_NBITS_ROWS - 1) // GEMM_NBITS_ROWS


def _loop_kind(rows: int | None, k: int, cols: int) -> str:
    """Threads where the work pays for them (a few vector FMAs of a small model's GEMV do not)."""
    fmas = None if rows is None else rows * k * cols // 16
    return "parallel" if fmas is None or fmas >= PARALLEL_MIN_WORK else "serial"


def _rows_compute(inputs, attrs, out_types):
    """act int8_rows: one call of the routine, which quantizes the rows and multiplies them by
    every panel in one parallel region of its own (the threads split by blocks of rows, and by
    panels where the blocks are fewer than the threads: ember.tir.nbits_split), the residual
    added as the rows are written."""
    x = inputs[0]
    bits, n, group = attrs["bits"], attrs["n"], attrs["group"]
    k = as_int(x.shape[1])
    (m, _) = te_shape(out_types[0], inputs)
    weights = _weights(inputs, attrs)
    cols = panels(n) * PANEL
    panel_bytes = vnni_rows(k, group, bits) * (PANEL if bits == 8 else PANEL // 2)
    width = n // 2 if attrs["glu"] else n  # the output's columns

    def build(bufs, outs):
        (out,) = outs
        params = (("bits", bits), ("group", group), ("offsets", bool(attrs["offsets"])),
                  ("bias", len(weights) == 3 + attrs["offsets"]), ("residual", bool(attrs["residual"])),
                  ("glu", attrs["glu"]), ("activation", attrs["activation"]), ("act", "int8_rows"), ("k", k))
        scalars = (m, const(k), const(width), const(k), const(width), const(cols), const(panel_bytes))
        return CallRoutine(GEMM_NBITS, params, tuple(Pointer(buf, const(0)) for buf in bufs), (Pointer(out, const(0)),),
                           scalars)

    return te.extern([((m, const(width)), "float32")], list(inputs), build, name="gemm_nbits")


register(OpDef(
    name="gemm_nbits",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"bits": None, "group": 0, "n": None, "offsets": False, "act": "float32", "packed": False,
           "residual": False, "glu": None, "activation": None},
    num_inputs=(3, 7),
    doc="x w + bias with w weight-only quantized (int8 per channel or group, int4 per group) in packed panels.",
    lanes=True,
))


def _quantize_infer(types, attrs):
    (x,) = types
    if x.dtype != "float32" or x.rank != 2 or not isinstance(x.shape[1], int) or x.shape[1] % QUANTIZE_BLOCK:
        raise OpTypeError(f"quantize_rows: x must be float32 (M, K), K static and a multiple of {QUANTIZE_BLOCK}, "
                          f"got {x.dtype} {x.shape}")
    return _quantized_types(x)


def _quantize_compute(inputs, attrs, out_types):
    (x,) = inputs
    k = as_int(x.shape[1])
    m = te_shape(out_types[0], inputs)[0]
    rows = GEMM_NBITS_ROWS
    blocks = (m + rows - 1) // rows

    def build(bufs, outs):
        b = Var("block", dt.INDEX_DTYPE)
        m0 = b * rows
        call = CallRoutine(QUANTIZE_ROWS, (), (Pointer(bufs[0], m0 * k),),
                           (Pointer(outs[0], m0 * k), Pointer(outs[1], m0 * (1 + k // QUANTIZE_BLOCK))),
                           (min_(const(rows), m - m0), const(k), const(k)))
        return For(b, const(0), blocks, "parallel", call)

    return te.extern([((m, const(k)), "uint8"), ((m, const(1 + k // QUANTIZE_BLOCK)), "float32")], [x], build,
                     name="quantize_rows")


register(OpDef(
    name="quantize_rows",
    infer=_quantize_infer,
    reference=lambda inputs, attrs: list(quantize_rows(inputs[0])),
    compute=_quantize_compute,
    pattern="opaque",
    num_inputs=(1, 1),
    doc="Rows of x quantized to uint8 (scale per row, offset 128) with sums of 32 columns: gemm_nbits' int8 input.",
))


def _groups_infer(types, attrs):
    (x,) = types
    group = attrs["group"]
    if group not in GROUPS:
        raise OpTypeError(f"quantize_groups: the group must be one of {GROUPS}, got {group!r}")
    if x.dtype != "float32" or x.rank != 2 or not isinstance(x.shape[1], int) or x.shape[1] % group:
        raise OpTypeError(f"quantize_groups: x must be float32 (M, K), K static and a multiple of {group}, "
                          f"got {x.dtype} {x.shape}")
    return _grouped_types(x, group)


def _groups_compute(inputs, attrs, out_types):
    (x,) = inputs
    k, group = as_int(x.shape[1]), attrs["group"]
    m = te_shape(out_types[0], inputs)[0]

    def build(bufs, outs):  # one call: a decode step's row or few are microseconds of work
        return CallRoutine(QUANTIZE_GROUPS, (("group", group),), (Pointer(bufs[0], const(0)),),
                           (Pointer(outs[0], const(0)), Pointer(outs[1], const(0))), (m, const(k), const(k)))

    return te.extern([((m, const(k)), "int8"), ((m, const(2 * (k // group))), "float32")], [x], build,
                     name="quantize_groups")


register(OpDef(
    name="quantize_groups",
    infer=_groups_infer,
    reference=lambda inputs, attrs: list(quantize_groups(inputs[0], attrs["group"])),
    compute=_groups_compute,
    pattern="opaque",
    attrs={"group": None},
    num_inputs=(1, 1),
    doc="Rows of x quantized to int8 per group of columns (a scale and a sum of codes each): act int8_groups' input.",
))
