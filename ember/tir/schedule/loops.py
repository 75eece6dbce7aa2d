"""Loop primitives: get_block, get_loops, split, fuse, reorder, parallel, vectorize, unroll,
bind (to a GPU block or thread index), annotate, add_unit_loop.

Loops always start at 0; a block's iteration variables are bound to expressions of the loop
variables around it. split and fuse only rewrite those bindings (and the loop nest); when a
split's factors do not divide the extent, the blocks under it get a predicate that masks the
tail iterations (lowering turns predicates into guards).
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from ...errors import ScheduleError
from ..arith import Analyzer
from ..expr import Var, as_int, const
from ..functor import free_vars, mutate_stmt, stmt_children, substitute_stmt, uses_var
from ..stmt import BLOCK_TAGS, THREAD_BINDING, THREAD_TAGS, BlockRealize, For, Stmt
from .nest import exclusive_top
from .registry import primitive
from .state import BlockRV, LoopRV, Schedule


@primitive
def get_block(sch: Schedule, name: str) -> BlockRV:
    """The block that computes tensor `name`."""
    found = sch.find_path(lambda s: isinstance(s, BlockRealize) and s.block.name == name)
    if found is None:
        names = [r.block.name for r in sch.all_realizes()]
        raise ScheduleError(f"no block named {name!r}; the blocks are {names}")
    return sch.new_block_rv(name)


@primitive
def get_loops(sch: Schedule, block: BlockRV) -> list[LoopRV]:
    """The loops around `block`, outermost first."""
    return [sch.new_loop_rv(f.loop_var) for f in sch.loops_of(block)]


def _rebind(body: Stmt, vmap: dict, extra_pred=None) -> Stmt:
    """Replace loop variables under body (block bindings, predicates, loop extents), adding
    extra_pred to the predicate of every block there."""
    ana = Analyzer()

    def fix(s):
        if isinstance(s, BlockRealize):
            pred = s.predicate if extra_pred is None else s.predicate & extra_pred
            return BlockRealize(tuple(ana.simplify(v) for v in s.iter_values), ana.simplify(pred), s.block)
        return None

    return mutate_stmt(substitute_stmt(body, vmap), f_stmt=fix)


@primitive
def split(sch: Schedule, loop: LoopRV, factors: list) -> list[LoopRV]:
    """Split a loop into len(factors) nested loops; one factor may be None (inferred).

    for i in range(n)  ->  for i_0 in range(ceil(n/f)): for i_1 in range(f): i = i_0*f + i_1
    (with the predicate i < n on the blocks inside when f does not divide n, or a symbolic n
    cannot be proven a multiple of f)."""
    f = sch.get_for(loop)
    factors = list(factors)
    if len(factors) < 2:
        raise ScheduleError("split needs at least two factors")
    if sum(x is None for x in factors) > 1:
        raise ScheduleError("split: at most one factor may be None")
    known = [x for x in factors if x is not None]
    for x in known:
        if not isinstance(x, int) or x < 1:
            raise ScheduleError(f"split: factors must be positive integers or None, got {x!r}")
    ana = Analyzer()
    extent = ana.simplify(f.extent)
    if None in factors:
        rest = prod(known)
        n = as_int(extent)
        inferred = -(-n // rest) if n is not None else ana.simplify((extent + (rest - 1)) // rest)
        factors = [inferred if x is None else x for x in factors]
    total = prod(as_int(x) if as_int(x) is not None else 0 for x in factors)
    new_vars = [Var(f"{f.loop_var.name}_{k}") for k in range(len(factors))]
    combined = const(0)
    for v, ext in zip(new_vars, factors):
        combined = combined * ext + v
    combined = ana.simplify(combined)
    n = as_int(extent)
    # (a symbolic extent is split exactly where it is a multiple of the factors: a padded one)
    exact = total == n if n is not None else ana.can_prove_equal(prod(factors), extent)
    if n is not None and total < n:
        raise ScheduleError(f"split: factors {factors} cover {total} iterations of a loop of {n}")
    pred = None if exact else combined < extent
    body = _rebind(f.body, {f.loop_var: combined}, pred)
    for v, ext in reversed(list(zip(new_vars, factors))):
        body = For(v, const(0), ext if not isinstance(ext, int) else const(ext), "serial", body)
    sch.replace(f, body)
    sch.consume(f.loop_var, f"split ({f.loop_var.name} -> {', '.join(v.name for v in new_vars)})")
    return [sch.new_loop_rv(v) for v in new_vars]


@primitive
def add_unit_loop(sch: Schedule, block: BlockRV) -> LoopRV:
    """A loop of one iteration around `block` and its own loops (a 0-d output has no loop over
    its elements), so that it can be bound: to threadIdx.x, the one thread that stores a scalar."""
    path = sch.block_path(block)
    top = exclusive_top(path)
    var = Var(f"{path[-1].block.name}_unit")
    sch.replace(top, For(var, const(0), const(1), "serial", top))
    return sch.new_loop_rv(var)


@primitive
def fuse(sch: Schedule, *loops: LoopRV) -> LoopRV:
    """Fuse perfectly nested consecutive loops into one: for i, j -> for i_j_fused in range(n*m)."""
    loops = _flatten(loops)
    if len(loops) < 2:
        raise ScheduleError("fuse needs at least two loops")
    fors = [sch.get_for(rv) for rv in loops]
    for outer, inner in zip(fors, fors[1:]):
        if outer.body is not inner:
            raise ScheduleError(
                f"fuse: loop {inner.loop_var.name} is not the only statement directly inside "
                f"{outer.loop_var.name}; only consecutive, perfectly nested loops fuse"
            )
    ana = Analyzer()
    name = "_".join(f.loop_var.name for f in fors) + "_fused"
    fused = Var(name)
    vmap = {}
    stride = const(1)
    for f in reversed(fors):
        e = fused // stride
        vmap[f.loop_var] = ana.simplify(e if f is fors[0] else e % f.extent)
        stride = stride * f.extent
    for f in fors:
        if any(uses_var(g.extent, [f.loop_var]) for g in fors):
            raise ScheduleError(f"fuse: the extent of a loop depends on {f.loop_var.name}")
    body = _rebind(fors[-1].body, vmap)
    new = For(fused, const(0), ana.simplify(stride), "serial", body)
    sch.replace(fors[0], new)
    for f in fors:
        sch.consume(f.loop_var, f"fuse (-> {name})")
    return sch.new_loop_rv(fused)


@primitive
def reorder(sch: Schedule, *loops: LoopRV) -> None:
    """Reorder loops of one nest: the given loops take the given order, others stay put."""
    loops = _flatten(loops)
    fors = [sch.get_for(rv) for rv in loops]
    if len({id(f) for f in fors}) != len(fors):
        raise ScheduleError("reorder: a loop is listed twice")
    # the chain from the outermost listed loop down to the innermost one
    paths = {id(f): sch.find_path(lambda s, f=f: s is f) for f in fors}
    depth = {id(f): len(paths[id(f)]) for f in fors}
    deepest = max(fors, key=lambda f: depth[id(f)])
    chain_path = paths[id(deepest)]
    for f in fors:
        if f not in chain_path:
            raise ScheduleError(
                f"reorder: loops {f.loop_var.name} and {deepest.loop_var.name} are not in the same "
                "loop nest (are they axes of different stages?)"
            )
    top = min(fors, key=lambda f: depth[id(f)])
    chain = [s for s in chain_path[chain_path.index(top):] if isinstance(s, For)]
    for outer, inner in zip(chain, chain[1:]):
        if outer.body is not inner:
            raise ScheduleError(
                f"reorder: loop {outer.loop_var.name} holds more than loop {inner.loop_var.name}; "
                "only a perfect nest can be reordered"
            )
    listed = {id(f) for f in fors}
    order = iter(fors)
    new_chain = [next(order) if id(f) in listed else f for f in chain]
    chain_vars = {f.loop_var for f in chain}
    for f in chain:
        if free_vars(f.extent) & chain_vars:
            raise ScheduleError(f"reorder: the extent of {f.loop_var.name} depends on another loop")
    body = chain[-1].body
    for f in reversed(new_chain):
        body = replace(f, body=body)
    sch.replace(chain[0], body)


def _flatten(loops) -> list:
    out = []
    for x in loops:
        out.extend(x if isinstance(x, list | tuple) else [x])
    return out


def _reduce_bound(sch: Schedule, f: For) -> list[str]:
    """Names of blocks under f with a reduction iteration variable bound to f's variable."""
    names = []
    stack: list[Stmt] = [f.body]
    while stack:
        s = stack.pop()
        if isinstance(s, BlockRealize):
            for iv, val in zip(s.block.iter_vars, s.iter_values):
                if iv.kind == "reduce" and uses_var(val, [f.loop_var]):
                    names.append(s.block.name)
                    break
        stack.extend(stmt_children(s))
    return names


def _set_kind(sch: Schedule, loop: LoopRV, kind: str, annotations: tuple = ()) -> None:
    f = sch.get_for(loop)
    if kind in ("parallel", "vectorized", THREAD_BINDING):
        blocks = _reduce_bound(sch, f)
        if blocks:
            verb = {"parallel": "parallelize", "vectorized": "vectorize"}.get(kind, "bind")
            raise ScheduleError(
                f"cannot {verb} loop {f.loop_var.name}: it runs over a reduction axis of block "
                f"{blocks[0]!r}, so its iterations write the same element (use rfactor first)"
            )
    if kind == "vectorized" and as_int(f.extent) is None:
        raise ScheduleError(f"cannot vectorize loop {f.loop_var.name}: its extent {f.extent} is not constant")
    keys = {k for k, _ in annotations}
    sch.replace(f, replace(f, kind=kind, annotations=tuple(a for a in f.annotations if a[0] not in keys) + annotations))


@primitive
def parallel(sch: Schedule, loop: LoopRV) -> None:
    """Run the iterations of a loop on several threads (OpenMP)."""
    _set_kind(sch, loop, "parallel")


@primitive
def vectorize(sch: Schedule, loop: LoopRV) -> None:
    """Turn a loop of constant extent into SIMD vector operations."""
    _set_kind(sch, loop, "vectorized")


@primitive
def unroll(sch: Schedule, loop: LoopRV) -> None:
    """Unroll a loop completely."""
    _set_kind(sch, loop, "unrolled")


@primitive
def bind(sch: Schedule, loop: LoopRV, thread: str) -> None:
    """Run a loop's iterations on GPU blocks or threads: `thread` is one of blockIdx.x/y/z,
    threadIdx.x/y/z. The loop's extent must be constant (the launch's grid and block are read off
    the bound loops), but a block index's may be symbolic: each launch evaluates it for its sizes
    (ember.cuda.grid); loops bound to one tag in a kernel are one hardware index.

    for i in range(256)  ->  for i in thread_binding(256, thread_tag='threadIdx.x')"""
    if thread not in THREAD_TAGS:
        raise ScheduleError(f"bind: unknown thread index {thread!r}; the indices are {THREAD_TAGS}")
    f = sch.get_for(loop)
    if as_int(f.extent) is None and thread not in BLOCK_TAGS:
        raise ScheduleError(f"cannot bind loop {f.loop_var.name} to {thread}: its extent {f.extent} is not constant")
    _set_kind(sch, loop, THREAD_BINDING, (("thread_tag", thread),))


@primitive
def annotate(sch: Schedule, loop: LoopRV, key: str, value) -> None:
    """Attach an annotation to a loop, e.g. ("pragma_auto_unroll_max_step", 64): lowering then
    unrolls every loop under it whose nest holds at most that many iterations."""
    f = sch.get_for(loop)
    ann = tuple((k, v) for k, v in f.annotations if k != key) + ((key, value),)
    sch.replace(f, replace(f, annotations=ann))
