"""A vectorized loop's lane taken out of the divisions it goes through, so that a run of lanes
that stays in one row of a divided index reads as `base + lane` (one 16-byte access).

A channels-last convolution's columns (ember.ops.conv_gemm's conv2d_nhwc_gemm) read tap q =
(ky, kx, c) of x (N, H, W, C) at channel q % C and tap q // C. Copied 8 halves a thread at a
time, q = base + v with base a multiple of 8 and v the lane; where 8 divides C the 8 lanes are 8
channels of one tap, but the index says so only through the divisions:

    x[.., ((base + v) // C) ..., (base + v) % C]  ->  x[.., (base // C) ..., base % C + v]

which is exact for 0 <= v < L (the loop's lanes), base a multiple of L and a divisor a multiple
of L (base and base + L - 1 then lie between the same multiples of the divisor). Rewritten so,
the address is `base' + v` with base' a multiple of 8, the conditions of the padding read the
lane no more (or as `e + v < b`, ember.cuda.vectors.lane_uniform), and the copy is one cp.async
of 16 bytes zero-filled in the padding (ember.cuda.vector_render) in place of 8 loads of 2 bytes.
Where C is not a multiple of 8 (a first layer's 3 channels) nothing changes: the copy stays an
element a lane.
"""

from __future__ import annotations

from dataclasses import replace

from ..tir.arith import Analyzer
from ..tir.arith_bound import modular_set
from ..tir.expr import Binary, Const, PrimExpr, Var, as_int, binary
from ..tir.expr_functor import substitute, uses_var
from ..tir.functor import mutate_stmt
from ..tir.stmt import For, PrimFunc


def lane_runs(func: PrimFunc) -> PrimFunc:
    """func with each vectorized loop's lane taken out of its divisions (see the module doc)."""
    def on_stmt(s):
        if isinstance(s, For) and s.kind == "vectorized" and as_int(s.min) == 0 and (lanes := as_int(s.extent)):
            body = mutate_stmt(s.body, f_expr=lambda e: lane_free(e, s.loop_var, lanes))
            return None if body is s.body else replace(s, body=body)
        return None

    body = mutate_stmt(func.body, f_stmt=on_stmt)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def lane_free(e: PrimExpr, v: Var, lanes: int) -> PrimExpr | None:
    """`(base + v) // d` as `base // d`, `(base + v) % d` as `base % d + v`, where v is a lane
    (0 <= v < lanes), base a multiple of `lanes` and d a constant multiple of it; else None."""
    if not (isinstance(e, Binary) and e.op in ("//", "%") and isinstance(e.b, Const) and e.b.value > 0
            and e.b.value % lanes == 0 and uses_var(e.a, [v])):
        return None
    ana = Analyzer()
    base = ana.simplify(substitute(e.a, {v: Const(0, v.dtype)}))
    m, r = modular_set(base, {})
    if m % lanes or r % lanes or not ana.can_prove_equal(binary("-", e.a, base), v):
        return None
    out = Binary(e.op, base, e.b, e.dtype)
    return out if e.op == "//" else binary("+", out, v)
