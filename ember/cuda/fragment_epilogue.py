"""A Tensor Core product's epilogue computed from the lanes' fragments: each lane converts the
floats it holds and stores them, with no float tile in shared memory between them.

`tensorcore_product` on mma.sync ends with its warps storing their fragments to the block's
float tile in shared memory (mma's STORE), a barrier, and the block's threads reading the tile
back to compute the kernel's output (its epilogue: bias, residual, activation, the cast). Where
it marks the output's tile loops FRAGMENT_EPILOGUE (two serial loops over the tile's rows and
columns, `for i: for j: [if guard:] out[..] = f(tile[i * BN + j], ..)`), this pass puts the
epilogue where each STORE was: the lanes of the warp (a loop bound to threadIdx.x) walk their
own elements of the stored fragment (ember.cuda.fragments.lane_pairs), the epilogue's body at
each element's row and column, its read of the tile made a read of the lane's float. Each pair
of adjacent columns is two lanes of a vectorized loop (one half2, bfloat162 or float2 store:
ember.cuda.vectors.pair_store) under one test that both columns' guards hold and the output's
offset is even; else each column under its guard. The tile, its stores and the barrier before
the epilogue are gone (ember.cuda.sync inserts none: nothing shared is read across threads), and
the block's shared memory with them (a 64x64 float tile: 16 KiB). Runs first in
ember.cuda.kernel.prepare, on the lowered function; a marked nest it cannot place is a
LowerError, never a silent fallback.
"""

from __future__ import annotations

from dataclasses import replace

from ..codegen.routines import tensor_intrin_args
from ..errors import LowerError
from ..intrinsics import mma
from ..tir.arith import Analyzer
from ..tir.arith_bound import modular_set
from ..tir.expr import Buffer, BufferLoad, PrimExpr, Var, all_, as_int, binary, const
from ..tir.expr_functor import substitute
from ..tir.functor import collect, mutate_stmt, substitute_stmt, touches
from ..tir.region import accesses
from ..tir.stmt import THREAD_BINDING, Allocate, BufferStore, CallRoutine, For, IfThenElse, PrimFunc, SeqStmt, Stmt
from . import fragments
from .vectors import PAIRS, SCOPES

FRAGMENT_EPILOGUE = "pragma_fragment_epilogue"  # a loop's annotation: the product's output tile's rows


def fragment_epilogues(func: PrimFunc) -> PrimFunc:
    """func with each marked epilogue computed from the fragments (see the module doc)."""
    nests = collect(func.body, lambda s: isinstance(s, For) and s.annotation(FRAGMENT_EPILOGUE))
    body = func.body
    for nest in nests:
        body = _from_fragments(body, nest, func.name)
    return func if body is func.body else replace(func, body=body)


def _from_fragments(body: Stmt, nest: For, name: str) -> Stmt:
    rows, cols = nest, nest.body
    if not (isinstance(cols, For) and cols.kind == rows.kind == "serial" and as_int(rows.min) == as_int(cols.min) == 0
            and as_int(rows.extent) and as_int(cols.extent)):
        raise LowerError(f"kernel {name}: the epilogue marked {FRAGMENT_EPILOGUE} is not two serial loops over "
                         f"the product's tile")
    i, j, width, elem = rows.loop_var, cols.loop_var, as_int(cols.extent), cols.body
    stores = collect(body, lambda s: isinstance(s, CallRoutine) and dict(s.params).get("intrin") == mma.STORE.name)
    tiles = {c.writes[0].buffer for c in stores if touches(elem, c.writes[0].buffer)}
    if len(tiles) != 1:
        raise LowerError(f"kernel {name}: its epilogue reads {len(tiles)} tiles stored from mma.sync's fragments, "
                         f"not one")
    (tile,) = tiles
    ana = Analyzer()
    for (index,) in accesses(elem, tile):
        if not ana.can_prove_equal(index, i * width + j):
            raise LowerError(f"kernel {name}: its epilogue reads tile {tile.name} at {index}, not at its own element")
    table = {c: _lanes_store(c, elem, i, j, tile, width, name) for c in stores if c.writes[0].buffer is tile}
    table[nest] = SeqStmt(())

    def swap(s: Stmt) -> Stmt | None:
        if isinstance(s, Allocate) and s.buffer is tile:
            return s.body
        return table.get(s)

    body = mutate_stmt(body, f_stmt=swap)
    if touches(body, tile):
        raise LowerError(f"kernel {name}: tile {tile.name} is read beside its marked epilogue")
    return body


def _lanes_store(call: CallRoutine, elem: Stmt, i: Var, j: Var, tile: Buffer, width: int, name: str) -> Stmt:
    """The epilogue over the lanes' elements of the fragment `call` stores (the module doc)."""
    (frag_at,), (tile_at,), (ldm,) = tensor_intrin_args(call)
    frag = frag_at.buffer
    if as_int(ldm) != width:
        raise LowerError(f"kernel {name}: fragments stored {ldm} apart into a tile of rows of {width}")
    ana = Analyzer()
    row0, col0 = ana.simplify(tile_at.offset // width), ana.simplify(tile_at.offset % width)
    cols = as_int(frag.shape[-1])
    f = ana.simplify(frag_at.offset // (fragments.TILE * cols) * (cols // fragments.TILE)
                     + frag_at.offset % cols // fragments.TILE)
    lane, v = Var("lane", i.dtype), Var("v", i.dtype)
    parts = []
    for row, col, at in fragments.lane_pairs(lane):
        read = BufferLoad(frag, (f * (fragments.TILE * fragments.TILE) + at + v,), frag.dtype)
        own = substitute_stmt(_reads_made(elem, tile, read), {i: row0 + row, j: col0 + col + v})
        parts.append(_pair(own, v, ana))
    return For(lane, const(0, i.dtype), const(fragments.WARP, i.dtype), THREAD_BINDING, SeqStmt(tuple(parts)),
               (("thread_tag", "threadIdx.x"),))


def _reads_made(s: Stmt, buf: Buffer, value: PrimExpr) -> Stmt:
    """s with each read of buf made `value`."""
    return mutate_stmt(s, f_expr=lambda e: value if isinstance(e, BufferLoad) and e.buffer is buf else None)


def _pair(s: Stmt, v: Var, ana: Analyzer) -> Stmt:
    """s, an element at column v of a pair, for both: one store of the pair where s is `[if cond:]
    out[base + v] = ..` into a type of PAIRS, under the test that both conds hold and base is
    even (base made `base // 2 * 2`, which ember.cuda.vectors.pair_store knows even); else the
    two in turn."""
    each = For(v, const(0, v.dtype), const(fragments.PAIR, v.dtype), "unrolled", s)
    cond, store = (s.cond, s.then_case) if isinstance(s, IfThenElse) and s.else_case is None else (None, s)
    if not (isinstance(store, BufferStore) and len(store.indices) == 1 and store.buffer.dtype in PAIRS
            and store.buffer.scope in SCOPES):
        return each
    index = store.indices[0]
    base = ana.simplify(substitute(index, {v: const(0, v.dtype)}))
    if not ana.can_prove_equal(index - base, v):
        return each
    tests = [] if cond is None else [ana.simplify(substitute(cond, {v: const(k, v.dtype)}))
                                     for k in range(fragments.PAIR)]
    m, r = modular_set(base, {})
    if m % 2 or r % 2:
        tests.append(binary("==", base % 2, const(0, base.dtype)))
        base = base // 2 * 2
    both = For(v, const(0, v.dtype), const(fragments.PAIR, v.dtype), "vectorized",
               BufferStore(store.buffer, store.value, (base + v,)))
    return IfThenElse(all_(*tests), both, each) if tests else both
