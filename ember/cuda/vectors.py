"""16-byte accesses of a vectorized loop: which loads and stores of a 4-lane loop are one `float4`
(or `int4`) access each.

A GPU thread moves at most 16 bytes per instruction; four 4-byte loads where one would do cost
issue slots and memory transactions. A loop `for v in vectorized(4)` whose body is one store is
rendered as one 16-byte store where the store's index is `base + v` with `base` a multiple of 4
(its modular set), and each load of the value at such an index is one 16-byte load; the other
loads stay per lane. A store that cannot be one (into registers, or unaligned) stays per lane,
its loads still 16 bytes where they can be (a register tile loaded from shared memory). A
vectorized loop that only copies 16 bytes of a narrower type (8 halves) between aligned places
is one `uint4` load and store (`copy_loop`). A vectorized loop of 2 lanes that stores a pair
of adjacent elements (a Tensor Core accumulator's two columns a lane holds, converted to the
output's type) at an even index is one 4- or 8-byte store (`pair_store`: half2, bfloat162, float2).
The
stored buffer may be read only at the store's own index (so reading all lanes before writing
them is what the serial loop does). Buffers in global or shared memory only: thread-local arrays
stay scalar (a vector access to them can push them out of registers). The pointers a kernel
accesses so must be 16-byte aligned: shared arrays are declared so, and the kernel checks its
arguments' addresses at call (`vector_buffers`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..tir import dtype as dt
from ..tir.arith import Analyzer
from ..tir.arith_bound import modular_set
from ..tir.expr import Binary, Buffer, BufferLoad, Const, PrimExpr, Select, Var, all_, as_int, binary, const
from ..tir.expr_functor import substitute, uses_var, visit_expr
from ..tir.schedule.nest import conjuncts
from ..tir.stmt import BufferStore, For

LANES = 4
VECTOR_TYPES = {"float32": "float4", "int32": "int4", "uint32": "uint4"}  # 4 lanes of 4 bytes
# two lanes of a type stored as one: (the C vector type, the function that makes one of two elements)
PAIRS = {"float16": ("__half2", "__halves2half2"), "bfloat16": ("__nv_bfloat162", "__halves2bfloat162"),
         "float32": ("float2", "make_float2")}
SCOPES = ("global", "shared")


@dataclass(frozen=True)
class VectorLoop:
    """A vectorized loop rendered with 16-byte accesses: the store and its base (None: a store
    per lane), and each contiguous load (by buffer and index) with its base."""

    store: BufferStore
    base: PrimExpr | None
    loads: tuple[tuple[BufferLoad, PrimExpr], ...]

    @property
    def buffers(self) -> set[Buffer]:
        """The buffers accessed 16 bytes at a time."""
        return {load.buffer for load, _ in self.loads} | ({self.store.buffer} if self.base is not None else set())


def vector_loop(loop: For) -> VectorLoop | None:
    """The 16-byte accesses of `loop` (see the module doc), or None where it stays per lane."""
    store, v = loop.body, loop.loop_var
    if (loop.kind != "vectorized" or as_int(loop.extent) != LANES or as_int(loop.min) != 0
            or not isinstance(store, BufferStore) or len(store.indices) != 1):
        return None
    base = aligned_base(store.buffer, store.indices[0], v)
    loads: list[BufferLoad] = []
    visit_expr(store.value, lambda e: loads.append(e) if isinstance(e, BufferLoad) else None)
    vectors: list[tuple[BufferLoad, PrimExpr]] = []
    ana = Analyzer()
    for load in loads:
        if len(load.indices) != 1:
            return None
        index = load.indices[0]
        if load.buffer is store.buffer and not ana.can_prove_equal(index, store.indices[0]):
            return None  # the serial loop would read a lane another lane wrote
        if not uses_var(index, [v]):
            continue
        load_base = aligned_base(load.buffer, index, v)
        if load_base is not None:
            vectors.append((load, load_base))
    if base is None and not vectors:
        return None
    return VectorLoop(store, base, tuple(vectors))


def copy_loop(loop: For, words: bool = False) -> tuple[BufferStore, PrimExpr, BufferLoad, PrimExpr] | None:
    """(store, its base, load, its base) where `loop` copies 16 bytes of any element type (8
    halves of a shared tile) from one buffer to another, both aligned: one `uint4` load and
    store; else None. 4 lanes of 4 bytes are vector_loop's, unless `words` (an asynchronous
    copy, which is one instruction whatever the type)."""
    store, v = loop.body, loop.loop_var
    if (loop.kind != "vectorized" or as_int(loop.min) != 0 or not isinstance(store, BufferStore)
            or len(store.indices) != 1 or not isinstance(store.value, BufferLoad) or len(store.value.indices) != 1):
        return None
    load = store.value
    lanes = 128 // dt.bits(store.buffer.dtype)
    if load.buffer.dtype != store.buffer.dtype or as_int(loop.extent) != lanes or (lanes == LANES and not words):
        return None  # 4 lanes of 4 bytes: vector_loop's
    bases = [_aligned(b.buffer, b.indices[0], v, lanes) for b in (store, load)]
    return None if None in bases else (store, bases[0], load, bases[1])


def async_copy(loop: For):
    """(store, its base, load, its base, the condition it is read on or None) where the
    vectorized `loop` copies 16 aligned bytes from global to shared memory, as they are or
    zeros where a condition fails, the same for every lane (`zero_filled`, `lane_uniform`): one
    cp.async where the GPU has it (ember.cuda.vector_render); else None."""
    store = loop.body
    if loop.kind != "vectorized" or not isinstance(store, BufferStore):
        return None
    cond, load = zero_filled(store.value)
    if cond is not None and uses_var(cond, [loop.loop_var]):
        lanes = as_int(loop.extent)
        cond = lane_uniform(cond, loop.loop_var, lanes) if lanes and as_int(loop.min) == 0 else None
        if cond is None:
            return None
    copy = copy_loop(replace(loop, body=replace(store, value=load)), words=True)
    if copy is None or copy[2].buffer.scope != "global" or copy[0].buffer.scope != "shared":
        return None
    return (*copy, cond)


def pair_store(loop: For) -> PrimExpr | None:
    """`base` where the vectorized 2-lane `loop` is one store at `base + v` of a type of PAIRS in
    global or shared memory, base a multiple of 2 (its modular set); else None."""
    store, v = loop.body, loop.loop_var
    if (loop.kind != "vectorized" or as_int(loop.extent) != 2 or as_int(loop.min) != 0
            or not isinstance(store, BufferStore) or len(store.indices) != 1 or store.buffer.dtype not in PAIRS):
        return None
    return _aligned(store.buffer, store.indices[0], v, 2)


def vector_lanes(dtype: str, lanes: int) -> bool:
    """Whether `lanes` consecutive elements of `dtype` are one access: 4 of 4 bytes (vector_loop),
    or 2 of a type of PAIRS stored together (pair_store)."""
    return dtype in VECTOR_TYPES if lanes == LANES else lanes == 2 and dtype in PAIRS


def zero_filled(value: PrimExpr) -> tuple[PrimExpr | None, PrimExpr]:
    """(cond, x) where `value` is `cond ? x : 0` (an element of a tile padded with zeros:
    ember.tir.schedule.padding), or zero fills nested in one another (a convolution's padding in
    its tile's: their conditions' conjunction), else (None, value)."""
    conds = []
    while (isinstance(value, Select) and isinstance(value.f, Const) and value.f.value == 0
           and dt.lanes_of(value.cond.dtype) == 1):
        conds.append(value.cond)
        value = value.t
    return (all_(*conds) if conds else None), value


def lane_uniform(cond: PrimExpr, v: Var, lanes: int) -> PrimExpr | None:
    """`cond`, which reads the lane v (0 to lanes - 1), as one condition of all the lanes (its
    value at lane 0) where each conjunct that reads v is `e + v < b` with b - e a multiple of
    `lanes` (a tile padded past a row whose length is a multiple of the vector: a vector's lanes
    are all inside or all past it, since e < b then means e + lanes <= b); else None."""
    ana, out = Analyzer(), []
    for c in conjuncts(cond):
        if not uses_var(c, [v]):
            out.append(c)
            continue
        if not (isinstance(c, Binary) and c.op == "<") or uses_var(c.b, [v]):
            return None
        base = substitute(c.a, {v: const(0, v.dtype)})
        if not (ana.can_prove_equal(c.a - base, v)
                and ana.can_prove(binary("==", binary("%", c.b - base, const(lanes, v.dtype)), const(0, v.dtype)))):
            return None
        out.append(binary("<", base, c.b))
    return ana.simplify(all_(*out))


def aligned_base(buf: Buffer, index: PrimExpr, v: Var) -> PrimExpr | None:
    """`base` where index == base + v and base is a multiple of LANES, for a buffer of a
    4-byte type in global or shared memory; else None."""
    return _aligned(buf, index, v, LANES) if buf.dtype in VECTOR_TYPES else None


def _aligned(buf: Buffer, index: PrimExpr, v: Var, lanes: int) -> PrimExpr | None:
    if buf.scope not in SCOPES:
        return None
    ana = Analyzer()
    base = ana.simplify(substitute(index, {v: Const(0, v.dtype)}))
    if not ana.can_prove_equal(binary("-", index, base), v):
        return None
    m, r = modular_set(base, {})
    return base if m % lanes == 0 and r % lanes == 0 else None
