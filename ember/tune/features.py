"""Features of a scheduled kernel for the cost model: a fixed-length vector that says how much
arithmetic each store does, in what loops, and how it walks memory (Ansor's per-store features).

Extraction reads the *lowered* function, but for unrolling: blocks are gone, intermediate
buffers are compacted to the tile that uses them (the local accumulator of a register tile is a
few hundred bytes, not the whole output), every access is one flat index, and vectorized loops
are vector stores (the lanes count as the store's innermost loop; a loop the vectorizer had to
leave to the C compiler is a `vector_fallback`). Unrolled loops stay loops, marked (a loop under
a `pragma_auto_unroll_max_step` annotation counts as unrolled when the unroll pass would unroll
it): unrolling only copies code, and folding the copies is most of the cost of lowering (for
the tiled 1024^3 GEMM of benchmarks/record_cost_data.py --timings, full lowering takes tens to
hundreds of milliseconds, this a few), while the search extracts the features of thousands of
candidates.

For every store (a `BufferStore`, with the loops around it):
- arithmetic, by kind, times the iterations of its loops: float add/sub, mul, fused
  multiply-add (a mul feeding an add), div, math calls, compare/min/max, select, cast, integer
  (index) arithmetic and integer compares;
- its loops: iterations, depth, the extent of the parallel loops, the vector lanes, the
  unrolled extent and the auto-unroll limit, the innermost extent, a guard, accumulation, and
  the bytes it moves into each cache level (and flops per byte), from the working set of the
  outermost loop whose body fits;
- for the buffer it writes and the three it reads most: bytes touched, unique bytes and cache
  lines (the footprint of the flat index over the loops, where a loop the index does not use
  adds nothing), reuse (touched / unique), the stride along the innermost loop (contiguous,
  strided, broadcast), where it lives (local, global, or vector registers: a local buffer
  accessed at constant offsets once unrolled), and the innermost loop it is reused across: its
  extent, the iterations and the unique bytes between two uses.

The vector holds the features of the TOP_STORES most expensive stores (iterations times
operations and accesses), most expensive first, zeros where a function has fewer; then sums
over all stores (arithmetic by kind, bytes by scope); then whole-function counts (stores,
loops by kind, allocations and how often the heap ones run, bytes in registers, the code that
unrolling makes, flops). Counts that grow with the problem are log2(1 + x); flags are 0 or 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from ..codegen.registers import MAX_REGISTERS
from ..errors import ArgumentTypeError
from ..target import Target
from ..tir import dtype as dt
from ..tir.expr import (
    ARITH_OPS,
    COMPARE_OPS,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    Call,
    Cast,
    Const,
    PrimExpr,
    Ramp,
    Select,
    Var,
)
from ..tir.functor import free_vars, visit_expr
from ..tir.lower import lower
from ..tir.stmt import Allocate, BlockRealize, BufferStore, For, IfThenElse, PrimFunc, SeqStmt, Stmt
from ..tir.transform.unroll import AUTO_UNROLL, MAX_UNROLL, _iterations
from .tuner import tuner_rules

# the lowering passes left out: unrolling only copies code that the loop marks describe
FEATURE_LOWER_SKIP = ("unroll", "simplify_unrolled", "simplify_vectors")
LANES = Var("lanes")  # the loop over the lanes of a vector store, innermost
TOP_STORES = 3
READ_SLOTS = 3
CACHE_LINE = 64
CACHE_BYTES = (32 << 10, 1 << 20, 32 << 20)  # L1, L2, L3 (shared) of a typical x86 server core

ARITH = ("float_addsub", "float_mul", "float_fma", "float_div", "float_math", "float_cmp", "select", "cast",
         "int_arith", "int_cmp")
LOOP = ("iterations", "loops", "parallel_extent", "iterations_per_parallel_step", "vector_lanes", "vector_innermost",
        "vector_fallback",
        "unrolled_extent", "unrolled_loops", "auto_unroll_limit", "innermost_extent", "guarded", "accumulates",
        "parallel_outermost", "l1_traffic", "l2_traffic", "l3_traffic", "l1_intensity", "l2_intensity")
BUFFER = ("present", "reads", "writes", "local", "bytes", "unique_bytes", "unique_lines", "reuse_ratio", "stride",
          "contiguous", "strided", "broadcast", "reuse_count", "reuse_distance_iterations", "reuse_distance_bytes",
          "accesses", "registers")
SUMS = (*ARITH, "global_bytes", "global_unique_bytes", "local_bytes", "local_unique_bytes")
FUNCTION = ("stores", "loop_nests", "loops", "parallel_loops", "vector_stores", "unrolled_loops", "max_depth",
            "allocations", "local_alloc_bytes", "global_alloc_bytes", "register_bytes", "heap_allocations",
            "unrolled_statements", "flops")
FLOPS = ("float_addsub", "float_mul", "float_div", "float_math", "float_cmp", "select")  # fma: a mul and an add
SLOTS = ("write", *(f"read{k}" for k in range(READ_SLOTS)))


def feature_names() -> list[str]:
    """The name of every entry of the feature vector, in order."""
    store = [*ARITH, *LOOP, *(f"{slot}.{name}" for slot in SLOTS for name in BUFFER)]
    return [*(f"store{k}.{name}" for k in range(TOP_STORES) for name in store),
            *(f"sum.{name}" for name in SUMS), *(f"func.{name}" for name in FUNCTION)]


STORE_LENGTH = len(ARITH) + len(LOOP) + len(SLOTS) * len(BUFFER)
FEATURE_LENGTH = len(feature_names())


def lower_for_features(func: PrimFunc) -> PrimFunc:
    """The function as the features see it: lowered (vector stores one vector wide, whatever
    the registers), but unrolled loops kept as marked loops."""
    return lower(func, skip=FEATURE_LOWER_SKIP)


def extract_features(func, target: Target | None = None) -> np.ndarray:
    """The feature vector (float32, FEATURE_LENGTH) of a scheduled function (`sch.mod`, or the
    Schedule itself), whose register-resident buffers are judged by the SIMD width of `target`
    (default: C on this machine) and its heap allocations by the stack limit of the target's
    backend (its tuner rules); a function without blocks is taken as lowered already
    (lower_for_features)."""
    target = target or Target()
    stack_limit = tuner_rules(target).stack_limit
    func = getattr(func, "mod", func)
    if not isinstance(func, PrimFunc):
        raise ArgumentTypeError(f"extract_features takes a PrimFunc or a Schedule, got {type(func).__name__}")
    if isinstance(func.body, BlockRealize):
        func = lower_for_features(func)
    walk = _Walk()
    walk.stmt(func.body, (), 0, False)
    buffers = [_site_buffers(site) for site in walk.sites]
    registers = _register_buffers(walk.sites, buffers, target.vector_bytes or 4)
    stores = [_store(site, b, registers) for site, b in zip(walk.sites, buffers)]
    out = np.zeros(FEATURE_LENGTH, dtype=np.float64)
    for k, s in enumerate(sorted(stores, key=lambda s: -s.cost)[:TOP_STORES]):
        out[k * STORE_LENGTH:(k + 1) * STORE_LENGTH] = s.vector
    sums = np.zeros(len(SUMS))
    for s in stores:
        sums += s.sums
    at = TOP_STORES * STORE_LENGTH
    out[at:at + len(SUMS)] = _log(sums)
    out[at + len(SUMS):] = _function_features(walk, stores, registers, stack_limit)
    return out.astype(np.float32)


def _log(x):
    return np.log2(1.0 + np.asarray(x, dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# Where the stores are: the loops around each


@dataclass(frozen=True)
class Loop:
    var: Var
    extent: int
    # serial, parallel, unrolled (marked, or under an auto-unroll limit), vectorized (the lanes of
    # a vector store, or a loop the vectorizer left to the C compiler)
    kind: str
    unroll_limit: int  # the auto-unroll limit in force around the loop (0: none)


@dataclass(frozen=True)
class Site:
    store: BufferStore
    loops: tuple[Loop, ...]
    guarded: bool


class _Walk:
    def __init__(self):
        self.sites: list[Site] = []
        self.loops: list[Loop] = []
        self.allocs: list[tuple[Buffer, tuple[Loop, ...]]] = []  # with the loops around each
        self.loop_nests = 0

    def stmt(self, s: Stmt, loops: tuple[Loop, ...], limit: int, guarded: bool) -> None:
        match s:
            case For(var, _, extent, kind, body):
                n = _extent(extent)
                if kind == "unrolled" and n > MAX_UNROLL:
                    kind = "serial"
                elif kind == "serial" and limit and (_iterations(s) or limit + 1) <= limit:
                    kind = "unrolled"
                loop = Loop(var, n, kind, limit)
                self.loops.append(loop)
                self.loop_nests += not loops
                self.stmt(body, (*loops, loop), max(limit, int(s.annotation(AUTO_UNROLL) or 0)), guarded)
            case SeqStmt(stmts):
                for x in stmts:
                    self.stmt(x, loops, limit, guarded)
            case IfThenElse(_, then_case, else_case):
                for x in (then_case, else_case):
                    if x is not None:
                        self.stmt(x, loops, limit, True)
            case Allocate(buf, body):
                self.allocs.append((buf, loops))
                self.stmt(body, loops, limit, guarded)
            case BufferStore(_, value):
                lanes = dt.lanes_of(value.dtype)
                if lanes > 1:
                    loops = (*loops, Loop(LANES, lanes, "vectorized", limit))
                self.sites.append(Site(s, loops, guarded))


def _extent(e: PrimExpr) -> int:
    n = e.value if isinstance(e, Const) else None
    return max(int(n), 0) if isinstance(n, int) else 1


# ---------------------------------------------------------------------------------------------
# Flat indices as sums of terms: coefficient * atom (a loop variable, or an expression of some)


@dataclass(frozen=True)
class Term:
    coef: int
    key: tuple  # identifies the atom
    loops: frozenset  # the loop variables the atom depends on
    count: int  # distinct values the atom takes over those loops


@dataclass(frozen=True)
class Access:
    buffer: Buffer
    terms: tuple[Term, ...]
    offset: int
    is_write: bool

    def coef_of(self, var: Var) -> int:
        return sum(t.coef for t in self.terms if var in t.loops)


def _key(e: PrimExpr) -> tuple:
    match e:
        case Var():
            return ("v", e.uid)
        case Const(v):
            return ("c", v)
        case Binary(op, a, b):
            return (op, _key(a), _key(b))
    return ("n", id(e))


def _linear(e: PrimExpr) -> tuple[dict, int]:
    """{atom key: (coef, atom)} and the constant of an integer index expression."""
    match e:
        case Const(v) if isinstance(v, int):
            return {}, v
        case Binary("+" | "-" as op, a, b):
            (ta, ca), (tb, cb) = _linear(a), _linear(b)
            sign = 1 if op == "+" else -1
            out = dict(ta)
            for k, (c, atom) in tb.items():
                out[k] = (out.get(k, (0, atom))[0] + sign * c, atom)
            return out, ca + sign * cb
        case Binary("*", a, b):
            (ta, ca), (tb, cb) = _linear(a), _linear(b)
            if not ta:
                return {k: (c * ca, atom) for k, (c, atom) in tb.items()}, ca * cb
            if not tb:
                return {k: (c * cb, atom) for k, (c, atom) in ta.items()}, ca * cb
        case Broadcast(value):
            return _linear(value)
        case Ramp(base, Const(stride), _):
            terms, offset = _linear(base)
            terms[_key(LANES)] = (terms.get(_key(LANES), (0, LANES))[0] + stride, LANES)
            return terms, offset
    return {_key(e): (1, e)}, 0


def _bounds(terms: list[Term], offset: int) -> tuple[int, int]:
    lo = offset + sum(min(0, t.coef * (t.count - 1)) for t in terms)
    hi = offset + sum(max(0, t.coef * (t.count - 1)) for t in terms)
    return lo, hi


def _terms(e: PrimExpr, extents: dict) -> tuple[list[Term], int]:
    linear, offset = _linear(e)
    terms = []
    for key, (coef, atom) in linear.items():
        if coef:
            loops, count = _atom(atom, extents)
            terms.append(Term(coef, key, loops, count))
    return terms, offset


def _atom(atom: PrimExpr, extents: dict) -> tuple[frozenset, int]:
    if isinstance(atom, Var):
        return (frozenset([atom]), extents[atom]) if atom in extents else (frozenset(), 1)
    loops = frozenset(v for v in free_vars(atom) if v in extents)
    if LANES in extents and dt.lanes_of(atom.dtype) > 1:
        loops |= {LANES}
    count = prod(extents[v] for v in loops)
    if isinstance(atom, Binary) and atom.op in ("//", "%") and isinstance(atom.b, Const) and atom.b.value > 0:
        lo, hi = _bounds(*_terms(atom.a, extents))
        d = atom.b.value
        count = min(count, hi // d - lo // d + 1 if atom.op == "//" else min(d, hi - lo + 1))
    return loops, max(count, 1)


def _accesses(store: BufferStore, extents: dict) -> list[Access]:
    out = [Access(store.buffer, *_flat(store.indices, extents), True)]

    def on(e):
        if isinstance(e, BufferLoad):
            out.append(Access(e.buffer, *_flat(e.indices, extents), False))

    visit_expr(store.value, on)
    return out


def _flat(indices, extents) -> tuple[tuple[Term, ...], int]:
    if len(indices) != 1:
        raise ValueError(f"extract_features: an access has {len(indices)} indices; pass a scheduled function "
                         "(sch.mod) or one lowered by lower_for_features, whose accesses are flat")
    terms, offset = _terms(indices[0], extents)
    return tuple(terms), offset


# ---------------------------------------------------------------------------------------------
# Footprints


def _classes(terms, varying: set) -> tuple[dict[int, int], int]:
    """Terms that vary, by stride: {stride: values - 1 along it}, and the span of the index."""
    classes: dict[int, int] = {}
    span = 0
    for t in terms:
        if t.loops & varying:
            classes[abs(t.coef)] = classes.get(abs(t.coef), 0) + t.count - 1
            span += abs(t.coef) * (t.count - 1)
    return classes, span


def _footprint(accesses: list[Access], varying: set, elem_bytes: int) -> tuple[int, int]:
    """(distinct elements, distinct cache lines) that the accesses of one buffer touch while the
    loops in `varying` run: terms of the same stride add up their ranges (a sliding window
    i + r touches n_i + n_r - 1 values), strides multiply, and accesses that differ by a
    constant only (unrolled or stencil neighbours) widen the range of their smallest step."""
    groups: dict[tuple, tuple[Access, set[int]]] = {}
    for a in accesses:
        key = tuple((t.coef, t.key) for t in a.terms if t.loops & varying)
        groups.setdefault(key, (a, set()))[1].add(a.offset)
    size = max(1, _size(accesses[0].buffer))
    elements = lines = 0
    for access, offsets in groups.values():
        classes, span = _classes(access.terms, varying)
        distinct = sorted(offsets)
        if len(distinct) > 1:
            step = min(b - a for a, b in zip(distinct, distinct[1:]))
            classes[step] = classes.get(step, 0) + len(distinct) - 1
            span += distinct[-1] - distinct[0]
        n = min(prod(r + 1 for r in classes.values()), span + 1)
        elements += n
        lines += _lines(classes, n, elem_bytes)
    return min(elements, size), min(lines, -(-size * elem_bytes // CACHE_LINE))


def _lines(classes: dict[int, int], n: int, elem_bytes: int) -> int:
    """Cache lines of a footprint of n elements: a run along the smallest stride shares lines."""
    if not classes:
        return 1
    stride = min(classes)
    run = classes[stride] + 1
    if stride * elem_bytes >= CACHE_LINE:
        return n
    return max(1, n // run) * -(-(((run - 1) * stride + 1) * elem_bytes) // CACHE_LINE)


# ---------------------------------------------------------------------------------------------
# One store


@dataclass(frozen=True)
class StoreFeatures:
    vector: np.ndarray  # STORE_LENGTH entries
    sums: np.ndarray  # the raw counts of SUMS
    cost: float
    unrolled: int  # copies of the store that unrolling makes


def _arith(store: BufferStore) -> np.ndarray:
    counts = dict.fromkeys(ARITH, 0)

    def on(e):
        match e:
            case Binary(op, a, b, dtype) if dt.is_float(dtype) or dt.is_float(a.dtype):
                if op in ("+", "-"):
                    counts["float_addsub"] += 1
                    counts["float_fma"] += any(isinstance(x, Binary) and x.op == "*" for x in (a, b))
                elif op == "*":
                    counts["float_mul"] += 1
                elif op in ("/", "%"):
                    counts["float_div"] += 1
                elif op in ("min", "max", *COMPARE_OPS):
                    counts["float_cmp"] += 1
            case Binary(op):
                counts["int_arith" if op in ARITH_OPS else "int_cmp"] += 1
            case Call():
                counts["float_math"] += 1
            case Select():
                counts["select"] += 1
            case Cast():
                counts["cast"] += 1

    visit_expr(store.value, on)
    for i in store.indices:
        visit_expr(i, on)
    return np.array([counts[k] for k in ARITH], dtype=np.float64)


def _site_buffers(site: Site) -> list[list[Access]]:
    """The accesses of a store by buffer: the buffer it writes first, then those it reads, the
    most read first."""
    by_buffer: dict[Buffer, list[Access]] = {}
    for a in _accesses(site.store, {lp.var: lp.extent for lp in site.loops}):
        by_buffer.setdefault(a.buffer, []).append(a)
    write = by_buffer.pop(site.store.buffer)
    return [write, *sorted(by_buffer.values(), key=lambda acc: -len(acc) * _elem_bytes(acc))]


def _register_buffers(sites: list[Site], buffers: list[list[list[Access]]], vector_bytes: int) -> set[Buffer]:
    """The local buffers that code generation keeps in vector registers (codegen.registers):
    once unrolled, every access is at a constant offset (its index depends on unrolled loops
    and vector lanes only), in at most MAX_REGISTERS vectors of the host's width."""
    constant: dict[Buffer, bool] = {}
    width: dict[Buffer, int] = {}
    for site, site_buffers in zip(sites, buffers):
        unrolled = {lp.var for lp in site.loops if lp.kind == "unrolled" or lp.var is LANES}
        lanes = next((lp.extent for lp in site.loops if lp.var is LANES), 1)
        for acc in site_buffers:
            buf = acc[0].buffer
            if buf.scope == "local":
                constant[buf] = constant.get(buf, True) and all(t.loops <= unrolled for a in acc for t in a.terms)
                if acc[0].is_write:
                    width[buf] = max(width.get(buf, 1), lanes)
    out = set()
    for buf, ok in constant.items():
        register = max(1, vector_bytes * 8 // dt.bits(buf.dtype))
        if ok and _size(buf) <= MAX_REGISTERS * min(width.get(buf, 1), register):
            out.add(buf)
    return out


def _size(buf: Buffer) -> int:
    return prod(_extent(d) for d in buf.shape)


def _store(site: Site, buffers: list[list[Access]], registers: set[Buffer]) -> StoreFeatures:
    loops, store = site.loops, site.store
    iterations = prod(lp.extent for lp in loops)
    arith = _arith(store) * iterations
    write = buffers[0]
    everything = {lp.var for lp in loops}
    slots = [_buffer_features(acc, loops, iterations, everything, buffers, registers) for acc in buffers[:len(SLOTS)]]
    slots += [[0.0] * len(BUFFER)] * (len(SLOTS) - len(slots))
    sums = np.zeros(len(SUMS))
    sums[:len(ARITH)] = arith
    for acc in buffers:
        eb = _elem_bytes(acc)
        at = len(ARITH) + (2 if acc[0].buffer.scope == "local" else 0)
        sums[at] += len(acc) * iterations * eb
        sums[at + 1] += _footprint(acc, everything, eb)[0] * eb
    first = write[0]
    accumulates = any(not a.is_write and a.terms == first.terms and a.offset == first.offset for a in write)
    parallel = prod(lp.extent for lp in loops if lp.kind == "parallel")
    unrolled = prod(lp.extent for lp in loops if lp.kind == "unrolled")
    loop_features = [
        _log(iterations), len(loops), _log(parallel), _log(iterations / max(parallel, 1)),
        _log(prod(lp.extent for lp in loops if lp.kind == "vectorized")),
        float(bool(loops) and loops[-1].kind == "vectorized"),
        float(any(lp.kind == "vectorized" and lp.var is not LANES for lp in loops)),
        _log(unrolled), sum(lp.kind == "unrolled" for lp in loops),
        _log(max((lp.unroll_limit for lp in loops), default=0)),
        _log(loops[-1].extent if loops else 1), float(site.guarded), float(accumulates),
        float(bool(loops) and loops[0].kind == "parallel"),
    ]
    traffic = _traffic(buffers, loops)
    flops = sum(arith[ARITH.index(k)] for k in FLOPS)
    loop_features += [*_log(traffic), *_log([flops / max(t, 1) for t in traffic[:2]])]
    vector = np.concatenate([_log(arith), np.array(loop_features, dtype=np.float64), np.concatenate(slots)])
    accesses = sum(len(acc) for acc in buffers)
    return StoreFeatures(vector, sums, cost=iterations * (1 + accesses) + arith.sum(), unrolled=unrolled)


def _elem_bytes(accesses: list[Access]) -> int:
    return max(1, dt.bits(accesses[0].buffer.dtype) // 8)


def _traffic(buffers: list[list[Access]], loops: tuple[Loop, ...]) -> list[float]:
    """Bytes moved into each cache level (CACHE_BYTES): the working set of the outermost loop
    whose body fits the cache, brought in once per iteration of the loops outside it."""
    working_sets = []
    for k in range(len(loops) + 1):
        inside = {lp.var for lp in loops[k:]}
        working_sets.append(sum(_footprint(acc, inside, _elem_bytes(acc))[0] * _elem_bytes(acc) for acc in buffers))
    out = []
    for capacity in CACHE_BYTES:
        k = next((k for k, size in enumerate(working_sets) if size <= capacity), len(loops))
        out.append(prod(lp.extent for lp in loops[:k]) * working_sets[k])
    return out


def _reuse_loop(accesses: list[Access], loops: tuple[Loop, ...]) -> int | None:
    """The index of the innermost loop (of more than one iteration) that the buffer's accesses
    do not depend on: its iterations reuse the same elements. None: no reuse."""
    used = set().union(*(t.loops for a in accesses for t in a.terms))
    return next((k for k in range(len(loops) - 1, -1, -1) if loops[k].var not in used and loops[k].extent > 1),
                None)


def _buffer_features(accesses: list[Access], loops, iterations: int, everything: set,
                     buffers: list[list[Access]], registers: set[Buffer]) -> list[float]:
    eb = _elem_bytes(accesses)
    touched = len(accesses) * iterations * eb
    unique, lines = _footprint(accesses, everything, eb)
    stride = abs(accesses[0].coef_of(loops[-1].var)) if loops else 0
    reuse = _reuse_loop(accesses, loops)
    reuse_features = [0.0, 0.0, 0.0]
    if reuse is not None:
        inside = {lp.var for lp in loops[reuse + 1:]}
        working_set = sum(_footprint(acc, inside, _elem_bytes(acc))[0] * _elem_bytes(acc) for acc in buffers)
        reuse_features = [_log(loops[reuse].extent), _log(prod(lp.extent for lp in loops[reuse + 1:])),
                          _log(working_set)]
    return [
        1.0, float(any(not a.is_write for a in accesses)), float(any(a.is_write for a in accesses)),
        float(accesses[0].buffer.scope == "local"), _log(touched), _log(unique * eb), _log(lines),
        _log(touched / max(unique * eb, 1)), _log(stride), float(stride == 1), float(stride > 1),
        float(stride == 0), *reuse_features, float(sum(not a.is_write for a in accesses)),
        float(accesses[0].buffer in registers),
    ]


# ---------------------------------------------------------------------------------------------
# The whole function


def _function_features(walk: _Walk, stores: list[StoreFeatures], registers: set[Buffer],
                       stack_limit: int) -> np.ndarray:
    def nbytes(buf):
        return _size(buf) * dt.bits(buf.dtype) // 8

    def alloc_bytes(scope):
        return sum(nbytes(b) for b, _ in walk.allocs if b.scope == scope)

    # aligned_alloc and free at every iteration of the loops around: global scratch, and local
    # scratch too large for the stack
    heap = sum(prod(lp.extent for lp in loops) for b, loops in walk.allocs
               if b.scope != "local" or nbytes(b) > stack_limit)

    kinds = [lp.kind for lp in walk.loops]
    flops = sum(s.sums[ARITH.index(k)] for s in stores for k in FLOPS)
    return np.array([
        len(stores), walk.loop_nests, len(walk.loops), kinds.count("parallel"),
        sum(any(lp.var is LANES for lp in site.loops) for site in walk.sites),
        kinds.count("unrolled"), max((len(site.loops) for site in walk.sites), default=0), len(walk.allocs),
        _log(alloc_bytes("local")), _log(alloc_bytes("global")), _log(sum(nbytes(b) for b in registers)),
        _log(heap), _log(sum(s.unrolled for s in stores)), _log(flops),
    ], dtype=np.float64)
