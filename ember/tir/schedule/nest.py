"""Shared machinery for primitives that move blocks: detaching a block's own loops, building a
fresh loop nest over a region, and placing a nest before its first reader or after its last
writer inside a loop body.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from ..arith import Analyzer
from ..expr import Binary, BufferLoad, PrimExpr, Var, all_, as_int, const
from ..expr_functor import any_node, free_vars, substitute
from ..functor import collect, mutate_stmt, stmt_exprs
from ..region import Interval
from ..stmt import Block, BlockRealize, BufferStore, For, SeqStmt, Stmt, seq
from .state import BlockRV, Schedule


def names_in_use(sch: Schedule) -> set[str]:
    """Every block and buffer name of the function: blocks are found by name, so a block a
    primitive adds must not take one."""
    taken = {r.block.name for r in sch.all_realizes()}
    taken |= {b.name for b in (*sch.root_block().alloc_buffers, *sch.mod.params)}
    for r in sch.all_realizes():
        taken |= {b.name for b in r.block.alloc_buffers}
    return taken


def exclusive_top(path: list[Stmt]) -> Stmt:
    """The outermost statement on `path` (ending at a BlockRealize) that holds only that block:
    the block's own loops end there."""
    top = path[-1]
    for node in reversed(path[:-1]):
        if isinstance(node, For) and node.body is top:
            top = node
        else:
            break
    return top


def remove_stmt(root: Stmt, target: Stmt) -> Stmt:
    """Remove target from the tree, dropping loops left empty."""
    empty = SeqStmt(())

    def f(s):
        if s is target:
            return empty
        if isinstance(s, SeqStmt):
            kept = tuple(x for x in s.stmts if not (isinstance(x, SeqStmt) and not x.stmts))
            if len(kept) != len(s.stmts):
                return seq(*kept) if kept else empty
        if isinstance(s, For) and isinstance(s.body, SeqStmt) and not s.body.stmts:
            return empty
        return None

    return mutate_stmt(root, f_stmt=f)


def detach(sch: Schedule, block: BlockRV) -> BlockRealize:
    """Take a block out of the function along with its own loops; return its realize."""
    path = sch.block_path(block)
    realize = path[-1]
    assert isinstance(realize, BlockRealize)
    if realize.block.name == "root":
        raise ScheduleError("the root block cannot be moved")
    top = exclusive_top(path)
    sch.mod = sch.mod.with_body(remove_stmt(sch.mod.body, top))
    return realize


def reads_buffer(s: Stmt, buffers) -> bool:
    def loads(n) -> bool:
        return isinstance(n, BufferLoad) and n.buffer in buffers

    return any(any_node(e, loads) for st in collect(s, lambda _: True) for e in stmt_exprs(st))


def writes_buffer(s: Stmt, buffers) -> bool:
    return bool(collect(s, lambda st: isinstance(st, BufferStore) and st.buffer in buffers))


def realizes_in(s: Stmt) -> list[BlockRealize]:
    return collect(s, lambda st: isinstance(st, BlockRealize))


def output_buffers(block: Block) -> list:
    return [w.buffer for w in block.writes]


def check_writes_its_point(block: Block, primitive: str) -> None:
    """The block stores each output at exactly its spatial iteration point (as te.compute does)."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind == "spatial"]
    for st in collect(block.body, lambda x: isinstance(x, BufferStore)):
        if len(st.indices) != len(spatial) or any(i is not v for i, v in zip(st.indices, spatial)):
            raise ScheduleError(
                f"{primitive}: block {block.name!r} does not write its outputs at its own iteration "
                "point, so the region it computes cannot be derived"
            )


def loop_analyzer(path: list[Stmt]) -> Analyzer:
    """An analyzer knowing the ranges of the loops on path."""
    ana = Analyzer()
    for s in path:
        if isinstance(s, For):
            ana.bind_range(s.loop_var, s.min, s.extent)
    return ana


def conjuncts(e: PrimExpr) -> list[PrimExpr]:
    if isinstance(e, Binary) and e.op == "&&":
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def iter_predicate(sch: Schedule, block: BlockRV, primitive: str) -> list[PrimExpr]:
    """The block's predicate over its iteration variables, for a primitive that rebuilds its
    loops: the old loop variables go away, and a conjunct over them (the tail guard of a
    non-dividing split, or of an rfactor's partial axis) must survive as a condition on the
    points the block computes. Each binding v = rest + u, with u one of the loops and rest free
    of it, gives u = v - rest. A conjunct that still names a loop after that (the inner guard of
    a split of a split loop: which loop iteration visits a point, not which points) is dropped
    where the block's regions are in bounds over its whole domain, and refused elsewhere."""
    realize = sch.get_realize(block)
    loops = {f.loop_var for f in sch.loops_of(block)}
    ana = Analyzer()
    for iv in realize.block.iter_vars:
        ana.bind_range(iv.var, iv.dom.min, iv.dom.extent)
    solved: dict[Var, PrimExpr] = {}
    for iv, b in zip(realize.block.iter_vars, realize.iter_values):
        for u in sorted(free_vars(b) & loops - set(solved), key=lambda x: x.name, reverse=True):
            rest = ana.simplify(b - u)
            if u not in free_vars(rest):
                solved[u] = ana.simplify(iv.var - rest)
                break
    carried = []
    for c in conjuncts(realize.predicate):
        rewritten = ana.simplify(substitute(c, solved))
        if not free_vars(rewritten) & loops:
            carried.append(rewritten)
        elif not in_bounds_over_domain(realize.block, ana):
            raise ScheduleError(
                f"{primitive}: the predicate {c} of block {realize.block.name!r} is not a condition on its "
                "iteration variables, and its accesses are not in bounds over its whole domain without it"
            )
    # what the domain implies, the new nest keeps (its loops or its domain guards do)
    return [c for c in carried if not ana.can_prove(c)]


def in_bounds_over_domain(block: Block, ana: Analyzer) -> bool:
    """Every region the block reads or writes lies inside its buffer, for each point of its
    domain (ana knows the domain)."""
    return all(ana.can_prove(r.min >= 0) and ana.can_prove(r.min + r.extent <= d)
               for br in (*block.reads, *block.writes) for r, d in zip(br.region, br.buffer.shape))


def nest_over(realize: BlockRealize, ranges: dict[Var, Interval], ana: Analyzer,
              carried: list[PrimExpr]) -> Stmt:
    """A fresh loop nest for the block: iteration variable v in `ranges` runs over its interval
    (lo + ax), the others over their whole domain; a predicate keeps v inside its domain where
    the interval may stick out, and keeps each condition of `carried` (the block's old predicate
    over its iteration variables, from iter_predicate) that the new loops do not prove."""
    block = realize.block
    loops: list[tuple[Var, PrimExpr]] = []
    values: list[PrimExpr] = []
    conds: list[PrimExpr] = []
    with ana.scope():
        for iv in block.iter_vars:
            ax = Var(iv.var.name)
            if iv.var in ranges:
                r = ranges[iv.var]
                ext = ana.simplify(r.hi - r.lo + 1)
                if as_int(ext) is None:
                    _, bound = ana.const_int_bound(ext)
                    ext = const(bound) if bound is not None else ext
                val = ana.simplify(r.lo + ax)
                conds += [val >= iv.dom.min, val < iv.dom.min + iv.dom.extent]
            else:
                ext = iv.dom.extent
                val = ana.simplify(iv.dom.min + ax)
            ana.bind_range(ax, const(0), ext)
            loops.append((ax, ext))
            values.append(val)
        at = {iv.var: v for iv, v in zip(block.iter_vars, values)}
        conds += [substitute(c, at) for c in carried]
        conds = [c for c in conds if not ana.can_prove(c)]
        pred = ana.simplify(all_(*conds)) if conds else const(True)
    body: Stmt = BlockRealize(tuple(values), pred, block)
    for v, ext in reversed(loops):
        body = For(v, const(0), ext, "serial", body)
    return body


def insert_in_body(loop_body: Stmt, new: Stmt, *, before_reader_of=None, after_writer_of=None) -> Stmt:
    """Put `new` into a loop body: before the first child that reads `before_reader_of`, or after
    the last child that writes `after_writer_of`."""
    children = list(loop_body.stmts) if isinstance(loop_body, SeqStmt) else [loop_body]
    if before_reader_of is not None:
        pos = next((k for k, c in enumerate(children) if reads_buffer(c, before_reader_of)), len(children))
    else:
        pos = max((k + 1 for k, c in enumerate(children) if writes_buffer(c, after_writer_of)), default=0)
    children.insert(pos, new)
    return seq(*children)


def replace_loop_body(sch: Schedule, loop: For, body: Stmt) -> None:
    sch.replace(loop, replace(loop, body=body))


def same_nest(sch: Schedule, anchor: BlockRealize, others: list[BlockRealize]) -> list[BlockRealize]:
    """Those of `others` inside the same top-level loop nest as `anchor`."""
    root = sch.root_block()
    tops = list(root.body.stmts) if isinstance(root.body, SeqStmt) else [root.body]
    top = next(t for t in tops if any(r is anchor for r in realizes_in(t)))
    return [o for o in others if any(r is o for r in realizes_in(top))]


def common_loop(sch: Schedule, realizes: list[BlockRealize]) -> For | None:
    """The innermost loop enclosing every one of the given blocks, if any."""
    paths = [[x for x in sch.find_path(lambda st, r=r: st is r) if isinstance(x, For)] for r in realizes]
    common = None
    for level in zip(*paths):
        if all(f is level[0] for f in level):
            common = level[0]
        else:
            break
    return common


def check_sole_writer(sch: Schedule, realize: BlockRealize, primitive: str) -> None:
    """The block's outputs are written by no other block (an init block shares them with its
    reduction, and moving or inlining one of the two alone would change the result)."""
    outs = {w.buffer for w in realize.block.writes}
    for r in sch.all_realizes():
        if r is not realize and r.block.name != "root" and writes_buffer(r.block, outs):
            raise ScheduleError(
                f"{primitive}: block {realize.block.name!r} is not the only block writing "
                f"{', '.join(sorted(b.name for b in outs))}; block {r.block.name!r} writes it too"
            )
