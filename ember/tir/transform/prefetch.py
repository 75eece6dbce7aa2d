"""Prefetch of the next panel of packed weights, spread over the row tiles that share a panel.

A GEMM over weights packed in panels (N / P, K, P) (ember.passes.pack_weights) runs, panel by
panel, R row tiles that each stream the whole K x P panel. The panel's first tile reads it from
memory: a transformer's weights do not stay in the caches from one call to the next, and that
tile, at two cache lines per k for 2 x mr FMAs, asks for about 40 GB/s, more than one core gets.
It stalls; twelve distinct 768 x 3072 layers ran at 300 GFLOP/s against 400 for one layer called
again and again. The tiles of a panel take long enough to fetch the next panel at a few GB/s, if
the fetch is spread over them, one piece per tile at the pace of its k loop (a tile fetching the
whole next panel asks the same 40 GB/s and gains little).

A loop annotated PREFETCH_PANELS = (name of the packed buffer, R) is the parallel loop over
(..., panel, row tile) with the row tile innermost, R tiles per panel. In the loop over k under
it that reads the buffer (b[panel, k, lane]), row tile r = f % R prefetches the r-th of R pieces
of the next panel (the first after the last: the next block of rows starts there):

    for f in range(panels * R):  [prefetch_panels=("b", R)]        for f in range(panels * R):
        for k in range(K):                                   ->         for k in range(K):
            acc += a[...] * b[f // R, k, 0:P]                               prefetch(b[(f // R + 1) % panels, 0, o])
                                                                            acc += ...
    with o = ((f % R) * K + k) * P // R (o < K * P: every prefetch is inside the buffer).

The pass runs on multi-dimensional accesses (before flatten), right after the blocks are lowered.
"""

from __future__ import annotations

from dataclasses import replace

from ..expr import PREFETCH, Buffer, Call, as_int, binary, const
from ..functor import collect, free_vars, mutate_stmt, substitute
from ..region import accesses
from ..stmt import Evaluate, For, PrimFunc, SeqStmt, Stmt

PREFETCH_PANELS = "pragma_prefetch_panels"  # the annotation (the stage facade's pragma("prefetch_panels"))


def prefetch_panels(func: PrimFunc) -> PrimFunc:
    params = {b.name: b for b in func.params}

    def f(s: Stmt):
        if isinstance(s, For) and s.annotation(PREFETCH_PANELS):
            name, tiles = s.annotation(PREFETCH_PANELS)
            ann = tuple(a for a in s.annotations if a[0] != PREFETCH_PANELS)
            body = _insert(s, params[name], int(tiles)) if name in params else s.body
            return replace(s, body=body, annotations=ann)
        return None

    return func.with_body(mutate_stmt(func.body, f_stmt=f))


def _insert(loop: For, buf: Buffer, tiles: int) -> Stmt:
    loads = accesses(loop.body, buf, stores=False)
    shape = tuple(as_int(d) for d in buf.shape)
    if not loads or len(loads[0]) != 3 or len(shape) != 3 or None in shape:
        return loop.body
    indices = loads[0]
    panels, depth, width = shape
    loops = {x.loop_var: x for x in collect(loop.body, lambda x: isinstance(x, For))}
    k_vars = [v for v in free_vars(indices[1]) if v in loops]
    if len(k_vars) != 1:
        return loop.body
    (k,) = k_vars
    # the load's panel at the tile's first column (the loops under k, over the tile, at 0: the
    # panel index is col // P before simplification, col running over the tile)
    inner = {x.loop_var: const(0, x.loop_var.dtype) for x in collect(loops[k].body, lambda x: isinstance(x, For))}
    panel = substitute(indices[0], inner)
    row = binary("%", loop.loop_var, const(tiles, loop.loop_var.dtype))
    step = binary("+", binary("*", row, const(depth, k.dtype)), k)  # r * K + k: < R * K
    piece = binary("*", step, const(width // tiles, k.dtype)) if width % tiles == 0 else \
        binary("//", binary("*", step, const(width, k.dtype)), const(tiles, k.dtype))
    nxt = binary("%", binary("+", panel, const(1, k.dtype)), const(panels, k.dtype))
    # the piece's offset runs over the whole panel, given as its (0, offset) element: one
    # product per k once flattened, where (offset // P, offset % P) would cost two divisions
    target = buf.load((nxt, const(0, k.dtype), piece))
    fetch = Evaluate(Call(PREFETCH, (target,), "int32"))

    def add(s: Stmt):
        if isinstance(s, For) and s.loop_var is k:
            return s.with_body(SeqStmt((fetch, s.body)))
        return None

    return mutate_stmt(loop.body, f_stmt=add)

