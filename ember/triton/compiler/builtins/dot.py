"""tl.dot: the operands read into blocks of the type the Emitter takes them in (`dot_inputs`),
the accumulator a loop carries updated in place, the product the Emitter's (`Emitter.dot`)."""

from __future__ import annotations

from ....tir.expr import const
from ...language import dtypes as tld
from ...language.dtypes import unwrap
from .. import ops
from .. import values as V
from ..emitter import buffer_block
from ..values import Block, Scalar, TileTypeError
from .calls import Calls

PRECISIONS = ("tf32", "tf32x3", "ieee")


def input_precision_of(input_precision, allow_tf32) -> str:
    """tl.dot's precision of float32 operands as Triton reads it: `input_precision`, else its old
    spelling `allow_tf32`, else "tf32" (Triton's default on NVIDIA GPUs)."""
    input_precision, allow_tf32 = unwrap(input_precision), unwrap(allow_tf32)
    if input_precision is None:
        return "ieee" if allow_tf32 is False else "tf32"
    if input_precision not in PRECISIONS:
        raise TileTypeError(f"tl.dot: input_precision {input_precision!r} is not one of {', '.join(PRECISIONS)}")
    return input_precision


class Dot(Calls):
    """tl.dot (the module doc)."""

    def b_dot(self, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
              out_dtype=tld.float32):
        if len(input.shape) != 2 or len(other.shape) != 2 or input.shape[1] != other.shape[0]:
            raise TileTypeError(f"tl.dot of {list(input.shape)} and {list(other.shape)}: two blocks (M, K) and (K, N)")
        m, k = input.shape
        n = other.shape[1]
        if input.dtype.is_int():
            out_dtype = tld.int32
        elif out_dtype is None or not out_dtype.is_floating() or out_dtype == tld.float16:
            out_dtype = tld.float32 if out_dtype != tld.float16 else out_dtype
        work = tld.float32 if out_dtype.is_floating() else tld.int32
        precision = input_precision_of(input_precision, allow_tf32)
        inputs = self.em.dot_inputs(input.dtype, m, n, k, precision) if input.dtype == other.dtype else None
        a = self._operand(input, inputs or work)
        b = self._operand(other, inputs or work)
        t = V.tir_dtype(work)
        if acc is not None and isinstance(acc, Block) and acc.buffer is not None and acc.dtype == work \
                and acc.buffer in self.frontend.carried and acc.shape == (m, n):
            c = acc.buffer  # the loop's accumulator: updated in place
        else:
            c = self.em.local("dot", (m, n), t)
            init = ops.cast_to(acc, work) if acc is not None else Scalar(const(0, t), work)
            self.em.store_block(c, init, (m, n))
        self.em.dot(a, b, c, m, n, k, precision)
        out = buffer_block(c, (m, n), work)
        return out if out_dtype == work else ops.cast_to(out, out_dtype)

    def _operand(self, v: Block, work):
        (d,) = v.deps if len(v.deps) == 1 else (None,)
        if d is not None and v.at == d.at and v.dtype == work:  # a load: read it in once
            d.read()
            return d.buffer
        if v.buffer is not None and v.dtype == work:
            return v.buffer
        return self.em.materialize(ops.cast_to(v, work), "op").buffer
