"""Region analysis: which elements of a buffer a piece of loop IR touches.

Intervals are symbolic: each access index is evaluated over the ranges of the loop variables
that vary (those inside the loop of interest), while every other variable stays a point. The
result is a (min, max) pair of expressions per dimension, simplified; that is what compute_at
needs to know how much of a producer to compute per iteration of a consumer loop (Halide's
bounds inference, TVM's InferBound), and what buffer compaction needs to shrink an allocation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..errors import ScheduleError
from .arith import Analyzer
from .expr import Binary, BufferLoad, Const, PrimExpr, Var, as_int, const, max_, min_
from .functor import free_vars, stmt_children, stmt_exprs, substitute, visit_expr, visit_stmt
from .intrin_regions import call_boxes, is_tensorized
from .stmt import Block, BlockRealize, BufferRegion, BufferStore, CallRoutine, For, Range, Stmt


@dataclass(frozen=True)
class Interval:
    lo: PrimExpr
    hi: PrimExpr


def interval_of(e: PrimExpr, dom: dict[Var, Interval], ana: Analyzer) -> Interval | None:
    """Bounds of e when each var in dom ranges over its interval (others are fixed); None if
    e depends on a varying var in a way these rules cannot bound."""
    if not (free_vars(e) & dom.keys()):
        return Interval(e, e)
    match e:
        case Var():
            return dom[e]
        case Binary("+" | "-" as op, a, b, _):
            ia, ib = interval_of(a, dom, ana), interval_of(b, dom, ana)
            if ia is None or ib is None:
                return None
            if op == "+":
                return Interval(ia.lo + ib.lo, ia.hi + ib.hi)
            return Interval(ia.lo - ib.hi, ia.hi - ib.lo)
        case Binary("*", a, b, _):
            c, x = (as_int(b), a) if as_int(b) is not None else (as_int(a), b)
            if c is None:
                return None
            ix = interval_of(x, dom, ana)
            if ix is None:
                return None
            return Interval(ix.lo * c, ix.hi * c) if c >= 0 else Interval(ix.hi * c, ix.lo * c)
        case Binary("//", a, b, _) if (c := as_int(b)) is not None and c > 0:
            ia = interval_of(a, dom, ana)
            return None if ia is None else Interval(ia.lo // c, ia.hi // c)
        case Binary("%", a, b, _) if (c := as_int(b)) is not None and c > 0:
            # x % c is x - c * (x // c): x shifted where x // c is one value over the interval (a
            # tile of rows within one image row, its flat row index r % OW)
            ia = interval_of(a, dom, ana)
            if ia is not None and as_int(ana.simplify(ia.hi // c - ia.lo // c)) == 0:
                return Interval(ia.lo % c, ia.lo % c + (ia.hi - ia.lo))
            return Interval(const(0), const(c - 1))
        case Binary("min" | "max" as op, a, b, _):
            ia, ib = interval_of(a, dom, ana), interval_of(b, dom, ana)
            if ia is None or ib is None:
                return None
            f = min_ if op == "min" else max_
            return Interval(f(ia.lo, ib.lo), f(ia.hi, ib.hi))
    lo, hi = ana.const_int_bound(e)
    if lo is None or hi is None:
        return None
    return Interval(const(lo), const(hi))


def union(a: Interval, b: Interval, ana: Analyzer) -> Interval:
    return Interval(ana.simplify(min_(a.lo, b.lo)), ana.simplify(max_(a.hi, b.hi)))


def accesses(s: Stmt, buffer, *, loads=True, stores=True) -> list[tuple[PrimExpr, ...]]:
    """The index tuples of every load and/or store of `buffer` in s (block bodies included)."""
    return accesses_of(s, (buffer,), loads=loads, stores=stores)[buffer]


def accesses_of(s: Stmt, buffers: Iterable, *, loads=True, stores=True) -> dict:
    """`accesses` of each of `buffers`, in one walk of s: buffer -> its index tuples, in order."""
    found: dict = {b: [] for b in buffers}

    def on_expr(e):
        if loads and isinstance(e, BufferLoad) and e.buffer in found:
            found[e.buffer].append(e.indices)

    def on_stmt(st):
        if stores and isinstance(st, BufferStore) and st.buffer in found:
            found[st.buffer].append(st.indices)
        for e in stmt_exprs(st):
            visit_expr(e, on_expr)

    visit_stmt(s, on_stmt)
    return found


def block_regions(block: Block) -> tuple[tuple[BufferRegion, ...], tuple[BufferRegion, ...]]:
    """Read and write regions of a block, in terms of its iteration variables."""
    ana = Analyzer()
    written: dict = {}
    read: dict = {}

    def collect(st):
        if isinstance(st, BufferStore):
            written.setdefault(st.buffer, []).append(st.indices)
        for e in stmt_exprs(st):
            visit_expr(e, lambda n: read.setdefault(n.buffer, []).append(n.indices)
                       if isinstance(n, BufferLoad) else None)

    visit_stmt(block.body, collect)
    if block.init is not None:
        visit_stmt(block.init, collect)

    def regions(table, skip=()):
        out = []
        for buf, idx_list in table.items():
            if buf in skip:
                continue
            ivs = merge_indices(idx_list, {}, ana)
            out.append(BufferRegion(buf, tuple(Range(i.lo, ana.simplify(i.hi - i.lo + 1)) for i in ivs)))
        return tuple(out)

    return regions(read, skip=written), regions(written)


def with_regions(block: Block) -> Block:
    """The block with its read and write regions recomputed from its body."""
    reads, writes = block_regions(block)
    return replace(block, reads=reads, writes=writes)


def reduce_loop_vars(realize: BlockRealize) -> set[Var]:
    """The loop variables a block's reduction axes are bound to."""
    out: set[Var] = set()
    for iv, v in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind == "reduce":
            out |= free_vars(v)
    return out


def merge_indices(idx_list: Iterable[tuple[PrimExpr, ...]], dom: dict[Var, Interval],
                  ana: Analyzer) -> list[Interval]:
    """Per-dimension union of the intervals of several index tuples."""
    result: list[Interval] | None = None
    for idx in idx_list:
        ivs = []
        for i in idx:
            iv = interval_of(_undivided(i, ana), dom, ana)
            if iv is None:
                raise ScheduleError(f"cannot bound the index {i} of an access")
            ivs.append(Interval(ana.simplify(iv.lo), ana.simplify(iv.hi)))
        result = ivs if result is None else [union(a, b, ana) for a, b in zip(result, ivs)]
    assert result is not None
    return result


def _undivided(e: PrimExpr, ana: Analyzer) -> PrimExpr:
    """e simplified when that leaves fewer floor divisions and modulos, else e as it is. A consumer
    of a reshape that splits an axis, inlined into one that merges it back, reads its producer at
    (x // d) * d + x % d, which is x (rows of a gemm split into a batch and rows, in its epilogue);
    the interval rules would bound it only loosely, or not at all when d is symbolic."""
    divisions = _divisions(e)
    if not divisions:
        return e
    simple = ana.simplify(e)
    return simple if _divisions(simple) < divisions else e


def _divisions(e: PrimExpr) -> int:
    found = []
    visit_expr(e, lambda n: found.append(n) if isinstance(n, Binary) and n.op in ("//", "%") else None)
    return len(found)


def region_under(loop_body: Stmt, buffer, *, loads: bool, stores: bool,
                 ana: Analyzer) -> list[Interval] | None:
    """The region of `buffer` touched by the blocks and tensorized calls inside `loop_body` (a
    call's box: ember.tir.intrin_regions), as intervals in terms of the variables bound outside
    it: block bindings are substituted and the loops inside loop_body vary over their ranges.
    None if nothing in loop_body touches the buffer."""
    return regions_under(loop_body, (buffer,), loads=loads, stores=stores, ana=ana)[0]


def regions_under(loop_body: Stmt, buffers: Sequence, *, loads: bool, stores: bool,
                  ana: Analyzer) -> list[list[Interval] | None]:
    """`region_under` of each of `buffers`, in one walk of `loop_body` (buffer compaction asks it
    of every scratch buffer placed at one loop: a row kernel's 21 each walked the same body)."""
    dom = _LoopRanges(ana)
    idx_all: dict = {b: [] for b in buffers}

    def walk(st: Stmt):
        match st:
            case For(v, mn, ext, _, body):
                dom.loops[v] = mn, ext
                walk(body)
            case BlockRealize(vals, _, block) if is_leaf(block):
                bind = {iv.var: val for iv, val in zip(block.iter_vars, vals)}
                for b, found in accesses_of(block, idx_all, loads=loads, stores=stores).items():
                    idx_all[b].extend(tuple(substitute(i, bind) for i in idx) for idx in found)
            case BlockRealize(_, _, block):
                walk(block.body)
            case CallRoutine() if is_tensorized(st):
                for b, found in idx_all.items():
                    found.extend(call_boxes(st, b, ana) or ())
            case _:
                for child in stmt_children(st):
                    walk(child)

    walk(loop_body)
    return [merge_indices(idx_all[b], dom, ana) if idx_all[b] else None for b in buffers]


class _LoopRanges:
    """The interval of each loop variable under a statement, as interval_of reads a domain (its
    keys, an item), each simplified when first read: most loops under a buffer's loop bound none
    of its indices (a row kernel's 42 buffers each walked its 100 loops, a simplification each)."""

    def __init__(self, ana: Analyzer):
        self.ana, self.loops, self._made = ana, {}, {}

    def keys(self):
        return self.loops.keys()

    def __getitem__(self, v: Var) -> Interval:
        if v not in self._made:
            mn, ext = self.loops[v]
            self._made[v] = Interval(mn, self.ana.simplify(mn + ext - 1))
        return self._made[v]


def const_extent(iv: Interval, ana: Analyzer) -> int | None:
    ext = ana.simplify(iv.hi - iv.lo + 1)
    if isinstance(ext, Const):
        return int(ext.value)
    _, hi = ana.const_int_bound(ext)
    return hi


def is_leaf(block: Block) -> bool:
    """A block whose body holds no other block (every block but the root, before blockize)."""
    found = []
    visit_stmt(block.body, lambda st: found.append(st) if isinstance(st, BlockRealize) else None)
    return not found
