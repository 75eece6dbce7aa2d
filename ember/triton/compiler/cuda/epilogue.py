"""A dot's accumulator stored from its fragments: each lane converts and stores the floats it holds,
with no float block in shared memory between them, rewritten once the kernel is emitted.

The tutorial's matmul ends `tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask)`: the warps'
fragments stored to acc's float block in shared memory (mma's STORE), a barrier, then each thread
reading its elements of the block back, converting and storing them. Where acc's fragments are in
mma's lane layout (ldmatrix.py: lane l holds, of each 16x8 half of a 16x16 tile, rows g = l / 4
and g + 8 at columns 2 (l % 4) and 2 (l % 4) + 1) and the block's one reader is such a store (a
versioned nest of acc's shape, each thread at its own elements, storing to tensors alone), the
store is built anew (its body from threads.py's `_bodies`) over each lane's own elements: for each
of the warp's tiles, halves and rows, the pair of adjacent columns the lane holds, its value read
from the lane's floats of the fragment (ember.cuda.fragments.element) where the body read acc.
Each pair is a chunk of two (threads.py's `_versioned_chunk`): under one test that both columns'
masks hold and the row's offset is even, one store of both in the output's type (half2,
bfloat162, float2: ember.cuda.vectors.pair_store); else each column under its masks. A quad of
lanes stores a row's 16 bytes of half at a time. acc's block, its stores and the barrier before
the epilogue are gone, and the block's memory with them (64 KiB of a 128x128 float tile, which
the operand tiles' stages no longer share). wmma's fragments (the compiler's layout) keep the
block, and so does every accumulator where the tile_fragment_stores option is off
(EMBER_TILE_FRAGMENT_STORES=0: benchmarks/tile_matmul.py times both).
"""

from __future__ import annotations

from .... import config
from ....cuda import fragments
from ....intrinsics import mma
from ....target import WARP
from ....tir.expr import Buffer, BufferLoad, Var, as_int
from ....tir.functor import collect, mutate_stmt, touches
from ....tir.stmt import BufferStore, CallRoutine, For, SeqStmt, Stmt, seq
from .dot import TILE
from .rewrite import flat, replaced
from .stages import Stages
from .threads import SPREAD, bound


def _intrin(call: CallRoutine) -> str:
    return dict(call.params).get("intrin", "")


class FragmentStores(Stages):
    """The rewrite of the kernel's body that stores dots' accumulators from their fragments (the
    module doc)."""

    def _stored_from_fragments(self, body: Stmt) -> Stmt:
        """body with each accumulator whose mma fragments one versioned store reads, through its
        block, stored from the fragments instead (the module doc)."""
        if not config.get("tile_fragment_stores"):
            return body
        stmts = flat(body)
        for i, st in enumerate(stmts):
            found = self._fragment_store(st)
            if found is None:
                continue
            frag, acc = found
            users = [x for x in stmts if x is not st and touches(x, acc)]
            if len(users) != 1 or not any(x is users[0] for x in stmts[i + 1:]):
                continue
            (store,) = users
            j = next(k for k, x in enumerate(stmts) if x is store)
            if any(touches(x, frag) for x in stmts[i + 1:j + 1]) or (new := self._from_fragments(
                    store, frag, acc)) is None:
                continue
            body = replaced(body, {st: SeqStmt(()), store: new})
            self.allocs.remove(acc)
        return body

    def _fragment_store(self, s: Stmt) -> tuple[Buffer, Buffer] | None:
        """(fragments, block) where s stores the warps' fragments, in mma's layout, to a block and
        does nothing else."""
        if not (isinstance(s, For) and s.thread_tag == "threadIdx.y"):
            return None
        calls = collect(s, lambda x: isinstance(x, CallRoutine))
        if not calls or collect(s, lambda x: isinstance(x, BufferStore)) or any(
                _intrin(c) != mma.STORE.name for c in calls):
            return None
        pairs = {(c.reads[0].buffer, c.writes[0].buffer) for c in calls}
        return next(iter(pairs)) if len(pairs) == 1 and next(iter(pairs))[1] in self.allocs else None

    def _from_fragments(self, store: Stmt, frag: Buffer, acc: Buffer) -> Stmt | None:
        """The versioned `store` built over each lane's own elements of acc's fragments (the
        module doc); None where store is not such a nest or acc not a dot's (m, n) block on a
        grid of warps."""
        mark = store.annotation(SPREAD) if isinstance(store, For) else None
        dims = next(((m, n) for _, _, c, m, n, _ in self._dots if c is acc), None)
        if mark not in self._bodies or dims is None:
            return None
        m, n = dims
        grid = self._warp_grid(m, n)
        if (grid is None or self._spreads[mark][0][0] != (m, n) or not self._own_elements(store, acc)
                or tuple(as_int(d) for d in frag.shape) != (grid[0] * TILE, grid[1] * TILE)
                or collect(store, lambda x: isinstance(x, CallRoutine))
                or any(x.buffer not in self.tensors for x in collect(store, lambda x: isinstance(x, BufferStore)))):
            return None
        fm, fn = grid
        body, ty, tx, v = self._bodies[mark], Var("ty"), Var("tx"), Var("v")
        row0, col0 = ty // (n // TILE // fn) * (fm * TILE), ty % (n // TILE // fn) * (fn * TILE)

        def lane(at):
            """body with its reads of acc made of the lane's float `at` of the fragments (and v)."""
            def make(idx, full):
                s = body(idx, full)
                return None if s is None else mutate_stmt(s, f_expr=lambda e: BufferLoad(
                    frag, (at + v,), frag.dtype) if isinstance(e, BufferLoad) and e.buffer is acc else None)
            return make

        saved, parts = (self.masks, self.full), []
        try:
            for row, col, at in fragments.lane_pairs(tx, grid):
                self.masks, self.full = [], False
                parts.append(self._versioned_chunk(lane(at), (row0 + row, col0 + col + v), v, fragments.PAIR))
        finally:
            self.masks, self.full = saved
        return bound(ty, self.warps, "threadIdx.y", bound(tx, WARP, "threadIdx.x", seq(*parts)))
