"""kv_int8_rows: float32 rows (..., E) as the int8 key/value cache's rows (..., E + 4), E codes and
then the 4 bytes of the row's float32 scale (ember.tir.kv_int8's format, its quantize_rows the
reference). A decode step whose cache is int8 (ember.passes.kv_cache) returns its own keys and
values through it, so that its caller writes each row's bytes as they are: quantized in NumPy by
the caller, a step's 24 rows (GPT-2 small) took about a millisecond of ufunc calls, more than the
int8 cache saves the attention at 1024 positions.

    scale = max |row| / 127,  codes = clip(rint(row / scale), -127, 127)  (an all-zero row: 0s)
"""

from __future__ import annotations

from .. import te
from ..graph.core import TensorType
from ..tir.expr import const, reinterpret
from ..tir.kv_int8 import SCALE_BYTES, quantize_rows
from .hints import by_rows
from .reduction import reduce_over
from .registry import OpDef, OpTypeError, register


def _infer(types, attrs):
    (x,) = types
    if x.dtype != "float32" or x.rank < 1 or not isinstance(x.shape[-1], int):
        raise OpTypeError(f"kv_int8_rows: x must be float32 rows, their size static, got {x.dtype} {x.shape}")
    return [TensorType(x.shape[:-1] + (x.shape[-1] + SCALE_BYTES,), "int8")]


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    last = x.ndim - 1
    e = x.shape[last]
    amax = reduce_over(x, (last,), False, te.max, "amax", lambda i, idx: te.abs(x[idx]))
    scale = te.compute(amax.shape, lambda *r: amax[r] / const(127.0, "float32"), name="scale")

    def code(i):
        s = scale[i[:-1]]
        q = te.round(x[i] / s)
        q = te.if_then_else(q > const(127.0, "float32"), const(127.0, "float32"), q)
        q = te.if_then_else(q < const(-127.0, "float32"), const(-127.0, "float32"), q)
        return te.cast("int8", te.if_then_else(s > const(0.0, "float32"), q, const(0.0, "float32")))

    def scale_byte(i):
        bits = reinterpret("int32", scale[i[:-1]])  # not negative: a scale is (its sign bit 0)
        k = i[-1] - e
        unit = const(1, "int32")
        for b in range(1, SCALE_BYTES):
            unit = te.if_then_else(k == b, const(256**b, "int32"), unit)
        byte = bits // unit % const(256, "int32")
        # the byte as a signed one, without a narrowing cast's implementation-defined wrap
        return te.cast("int8", te.if_then_else(byte > const(127, "int32"), byte - const(256, "int32"), byte))

    def element(*i):
        return te.if_then_else(i[-1] < e, code(i), scale_byte(i))

    return [te.compute(tuple(x.shape[:-1]) + (e + SCALE_BYTES,), element, name="out",
                       attrs=by_rows(range(last), (last,)))]


register(OpDef(
    name="kv_int8_rows",
    infer=_infer,
    reference=lambda inputs, attrs: [quantize_rows(inputs[0])],
    compute=_compute,
    pattern="opaque",
    num_inputs=(1, 1),
    doc="float32 rows as the int8 key/value cache's rows: E codes, then the row's float32 scale's 4 bytes.",
))
