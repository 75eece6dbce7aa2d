"""GPU kernels of the scans (ember.ops.cumsum: cumsum and cumprod, inclusive or exclusive, forward
or reverse), written as loop IR in place of the operator's compute (Family.computes): te has no
scan, and the operator's blocked form (each element's block total and the totals before its
block, reductions of the row's length) keeps those totals in buffers as long as the row, which a
row of symbolic length cannot have on a GPU (no shared or register array of unknown size).

- along the last axis (the other axes' elements, static or symbolic, are the rows): a row a block
  of THREADS threads, read in chunks of THREADS elements; each chunk scanned across the block in
  shared memory (log2(THREADS) steps, each thread adding the element `step` before its own: a
  Hillis-Steele scan), combined with the running total of the chunks before it, which every
  thread carries and then advances by the chunk's last element. Work per element: log2(THREADS)
  operations, whatever the row's length;
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

THREADS = 256  # the most threads a block takes: a chunk of the row
COMBINE = {"cumsum": (lambda a, b: a + b, 0), "cumprod": (lambda a, b: a * b, 1)}


def scan_compute(op: str):
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axis = normalize_axis(op, attrs["axis"], x.ndim)

        def build(ins, outs):
            return scan_kernel(op, ins[0], outs[0], axis, attrs["exclusive"], attrs["reverse"])

        return [te.extern([(te_shape(out_types[0], inputs), x.dtype)], [x], build, name=op)[0]]

    return compute


computes("cumsum")(scan_compute("cumsum"))
computes("cumprod")(scan_compute("cumprod"))


def scan_kernel(op: str, xb: Buffer, ob: Buffer, axis: int, exclusive: bool, reverse: bool) -> For:
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
    t = THREADS if not isinstance(length, int) else min(THREADS, max(32, 1 << (length - 1).bit_length()))
    return _rows(math.prod(outer), length, t, load, store, combine, zero, exclusive)


def _rows(rows, length, t: int, load, store, combine, zero, exclusive: bool) -> For:
    """A row a block of t threads (a power of two), scanned in chunks of t in shared memory."""
    wide = zero.dtype
    pair, carry = [Buffer(f"scan{k}", (const(t),), wide) for k in (0, 1)], Buffer("carry", (const(t),), wide)
    row, chunk = Var("row", dt.INDEX_DTYPE), Var("chunk", dt.INDEX_DTYPE)

    def at(buf, k):
        return BufferLoad(buf, (k,), wide)

    def before(buf, tx, d):
        """buf's element d before tx's, or the identity (its index kept in the array either way)."""
        return select(tx >= d, at(buf, binary("max", tx - d, const(0, tx.dtype))), zero)

    def position(tx):
        return chunk * t + tx

    read = threads(lambda tx: IfThenElse(position(tx) < length, BufferStore(pair[0], load(row, position(tx), 0), (tx,)),
                                         BufferStore(pair[0], zero, (tx,))), t)
    steps, k = [], 0
    while 1 << k < t:  # each element combined with the one 2^k before it (Hillis-Steele), from one array to the
        src, dst = pair[k % 2], pair[(k + 1) % 2]  # other: a barrier a step
        steps.append(threads(lambda tx, src=src, dst=dst, d=1 << k: BufferStore(
            dst, combine(before(src, tx, d), at(src, tx)), (tx,)), t))
        k += 1
    scan = pair[k % 2]  # (the chunk's inclusive scan)

    def write(tx):
        value = before(scan, tx, 1) if exclusive else at(scan, tx)
        return IfThenElse(position(tx) < length, store(row, position(tx), 0, combine(at(carry, tx), value)))

    advance = threads(lambda tx: BufferStore(carry, combine(at(carry, tx), at(scan, const(t - 1))), (tx,)), t)
    chunks = For(chunk, const(0), convert(ceil_div(length, t)), "serial",
                 SeqStmt((read, *steps, threads(write, t), advance)))
    body = SeqStmt((threads(lambda tx: BufferStore(carry, zero, (tx,)), t), chunks))
    for buf in (*pair, carry):
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
