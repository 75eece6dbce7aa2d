"""Operators on the bits of integers: bitwise_and, bitwise_or, bitwise_xor (NumPy broadcasting),
bitwise_not, and bitcast (a tensor's bits read as another dtype of as many bits in memory, NumPy's
`view`; ONNX's BitCast).

The bitwise operators take integers of one dtype (two's complement; booleans have logical_and,
logical_or and logical_not). bitcast between integers of one width, or from or to bool (the
byte 0 or 1), is a cast (which wraps);
any other pair reads the bits through the loop IR's `reinterpret`, which sees a value as its
dtype holds it in memory: a float16's half, a bfloat16's or float8's code, a sub-byte integer's
byte (its low bits, as ml_dtypes holds it).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import binary, const, reinterpret
from .binary import out_type_shape
from .common import broadcast_index, broadcast_shapes, result_dtype
from .registry import REQUIRED, OpDef, OpTypeError, register

BITWISE = [
    ("bitwise_and", np.bitwise_and, "&"),
    ("bitwise_or", np.bitwise_or, "|"),
    ("bitwise_xor", np.bitwise_xor, "^"),
]


def _check_int(op: str, dtype: str) -> None:
    if not dt.is_int(dtype):
        raise OpTypeError(f"{op} needs integer inputs, got {dtype} (booleans: logical_and, logical_or, logical_not)")


def _infer_bitwise(name: str):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        dtype = result_dtype(name, *types)
        _check_int(name, dtype)
        return [TensorType(broadcast_shapes(name, types[0].shape, types[1].shape), dtype)]

    return infer


def _reference_bitwise(fn):
    def reference(inputs, attrs):
        a, b = inputs
        wide = dt.compute_dtype(a.dtype.name)  # (ml_dtypes' int4 has no bitwise ufuncs)
        return [np.asarray(fn(a.astype(wide), b.astype(wide))).astype(a.dtype)]

    return reference


def _compute_bitwise(op: str):
    def compute(inputs, attrs, out_types):
        a, b = inputs
        return [te.compute(out_type_shape(a, b),
                           lambda *i: binary(op, a[broadcast_index(i, a.shape)], b[broadcast_index(i, b.shape)]),
                           name="out")]

    return compute


for _name, _fn, _op in BITWISE:
    register(OpDef(
        name=_name, infer=_infer_bitwise(_name), reference=_reference_bitwise(_fn), compute=_compute_bitwise(_op),
        pattern="broadcast", num_inputs=(2, 2), doc=f"Elementwise {_name} of integers with NumPy broadcasting.",
    ))


def _infer_not(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    _check_int("bitwise_not", x.dtype)
    return [x]


register(OpDef(
    name="bitwise_not",
    infer=_infer_not,
    reference=lambda inputs, attrs: [np.invert(inputs[0].astype(dt.compute_dtype(inputs[0].dtype.name)))
                                     .astype(inputs[0].dtype)],
    compute=lambda inputs, attrs, out_types: [te.compute(
        inputs[0].shape, lambda *i: binary("^", inputs[0][i], const(-1, inputs[0].dtype)), name="out")],
    pattern="elementwise",
    doc="Elementwise bitwise complement of integers.",
))


def _infer_bitcast(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    target = attrs["dtype"]
    if not isinstance(target, str) or target not in dt.SCALAR_DTYPES:
        raise OpTypeError(f"bitcast: unknown dtype {target!r}; ember knows {', '.join(dt.SCALAR_DTYPES)}")
    if dt.bits(target) != dt.bits(x.dtype):
        raise OpTypeError(f"bitcast: {x.dtype} has {dt.bits(x.dtype)} bits, {target} {dt.bits(target)}; "
                          "bitcast keeps the bits of each element, so the widths must match")
    return [TensorType(x.shape, target)]


def _bitcast(x, dtype: str):
    if dt.is_bool(dtype) or dt.is_bool(x.dtype):  # a bool is the byte 0 or 1 (a mask in vector registers)
        return te.cast(dtype, x)
    if dt.is_int(dtype) and dt.is_int(x.dtype) and dt.value_bits(dtype) == dt.value_bits(x.dtype):
        return te.cast(dtype, x)
    return reinterpret(dtype, x)


register(OpDef(
    name="bitcast",
    infer=_infer_bitcast,
    reference=lambda inputs, attrs: [inputs[0].view(attrs["dtype"])],
    compute=lambda inputs, attrs, out_types: [te.compute(
        inputs[0].shape, lambda *i: _bitcast(inputs[0][i], attrs["dtype"]), name="out")],
    pattern="elementwise",
    attrs={"dtype": REQUIRED},
    doc="Each element's bits (as its dtype holds them in memory) read as `dtype`, of as many bits.",
))


# TF32 keeps float32's exponent and 10 of its 23 mantissa bits: the 13 below them rounded off to
# nearest, ties away from zero, as the GPU's `cvt.rna.tf32.f32` does (inf and NaN kept)
TF32_HALF, TF32_MASK = 0x1000, 0xFFFFE000


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (what the round_tf32 operator computes)."""
    x = np.asarray(x, np.float32)
    bits = (x.view(np.uint32) + np.uint32(TF32_HALF)) & np.uint32(TF32_MASK)
    return np.where(np.isfinite(x), bits.view(np.float32), x)


def _round_tf32(x):
    bits = binary("&", binary("+", reinterpret("uint32", x), const(TF32_HALF, "uint32")), const(TF32_MASK, "uint32"))
    return te.if_then_else(te.abs(x) < const(np.inf, "float32"), reinterpret("float32", bits), x)


def _infer_round_tf32(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    if x.dtype != "float32":
        raise OpTypeError(f"round_tf32: rounds float32 values, got {x.dtype}")
    return [x]


register(OpDef(
    name="round_tf32",
    infer=_infer_round_tf32,
    reference=lambda inputs, attrs: [round_tf32(inputs[0])],
    compute=lambda inputs, attrs, out_types: [te.compute(
        inputs[0].shape, lambda *i: _round_tf32(inputs[0][i]), name="out")],
    pattern="elementwise",
    doc="Each float32 rounded to TF32 (10 mantissa bits; to nearest, ties away from zero), as a GPU's "
        "Tensor Cores read a product's operands in tf32.",
))
