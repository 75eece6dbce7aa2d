"""Reduction primitives: decompose_reduction and rfactor.

decompose_reduction(block, loop) moves a reduction's initialisation out of the reduction loops
into its own block, in a copy of the spatial loops found inside `loop`, placed right before
`loop`. (Lowering does this on its own at the outermost reduction loop when it can; a block
left with its init keeps it as a guarded store.)

rfactor(loop) splits a reduction in two: a block that reduces into a buffer with one more
dimension, indexed by `loop` (so `loop` becomes data parallel and can be parallelized or
vectorized), and a block that reduces that dimension into the original output. The partial
results' block and buffer are named `<block>_rf`, numbered when that name is taken (an rfactor of
a write-back whose block was factored before). Every loop over the reduction must run over
reduction axes only: rfactor refuses a loop fused from a spatial and a reduction axis.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from ..arith import Analyzer
from ..expr import Binary, Buffer, BufferLoad, PrimExpr, Var, all_, binary, const
from ..functor import free_vars, substitute, substitute_stmt, uses_var
from ..region import reduce_loop_vars, with_regions
from ..stmt import Block, BlockRealize, BufferStore, For, IfThenElse, IterVar, Range, Stmt, seq
from .nest import common_loop, conjuncts, insert_in_body, names_in_use, reads_buffer, realizes_in, same_nest
from .registry import primitive
from .state import BlockRV, LoopRV, Schedule, replace_stmt


@primitive
def decompose_reduction(sch: Schedule, block: BlockRV, loop: LoopRV) -> BlockRV:
    """Hoist the init of a reduction block to just before `loop`; returns the init block."""
    path = sch.block_path(block)
    realize = path[-1]
    blk = realize.block
    if blk.init is None:
        raise ScheduleError(f"decompose_reduction: block {blk.name!r} has no init (not a reduction?)")
    target = sch.get_for(loop)
    fors = [s for s in path if isinstance(s, For)]
    if not any(f is target for f in fors):
        raise ScheduleError(
            f"decompose_reduction: loop {target.loop_var.name} is not around block {blk.name!r}"
        )
    pos = next(k for k, f in enumerate(fors) if f is target)
    rvars = reduce_loop_vars(realize)
    for f in fors[:pos]:
        if f.loop_var in rvars:
            raise ScheduleError(
                f"decompose_reduction: loop {f.loop_var.name}, outside {target.loop_var.name}, runs over a "
                "reduction axis; the init must go outside every reduction loop"
            )
    copied = [f for f in fors[pos:] if f.loop_var not in rvars]
    vmap = {f.loop_var: Var(f.loop_var.name + "_init") for f in copied}
    inner_reduce = {f.loop_var for f in fors[pos:] if f.loop_var in rvars}
    spatial = [(iv, v) for iv, v in zip(blk.iter_vars, realize.iter_values) if iv.kind == "spatial"]
    for iv, v in spatial:
        if uses_var(v, inner_reduce):
            raise ScheduleError(
                f"decompose_reduction: spatial axis {iv.var.name} of {blk.name!r} is bound to a loop that "
                "also runs over a reduction axis (fused?)"
            )
    kept = []
    for c in conjuncts(realize.predicate):
        used = free_vars(c)
        if used & inner_reduce:
            if used - inner_reduce - {f.loop_var for f in fors[:pos]}:
                raise ScheduleError(
                    f"decompose_reduction: the predicate {c} of {blk.name!r} mixes reduction and spatial loops"
                )
            continue
        kept.append(substitute(c, vmap))
    new_ivs = tuple(IterVar(Var(iv.var.name), iv.dom, "spatial") for iv, _ in spatial)
    ivmap = {iv.var: n.var for (iv, _), n in zip(spatial, new_ivs)}
    init_block = with_regions(Block(f"{blk.name}_init", new_ivs, (), (), substitute_stmt(blk.init, ivmap)))
    body: Stmt = BlockRealize(tuple(substitute(v, vmap) for _, v in spatial),
                              Analyzer().simplify(all_(*kept)) if kept else const(True), init_block)
    for f in reversed(copied):
        body = For(vmap[f.loop_var], const(0), substitute(f.extent, vmap), f.kind, body, f.annotations)
    new_realize = replace(realize, block=replace(blk, init=None))
    new_target = replace_stmt(target, realize, new_realize)
    sch.replace(target, seq(body, new_target))
    return sch.new_block_rv(init_block.name)


_COMBINE_OPS = ("+", "*", "min", "max")


def _split_update(blk: Block) -> tuple[BufferStore, str, PrimExpr, PrimExpr | None]:
    """(store, combine op, the value combined in, the where-condition) of a reduction block."""
    body, cond = blk.body, None
    if isinstance(body, IfThenElse) and body.else_case is None:
        body, cond = body.then_case, body.cond
    if isinstance(body, BufferStore):
        v = body.value
        if isinstance(v, Binary) and v.op in _COMBINE_OPS and isinstance(v.a, BufferLoad) \
                and v.a.buffer is body.buffer:
            return body, v.op, v.b, cond
    raise ScheduleError(
        f"rfactor: block {blk.name!r} is not a sum, product, min or max reduction that rfactor understands"
    )


def _unused_name(sch: Schedule, base: str) -> str:
    """`base`, or `base` with the first number that makes it, that no block or buffer of the
    function has: block handles are found by name, so a second rfactor of a block named like an
    earlier one's partial results (an rfactor of an rfactor's write-back) must not reuse it."""
    taken = names_in_use(sch)
    name, n = base, 1
    while name in taken:
        name, n = f"{base}{n}", n + 1
    return name


@primitive
def rfactor(sch: Schedule, loop: LoopRV, factor_axis: int = 0) -> BlockRV:
    """Make `loop` (a reduction loop) data parallel: reduce into an extra dimension indexed by it,
    then reduce that dimension. Returns the new (rfactor) block; the original block handle now
    names the final reduction."""
    target = sch.get_for(loop)
    lv = target.loop_var
    cands = [r for r in realizes_in(target) if r.block.is_reduction and lv in reduce_loop_vars(r)]
    if len(cands) != 1:
        raise ScheduleError(
            f"rfactor: loop {lv.name} must run over the reduction axis of exactly one block, found {len(cands)}"
        )
    realize = cands[0]
    blk = realize.block
    store, op, rhs, cond = _split_update(blk)
    if blk.init is None:
        raise ScheduleError(f"rfactor: block {blk.name!r} has no init; apply rfactor before decompose_reduction")
    identity = blk.init.value if isinstance(blk.init, BufferStore) else None
    path = sch.find_path(lambda s: s is realize)
    fors = [s for s in path if isinstance(s, For)]
    rvars = reduce_loop_vars(realize)
    spatial = [(iv, v) for iv, v in zip(blk.iter_vars, realize.iter_values) if iv.kind == "spatial"]
    # Each loop that feeds a reduction axis becomes a reduction axis of its own in the rf block,
    # whose init runs where all of them are 0: a loop that also feeds a spatial axis (a fuse of a
    # spatial and a reduction loop) would leave every element it reaches past 0 uninitialised.
    for f in fors:
        if f.loop_var in rvars and any(uses_var(v, [f.loop_var]) for _, v in spatial):
            raise ScheduleError(
                f"rfactor: loop {f.loop_var.name} runs over both a spatial and a reduction axis of "
                f"{blk.name!r} (fused?); rfactor needs every loop over its reduction to run over "
                "reduction axes only: rfactor before fusing them"
            )
    out = store.buffer
    ext = target.extent
    if not 0 <= factor_axis <= len(out.shape):
        raise ScheduleError(f"rfactor: factor_axis {factor_axis} out of range for {out.name}")
    rf_shape = list(out.shape)
    rf_shape.insert(factor_axis, ext)
    rf_name = _unused_name(sch, f"{blk.name}_rf")
    rf_buf = Buffer(rf_name, tuple(rf_shape), out.dtype)
    v_rf = Var(f"v{lv.name}")
    loop_to_block = {lv: v_rf}
    reduce_ivs = []
    reduce_vals = []
    for f in fors:
        if f.loop_var in rvars and f.loop_var is not lv:
            nv = Var(f"v{f.loop_var.name}")
            loop_to_block[f.loop_var] = nv
            reduce_ivs.append(IterVar(nv, Range(const(0), f.extent), "reduce"))
            reduce_vals.append(f.loop_var)
    ana = Analyzer()
    rmap = {iv.var: ana.simplify(substitute(v, loop_to_block))
            for iv, v in zip(blk.iter_vars, realize.iter_values) if iv.kind == "reduce"}
    rf_idx = list(store.indices)
    rf_idx.insert(factor_axis, v_rf)
    rf_idx_t = tuple(rf_idx)
    acc = BufferLoad(rf_buf, rf_idx_t, rf_buf.dtype)
    rf_update: Stmt = BufferStore(rf_buf, binary(op, acc, substitute(rhs, rmap)), rf_idx_t)
    # A conjunct of the predicate over reduction loops only (the tail of a split reduction axis)
    # guards the update, not the block: `loop` is now spatial, and each element of the rf buffer
    # must be initialised even where its range is empty (a factor larger than the extent, or an
    # nparts split), else the write-back reads garbage. Its other variables may be sizes (the tail
    # of a split of symbolic length), never other loops.
    loops = {f.loop_var for f in fors}
    kept, guards = [], []
    for c in conjuncts(realize.predicate):
        used = free_vars(c) & loops
        if used and used <= set(loop_to_block):
            guards.append(substitute(c, loop_to_block))
        else:
            kept.append(c)
    if cond is not None:
        guards.append(substitute(cond, rmap))
    if guards:
        rf_update = IfThenElse(ana.simplify(all_(*guards)), rf_update)
    rf_ivs = tuple(iv for iv, _ in spatial) + (IterVar(v_rf, Range(const(0), ext), "spatial"),) + tuple(reduce_ivs)
    rf_block = with_regions(Block(rf_name, rf_ivs, (), (), rf_update,
                                   BufferStore(rf_buf, identity, rf_idx_t)))
    rf_realize = BlockRealize(tuple(v for _, v in spatial) + (lv,) + tuple(reduce_vals),
                              ana.simplify(all_(*kept)) if kept else const(True), rf_block)
    sch.replace(realize, rf_realize)
    # the write-back: out[s] = op(out[s], rf[s, r]) over a fresh nest
    # one spatial variable per dimension of the output, named after the index it replaces
    wb_sp = [IterVar(Var(i.name if isinstance(i, Var) else f"ax{d}"), Range(const(0), ext_d), "spatial")
             for d, (i, ext_d) in enumerate(zip(store.indices, out.shape))]
    wb_r = IterVar(Var(f"v{lv.name}"), Range(const(0), ext), "reduce")
    wb_idx = tuple(iv.var for iv in wb_sp)
    wb_rf_idx = list(wb_idx)
    wb_rf_idx.insert(factor_axis, wb_r.var)
    wb_store = BufferStore(out, binary(op, BufferLoad(out, wb_idx, out.dtype),
                                       BufferLoad(rf_buf, tuple(wb_rf_idx), rf_buf.dtype)), wb_idx)
    wb_block = with_regions(Block(blk.name, tuple(wb_sp) + (wb_r,), (), (), wb_store,
                                   BufferStore(out, identity, wb_idx)))
    loop_vars = [Var(iv.var.name) for iv in wb_sp] + [Var(lv.name)]
    nest: Stmt = BlockRealize(tuple(loop_vars), const(True), wb_block)
    for v, iv in reversed(list(zip(loop_vars, wb_sp + [wb_r]))):
        nest = For(v, const(0), iv.dom.extent, "serial", nest)
    root = sch.root_block()
    sch.set_root(replace(root, body=insert_in_body(root.body, nest, after_writer_of={rf_buf}),
                         alloc_buffers=root.alloc_buffers + (rf_buf,)))
    rf_rv = sch.new_block_rv(rf_block.name)
    # readers of the output inside the loop nest of the reduction need the write-back there
    rf_now = sch.get_realize(rf_rv)
    readers = [r for r in sch.all_realizes() if r.block.name not in (blk.name, "root", rf_block.name)
               and reads_buffer(r.block, {out})]
    readers = same_nest(sch, rf_now, readers)
    loop = common_loop(sch, [rf_now, *readers]) if readers else None
    if loop is not None:
        sch.reverse_compute_at(sch.new_block_rv(blk.name), sch.new_loop_rv(loop.loop_var))
    return rf_rv
