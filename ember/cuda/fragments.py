"""Tensor Core calls in a CUDA kernel: the "wmma.accumulator" scope held as fragments, and the
warp that makes each call (ember.intrinsics.wmma).

A buffer of scope "wmma.accumulator" is a (R, C) array of fp32 accumulators, R and C multiples
of 16 (after any leading dimensions of 1: a batched product's tile), that only tensorized calls
touch: it is declared as R/16 * C/16 fragments in the registers of the warp (a fragment is
spread over the 32 lanes, 8 floats each), and the address of a 16x16 tile's first element, at
flat offset o, names fragment (o / (16 C)) * (C / 16) + (o % C) / 16.

A lane may read its own floats of a fragment in mma's layout (ember.intrinsics.mma_lanes: an
accumulator written out by its lanes, converted where they hold it, with no trip through shared
memory): element 256 f + 8 l + i of the buffer, l the reading lane (threadIdx.x), is float i of
fragment f (`element`), which is where the interpreter (ember.cuda.simt: a warp's fragments one
array, tile f's lanes' 8 floats at 256 f + 8 l) keeps it too.

A wmma call is collective: the 32 lanes of a warp make it together, with the same arguments.
The kernel's threadIdx.x is the lane (exactly 32), and a call sits in no loop bound to
threadIdx.x, so every lane of the warp runs it; the warps are told apart by threadIdx.y and z.
Anything else is a LowerError at render time.
"""

from __future__ import annotations

from ..errors import LowerError
from ..intrinsics.wmma import ACC_TYPE
from ..target import WARP
from ..tir.arith import Analyzer
from ..tir.expr import Buffer, PrimExpr, Var, as_int, const
from ..tir.expr_functor import substitute
from ..tir.functor import collect
from ..tir.stmt import THREAD_BINDING, CallRoutine, For, Stmt

SCOPE = "wmma.accumulator"
TILE = 16
FRAGMENT = ACC_TYPE


def declaration(buf: Buffer, name: str) -> str:
    """The fragments holding an accumulator buffer."""
    lead, dims = [as_int(d) for d in buf.shape[:-2]], [as_int(d) for d in buf.shape[-2:]]
    if (len(dims) != 2 or any(d != 1 for d in lead) or buf.dtype != "float32"
            or any(d is None or d % TILE for d in dims)):
        raise LowerError(f"a {SCOPE} buffer is a 2-D float32 array of 16x16 tiles; {buf.name} is "
                         f"{buf.dtype}{list(buf.shape)}")
    return f"{FRAGMENT} {name}[{dims[0] // TILE * (dims[1] // TILE)}];"


def address(buf: Buffer, name: str, offset: str) -> str:
    """The fragment whose tile starts at element `offset` (C code) of the buffer."""
    cols = as_int(buf.shape[-1])
    return f"(void*)&{name}[({offset}) / {TILE * cols} * {cols // TILE} + ({offset}) % {cols} / {TILE}]"


def element(buf: Buffer, name: str, index: PrimExpr, lane: Var | None, render) -> str:
    """The C lvalue of a lane's own float of a fragment (see the module doc): index is 256 f +
    8 lane + i (`render`: C code of an expression); a LowerError where it is not the reading
    lane's."""
    ana = Analyzer()
    own = None if lane is None else ana.simplify(substitute(index, {lane: const(0, lane.dtype)}))
    if own is None or not ana.can_prove_equal(index - own, lane * 8) or (
            (k := as_int(own)) is not None and k % (TILE * TILE) >= 8):
        raise LowerError(f"fragment {buf.name} is read at {index}: a lane reads its own floats of a fragment, "
                         f"256 f + 8 lane + i (i < 8), lane the thread's threadIdx.x")
    if k is not None:
        return f"{name}[{k // (TILE * TILE)}].x[{k % 8}]"
    e = render(own)
    return f"{name}[({e}) / {TILE * TILE}].x[({e}) % {TILE * TILE}]"


PAIR = 2  # adjacent columns a lane holds in a row of a 16x8 half (mma's layout)


def lane_pairs(lane: PrimExpr, tiles: tuple[int, int] = (1, 1)) -> list[tuple[PrimExpr, PrimExpr, PrimExpr]]:
    """Where a lane's floats of a warp's tiles[0] x tiles[1] tiles of fragments sit in mma's layout
    (ember.intrinsics.mma_lanes: lane l holds, of each 16x8 half of a tile, rows l / 4 and l / 4 + 8
    at columns 2 (l % 4) and 2 (l % 4) + 1): for each pair of adjacent columns, the first's row
    and column in the warp's tile and its index in the accumulator buffer (256 f + 8 l + i, as
    `element` reads it); the second's are one column and one float on. Both ways of storing an
    accumulator from its lanes (ember.cuda.fragment_epilogue, ember.triton's epilogue) walk these."""
    row, col, out = lane // 4, lane % 4 * PAIR, []
    for i in range(tiles[0]):
        for j in range(tiles[1]):
            for h in range(2):  # (a tile's 16x8 halves)
                for r in range(2):  # (rows l / 4 and l / 4 + 8)
                    at = (i * tiles[1] + j) * TILE * TILE + 4 * h + PAIR * r
                    out.append((row + (i * TILE + 8 * r), col + (j * TILE + 8 * h), lane * 8 + at))
    return out


def check_warps(body: Stmt, dims: dict[str, int], name: str) -> None:
    """A LowerError unless every call of a fragment buffer is made by whole warps."""
    calls = collect(body, lambda s: isinstance(s, CallRoutine)
                    and any(p.buffer.scope == SCOPE for p in s.reads + s.writes))
    if not calls:
        return
    if dims.get("threadIdx.x", 1) != WARP:
        raise LowerError(f"kernel {name} calls Tensor Core intrinsics, which a warp makes together: its "
                         f"threadIdx.x must be the 32 lanes, not {dims.get('threadIdx.x', 1)} threads")
    lanes = collect(body, lambda s: isinstance(s, For) and s.kind == THREAD_BINDING and s.thread_tag == "threadIdx.x")
    for loop in lanes:
        if collect(loop.body, lambda s: any(s is c for c in calls)):
            raise LowerError(f"kernel {name} calls a Tensor Core intrinsic inside loop {loop.loop_var.name}, "
                             f"bound to threadIdx.x: every lane of the warp must make the call, so bind its warp "
                             f"to threadIdx.y and leave threadIdx.x to the lanes")
