"""GPU kernels of the scans (ember.ops.cumsum: cumsum and cumprod, inclusive or exclusive, forward
or reverse), written as loop IR in place of the operator's compute (Family.computes): te has no
scan, and the operator's blocked form (each element's block total and the totals before its
block, reductions of the row's length) keeps those totals in buffers as long as the row, which a
row of symbolic length cannot have on a GPU (no shared or register array of unknown size).

- along the last axis (the other axes' elements, static or symbolic, are the rows): a row a block
  of up to THREADS threads, read in chunks of THREADS x PER_THREAD elements; each thread scans its
  PER_THREAD consecutive elements of a chunk in order, the threads' totals are scanned across the
  block in shared memory (log2(THREADS) steps, each thread adding the total 2^step before its own,
  from one array into another: a Hillis-Steele scan, a barrier a step), and each element is
  combined with the totals of the threads before its own and the running total of the chunks
  before, which every thread carries and advances by the chunk's total. Work per element: about
  2 + log2(THREADS) / PER_THREAD operations, whatever the row's length; a row is one block, so a
  few long rows leave most of the GPU idle (a scan across blocks is not written);
- along another axis: a thread a column (the axes before and after, fused; consecutive threads
  read consecutive elements), walking the axis and carrying its total in a register.

Sums accumulate as the operator's do (float32 for half types), the output stored in the input's
type; positions past the row's end are the identity (0, 1), stored nowhere.
"""

from __future__ import annotations

import math

from ... import te
from ...ops.common import normalize_axis, te_shape
from ...ops.gpu_loops import batch_index, ceil_div, extent, serial, threads
from ...ops.reduction import acc_dtype
from ...tir import dtype as dt
from ...tir.expr import Buffer, BufferLoad, Var, binary, cast, const, convert, select
from ...tir.stmt import THREAD_BINDING, Allocate, BufferStore, For, IfThenElse, SeqStmt
from . import computes

THREADS = 256  # the most threads a block takes
# consecutive elements a thread scans in a chunk of the row (a chunk: THREADS x PER_THREAD); not
# measured on a GPU yet: benchmarks/cuda_operators.py's scans part times 1, 2, 4 and 8
PER_THREAD = 4
COMBINE = {"cumsum": (lambda a, b: a + b, 0), "cumprod": (lambda a, b: a * b, 1)}


def scan_compute(op: str, per_thread: int = PER_THREAD):
    """The compute of `op` as the GPU's kernel, each thread scanning `per_thread` consecutive elements
    of a chunk."""
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axis = normalize_axis(op, attrs["axis"], x.ndim)

        def build(ins, outs):
            return scan_kernel(op, ins[0], outs[0], axis, attrs["exclusive"], attrs["reverse"], per_thread)

        return [te.extern([(te_shape(out_types[0], inputs), x.dtype)], [x], build, name=op)[0]]

    return compute


computes("cumsum")(scan_compute("cumsum"))
computes("cumprod")(scan_compute("cumprod"))


def scan_kernel(op: str, xb: Buffer, ob: Buffer, axis: int, exclusive: bool, reverse: bool,
                per_thread: int = PER_THREAD) -> For:
    """The scan of xb along `axis` into ob (see the module doc)."""
    shape = [extent(d) for d in xb.shape]
    outer, length, inner = shape[:axis], shape[axis], shape[axis + 1:]
    combine, identity = COMBINE[op]
    wide = acc_dtype(xb.dtype)
    zero = const(identity, wide)

    def index(o, p, i):
        """xb's (and ob's) index of row `o`, scan position `p`, column `i`."""
        return (*batch_index(o, outer), length - 1 - p if reverse else p, *batch_index(i, inner))

    def load(o, p, i):
        return cast(wide, BufferLoad(xb, index(o, p, i), xb.dtype))

    def store(o, p, i, value):
        return BufferStore(ob, cast(ob.dtype, value), index(o, p, i))

    if inner:
        return _columns(math.prod(outer), length, math.prod(inner), load, store, combine, zero, exclusive)
    t = THREADS if not isinstance(length, int) else \
        min(THREADS, max(32, 1 << (-(-length // per_thread) - 1).bit_length()))  # (a short row: fewer threads)
    return _rows(math.prod(outer), length, t, per_thread, load, store, combine, zero, exclusive)


def _rows(rows, length, t: int, per_thread: int, load, store, combine, zero, exclusive: bool) -> For:
    """A row a block of t threads (a power of two), scanned in chunks of t x per_thread in shared
    memory: each thread scans its per_thread consecutive elements (kept in the block's shared array,
    element j of thread tx at j * t + tx: conflict-free, and the thread's own to the sync pass), the threads'
    totals are scanned across the block (Hillis-Steele, a barrier a step), and each element is
    combined with the total before its thread and the running total of the chunks before."""
    wide, e = zero.dtype, per_thread
    pair, carry = [Buffer(f"scan{k}", (const(t),), wide) for k in (0, 1)], Buffer("carry", (const(t),), wide)
    held = Buffer("held", (const(t * e),), wide)  # the threads' elements, each thread's scanned
    row, chunk = Var("row", dt.INDEX_DTYPE), Var("chunk", dt.INDEX_DTYPE)

    def at(buf, k):
        return BufferLoad(buf, (k,), wide)

    def before(buf, k, d):
        """buf's element d before k's, or the identity (its index kept in the array either way)."""
        return select(k >= d, at(buf, binary("max", k - d, const(0, k.dtype))), zero)

    def position(tx, j):
        return (chunk * t + tx) * e + j

    def unrolled(name, body_of):
        j = Var(name, dt.INDEX_DTYPE)
        return For(j, const(0), const(e), "unrolled", body_of(j))

    def mine(tx, j):
        """Thread tx's element j in `held`, or the identity for j < 0 (its index kept in the array)."""
        return select(j >= 0, at(held, binary("max", j, const(0, j.dtype)) * t + tx), zero)

    def own_scan(tx):  # a thread's elements, scanned in order; its total into the block's array
        return SeqStmt((
            unrolled("j", lambda j: IfThenElse(position(tx, j) < length,
                                               BufferStore(held, load(row, position(tx, j), 0), (j * t + tx,)),
                                               BufferStore(held, zero, (j * t + tx,)))),
            unrolled("j", lambda j: BufferStore(held, combine(mine(tx, j - 1), mine(tx, j)), (j * t + tx,))),
            BufferStore(pair[0], mine(tx, const(e - 1)), (tx,))))

    steps, k = [], 0
    while 1 << k < t:  # each thread's total combined with the one 2^k before it, from one array into the other
        src, dst = pair[k % 2], pair[(k + 1) % 2]
        steps.append(threads(lambda tx, src=src, dst=dst, d=1 << k: BufferStore(
            dst, combine(before(src, tx, d), at(src, tx)), (tx,)), t))
        k += 1
    scan = pair[k % 2]  # (the threads' totals, scanned)

    def write(tx):
        base = combine(at(carry, tx), before(scan, tx, 1))  # the chunks before, and the threads before in this one
        return unrolled("j", lambda j: IfThenElse(position(tx, j) < length, store(
            row, position(tx, j), 0, combine(base, mine(tx, j - 1) if exclusive else mine(tx, j)))))

    advance = threads(lambda tx: BufferStore(carry, combine(at(carry, tx), at(scan, const(t - 1))), (tx,)), t)
    chunks = For(chunk, const(0), convert(ceil_div(length, t * e)), "serial",
                 SeqStmt((threads(own_scan, t), *steps, threads(write, t), advance)))
    body = SeqStmt((threads(lambda tx: BufferStore(carry, zero, (tx,)), t), chunks))
    for buf in (*pair, carry, held):
        body = Allocate(buf, body)
    return For(row, const(0), convert(rows), THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))


def _columns(rows, length, columns, load, store, combine, zero, exclusive: bool) -> For:
    """A thread a column (row o of the axes before the scan's, column i of those after), walking the
    scan's axis with its total in a register."""
    wide = zero.dtype
    total = Buffer("total", (const(1),), wide)
    block = Var("block", dt.INDEX_DTYPE)
    count = rows * columns

    def column(tx):
        g = block * THREADS + tx
        o, i = g // columns, g % columns
        now = BufferLoad(total, (const(0),), wide)

        def step(p):
            add = BufferStore(total, combine(now, load(o, p, i)), (const(0),))
            out = store(o, p, i, now)
            return SeqStmt((out, add) if exclusive else (add, out))

        return IfThenElse(g < count, Allocate(total, SeqStmt((
            BufferStore(total, zero, (const(0),)), serial("p", length, step)))))

    return For(block, const(0), convert(ceil_div(count, THREADS)), THREAD_BINDING, threads(column, THREADS),
               (("thread_tag", "blockIdx.x"),))
