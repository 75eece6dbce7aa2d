"""The CUDA Emitter's `tl.dot`: on the Tensor Cores (wmma), else on CUDA cores.

float16 and bfloat16 blocks, and float32 ones as TF32 where Triton's `input_precision` says "tf32"
(its default; `allow_tf32=False`, "ieee" and "tf32x3" keep float32), when the sizes are multiples of
16 and the target GPU's Tensor Cores take the type (GPU.tensor_cores: float16 from sm_70, bfloat16
and TF32 from sm_80; `gpu`, the target's facts), run on the Tensor Cores: the operands stay in their
type in shared memory and the warps are a grid over the output's 16x16 tiles (Triton's warpsPerCTA),
each warp a contiguous block of fm x fn of them, the grid chosen for the fewest fragment loads (fm +
fn); one call per 16 of k updates the warp's whole block, each fragment of A and of B loaded once
(ember.intrinsics.wmma.warp_mma; TF32 a call per tile; where no grid of the warps divides the tiles,
each warp a strided share of them). A dot loads its warp's tiles of the accumulator from shared
memory into fragments (or sets them to zero where the block was just zeroed), multiplies into them
over all of k and stores them back once; its statements are marked (DOT, COPY, ZERO) so that a loop
around them may keep the accumulator in fragments instead (accumulate.py). wmma rather than
mma.sync: the fragments' layout across the lanes is the compiler's, and the same calls serve fp16,
bf16 and TF32 without per-shape register bookkeeping (ember.intrinsics.wmma's module doc). Any other
`tl.dot` gives each thread a strided share of the output tile on CUDA cores, each element summed
over k in a register.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ....cuda import fragments
from ....intrinsics.wmma import LOAD, MMA, STORE, warp_mma
from ....intrinsics.wmma import ZERO as ZERO_FRAGMENT
from ....tir.expr import Buffer, BufferLoad, PrimExpr, Var, const
from ....tir.expr import binary as te_binary
from ....tir.functor import collect
from ....tir.stmt import Allocate, BufferStore, CallRoutine, For, IfThenElse, Pointer, Stmt, seq
from ....tir.structural import structural_key
from ...language import dtypes as tld
from .. import values as V
from .registers import ThreadOwnBlocks
from .threads import SPREAD, bound

TILE = 16  # a Tensor Core product's tile: 16x16x16
DOT = "tile_dot"  # a Tensor Core dot's statement: its index among the Emitter's dots
COPY = "tile_dot_copy"  # a Tensor Core dot's load (or fill) and store of its fragments: the dot's index
ZERO = "tile_dot_zero"  # a dot's fragments filled with zeros rather than loaded


def _params(intrin, role: str, reads: tuple, writes: tuple, scalars: int) -> tuple:
    """A tensorized call's parameters (ember.tir.schedule.tensorize's): which of its pointers and
    how many of its scalars the C call takes."""
    return (("intrin", intrin.name), ("role", role), ("c_reads", reads), ("c_writes", writes),
            ("c_scalars", scalars))


def zero_fragment(at: Pointer, ldf: int) -> CallRoutine:
    """The fragment at `at` (of a buffer whose rows are ldf apart) zeroed: LOAD's reset, whose C
    call takes the fragment alone (its description's input too: nothing shared is read)."""
    return CallRoutine(ZERO_FRAGMENT, _params(LOAD, "reset", (), (1,), 0), (at,), (at,),
                       (const(ldf), const(1), const(ldf), const(1)))


class Dots(ThreadOwnBlocks):
    """tl.dot over a block's warps (the module doc); each Tensor Core dot is kept, by its DOT
    mark, for the rewrites after it (accumulate.py, copies.py)."""

    def __init__(self, debug: bool, num_warps: int):
        super().__init__(debug, num_warps)
        self._dots: list[tuple] = []  # each Tensor Core dot's (a, b, c, m, n, k), by its DOT mark
        self._frags: dict[int, Buffer] = {}  # each Tensor Core dot's own fragments of c, by its DOT mark

    def dot_inputs(self, dtype, m: int, n: int, k: int, precision: str):
        """float16 and bfloat16 operands stay as they are for the Tensor Cores when the product is
        of 16x16x16 tiles; so do float32 ones that may be rounded to TF32."""
        if m % TILE or n % TILE or k % TILE:
            return None
        if dtype in (tld.float16, tld.bfloat16) or dtype == tld.float32 and precision == "tf32":
            return dtype if self.gpu.tensor_cores(V.tir_dtype(dtype)) else None
        return None

    def dot(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int, precision: str = "ieee") -> None:
        """fp16, bf16 and TF32 products of 16x16x16 tiles on the Tensor Cores (`_tensor_cores`);
        else each thread a strided share of c's elements, each summed over k in a register."""
        if c.dtype == "float32" and not m % TILE and not n % TILE and not k % TILE and self.gpu.tensor_cores(
                a.dtype) and (a.dtype in ("float16", "bfloat16") or a.dtype == "float32" and precision == "tf32"):
            last = self.lists[-1][-1] if self.lists[-1] else None
            zeroed = isinstance(last, For) and last.annotation(SPREAD) is not None and self._zeroes(last, c)
            if zeroed:  # c's zeros: its fragments start at zero instead (no shared memory written and read back)
                self.lists[-1].pop()
            for x in self._tensor_cores(a, b, c, m, n, k, zeroed):
                self.emit(x)
            return
        acc, zero, now = self.register("acc", c.dtype)
        kk = Var("kk")

        def element(idx):
            i, jj = idx
            at = (i * n + jj,)
            prod = BufferLoad(a, (i * k + kk,), a.dtype) * BufferLoad(b, (kk * n + jj,), b.dtype)
            return Allocate(acc, seq(BufferStore(acc, BufferLoad(c, at, c.dtype), zero),
                                     For(kk, const(0), const(k), "serial", BufferStore(acc, now + prod, zero)),
                                     BufferStore(c, now, at)))

        self.emit(self._spread((m, n), None, element))

    def _tensor_cores(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int,
                      zeroed: bool) -> tuple[For, For, For]:
        """Three statements: each warp's fragments of c (`_warp_fragments`) loaded from c in shared
        memory (or zeroed: `zeroed`, c's zeros dropped), multiplied into over all of k
        (`_fragment_dot`), stored back to c. The product is marked (DOT) and the copies (COPY) so
        that a K loop around them may keep c in fragments across its iterations instead
        (`_in_registers`)."""
        self._dots.append((a, b, c, m, n, k))
        key = len(self._dots) - 1
        frag, load, store = self._fragments(c, m, n, zeroed)
        self._frags[key] = frag
        dot = self._fragment_dot(key, frag)
        return (replace(load, annotations=(*load.annotations, (COPY, key))),
                replace(dot, annotations=(*dot.annotations, (DOT, key))),
                replace(store, annotations=(*store.annotations, (COPY, key))))

    def _warp_tiles(self, m: int, n: int, kind: str, tile: Callable[[PrimExpr, PrimExpr, PrimExpr], Stmt]) -> For:
        """tile(s, row, col) for each warp's s-th 16x16 tile of an (m, n) block (tile s * warps +
        warp, row-major), the warps along threadIdx.y; `kind`: that of the loop over s."""
        cols, tiles = n // TILE, (m // TILE) * (n // TILE)
        ty, s = Var("ty"), Var("s")
        steps = -(-tiles // self.warps)
        t = ty if steps == 1 else s * self.warps + ty
        body = tile(const(0) if steps == 1 else s, t // cols * TILE, t % cols * TILE)
        if steps > 1:
            if tiles % self.warps:
                body = IfThenElse(te_binary("<", t, const(tiles)), body)
            body = For(s, const(0), const(steps), kind, body)
        return bound(ty, min(tiles, self.warps), "threadIdx.y", body)

    def _zeroes(self, zero: For, d: Buffer) -> bool:
        """Whether `zero` only stores 0 to d at its own elements."""
        stores = collect(zero, lambda x: isinstance(x, BufferStore | CallRoutine))
        return (len(stores) == 1 and isinstance(stores[0], BufferStore) and stores[0].buffer is d
                and self._own_elements(zero, d) and structural_key(stores[0].value) == structural_key(
                    const(0, d.dtype)))

    def _warp_grid(self, m: int, n: int) -> tuple[int, int] | None:
        """(fm, fn): the warps as a grid over the (m, n) accumulator's 16x16 tiles (Triton's
        warpsPerCTA), each warp holding a contiguous fm x fn block of them, the grid chosen for the
        fewest fragment loads per 16 of k (fm + fn: a warp loads each of its fragments of A and of B
        once, ember.intrinsics.wmma.warp_mma); None where no grid of the warps divides the tiles."""
        best = None
        for wr in (1 << i for i in range(self.warps.bit_length())):
            wc = self.warps // wr
            if (m // TILE) % wr or (n // TILE) % wc:
                continue
            grid = (m // TILE // wr, n // TILE // wc)
            if best is None or sum(grid) < sum(best):
                best = grid
        return best

    def _warp_fragments(self, m: int, n: int, tile: Callable[[PrimExpr, PrimExpr, PrimExpr], Stmt]) -> For:
        """tile(offset, row, col) for each of the warp's fragments of an (m, n) accumulator: at
        element `offset` of the warp's fragment buffer (`_fragment_shape`), tile (row, col) of the
        accumulator; a grid of warps (`_warp_grid`) where one divides the tiles, else each warp a
        strided share of them (`_warp_tiles`)."""
        grid = self._warp_grid(m, n)
        if grid is None:
            return self._warp_tiles(m, n, "unrolled", lambda s, row, col: tile(s * TILE * TILE, row, col))
        fm, fn = grid
        ty = Var("ty")
        row0, col0 = ty // (n // TILE // fn) * (fm * TILE), ty % (n // TILE // fn) * (fn * TILE)
        return bound(ty, self.warps, "threadIdx.y", seq(*(
            tile(const(i * TILE * fn * TILE + j * TILE), row0 + i * TILE, col0 + j * TILE)
            for i in range(fm) for j in range(fn))))

    def _fragment_shape(self, m: int, n: int) -> tuple[int, int]:
        """The shape of a warp's fragment buffer (ember.cuda.fragments: fragments row-major)."""
        grid = self._warp_grid(m, n)
        if grid is None:
            return -(-(m // TILE) * (n // TILE) // self.warps) * TILE, TILE
        return grid[0] * TILE, grid[1] * TILE

    def _fragments(self, c: Buffer, m: int, n: int, zeroed: bool = False) -> tuple[Buffer, For, For]:
        """Fragments for each warp's tiles of the (m, n) accumulator c (`_warp_fragments`), the
        statement loading them from c (ember.intrinsics.wmma's LOAD; `zeroed`: setting them to
        zero instead, marked ZERO) and the one storing them back (STORE)."""
        shape = self._fragment_shape(m, n)
        frag = Buffer(self.name("frag"), tuple(const(x) for x in shape), "float32", scope=fragments.SCOPE)
        self.allocs.append(frag)

        def copy(intrin, frag_first: bool):
            """frag's tile at `offset` from or to c's (row, col) tile: c's row stride is the call's ldm."""
            def call(offset, row, col):
                tiles = [Pointer(c, row * n + col), Pointer(frag, offset)]
                strides = [const(n), const(1), const(shape[1]), const(1)]
                if frag_first:
                    tiles, strides = tiles[::-1], strides[2:] + strides[:2]
                return CallRoutine(intrin.call("body").routine, _params(intrin, "body", (0,), (1,), 1),
                                   (tiles[0],), (tiles[1],), (const(n), *strides))
            return call

        def fill(offset, row, col):
            del row, col
            return zero_fragment(Pointer(frag, offset), shape[1])

        if zeroed:
            load = self._warp_fragments(m, n, fill)
            load = replace(load, annotations=(*load.annotations, (ZERO, True)))
        else:
            load = self._warp_fragments(m, n, copy(LOAD, False))
        return frag, load, self._warp_fragments(m, n, copy(STORE, True))

    def _fragment_dot(self, key: int, frag: Buffer) -> Stmt:
        """Dot `key` multiplying into the warps' fragments `frag`: with a grid of warps over fp16
        or bf16 operands, one call per 16 of k updating the warp's whole block of fragments, each
        fragment of A and B loaded once (ember.intrinsics.wmma's warp_mma); else a call per
        fragment (MMA)."""
        a, b, _, m, n, k = self._dots[key]
        kk = Var("kk")
        grid = self._warp_grid(m, n)
        if grid is not None and a.dtype in ("float16", "bfloat16"):
            fm, fn = grid
            mma = warp_mma(a.dtype, fm * TILE, fn * TILE)
            ty = Var("ty")
            row0, col0 = ty // (n // TILE // fn) * (fm * TILE), ty % (n // TILE // fn) * (fn * TILE)
            strides = tuple(const(x) for x in (k, 1, n, 1, fn * TILE, 1))
            call = CallRoutine(mma.call("update").routine, _params(mma, "update", (0, 1), (2,), 2),
                               (Pointer(a, row0 * k + kk * TILE), Pointer(b, kk * TILE * n + col0)),
                               (Pointer(frag, const(0)),), (const(k), const(n), *strides))
            return bound(ty, self.warps, "threadIdx.y", For(kk, const(0), const(k // TILE), "serial", call))
        mma = MMA[a.dtype]
        ldf = self._fragment_shape(m, n)[1]

        def tile(offset, row, col):
            strides = tuple(const(x) for x in (k, 1, n, 1, ldf, 1))
            call = CallRoutine(mma.call("update").routine, _params(mma, "update", (0, 1), (2,), 2),
                               (Pointer(a, row * k + kk * TILE), Pointer(b, kk * TILE * n + col)),
                               (Pointer(frag, offset),), (const(k), const(n), *strides))
            return For(kk, const(0), const(k // TILE), "serial", call)

        return self._warp_fragments(m, n, tile)
