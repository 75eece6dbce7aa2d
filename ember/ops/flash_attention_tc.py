"""flash_attention's kernel on Tensor Cores (ember.ops.flash_attention chooses it for float16 and
bfloat16 operands whose head sizes are multiples of 16): the same recurrence, its two products
as wmma calls (ember.intrinsics.wmma's SHARED_MMA, 16x16x16 tiles, fp32 accumulators in shared
memory).

A block is one warp: 32 queries, a thread per query for the softmax, the whole warp for each
Tensor Core call. Per tile of 32 keys:

    k^T, v tiles -> shared (half)          the threads copy them together (k transposed: wmma's
                                           b is row-major)
    scores = q k^T                         2 x 2 output tiles, e / 16 calls each, into zeroed fp32
    per thread (its row): s = scores * scale (+ mask), causal and keys past S at -inf;
        m' = max(m, max s); p = exp(s - m') -> shared (half); l = l exp(m - m') + sum p (of the
        rounded p, which the product reads); acc row *= exp(m - m')
    acc += p v                             2 x (ev / 16) output tiles, 2 calls each

The accumulator, the scores and the running max and sum are fp32 in shared memory; q, k, v and p
are the operands' half type, as the Tensor Cores read them.
"""

from __future__ import annotations

import math

from .. import te
from ..intrinsics import wmma
from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, Var, as_int, binary, cast, const, convert, select
from ..tir.stmt import THREAD_BINDING, Allocate, BufferStore, For, IfThenElse, Pointer, SeqStmt
from .gpu_loops import at, batch_index, ceil_div, extent, serial, threads

T = 32  # queries and keys per tile: one warp
FLOAT = "float32"


def fits(dtype: str, e: int, ev: int, limit: int) -> bool:
    return dtype in wmma.DTYPES and e % wmma.TILE == 0 and ev % wmma.TILE == 0 and shared_bytes(e, ev) <= limit


def shared_bytes(e: int, ev: int) -> int:
    """q, k^T, v and p in half precision; the scores, the accumulator, the max and the sum in fp32."""
    return 2 * (T * e + e * T + T * ev + T * T) + 4 * (T * T + T * ev + 2 * T)


def kernel(qb: Buffer, kb: Buffer, vb: Buffer, mb: Buffer | None, ob: Buffer, scale: float, causal: bool) -> For:
    """The kernel's statement (flash_attention's te.extern)."""
    half = qb.dtype
    batch = [extent(d) for d in ob.shape[:-2]]  # (a symbolic batch: the grid per launch)
    length, keys = extent(qb.shape[-2]), extent(kb.shape[-2])  # symbolic or static
    e, ev = as_int(qb.shape[-1]), as_int(vb.shape[-1])
    q_tile, kt_tile, v_tile, p_tile = (Buffer(n, (const(size),), half) for n, size in (
        ("q_tile", T * e), ("kt_tile", e * T), ("v_tile", T * ev), ("p_tile", T * T)))
    scores, acc = Buffer("scores", (const(T * T),), FLOAT), Buffer("acc", (const(T * ev),), FLOAT)
    top, total = Buffer("top", (const(T),), FLOAT), Buffer("total", (const(T),), FLOAT)
    running = Buffer("running", (const(2),), FLOAT)
    minus_inf, zero = const(-math.inf, FLOAT), const(0.0, FLOAT)
    heads, tile, kt = (Var(n, dt.INDEX_DTYPE) for n in ("heads", "tile", "kt"))
    index = batch_index(heads, batch)

    def row_of(tx):
        return tile * T + tx

    def fill(buf, n, value):
        return threads(lambda tx: serial("c", n // T, lambda c: BufferStore(buf, value, (c * T + tx,))), T)

    load_q = threads(lambda tx: serial("d", e, lambda d: BufferStore(q_tile, select(
        row_of(tx) < length, BufferLoad(qb, at(index, qb, binary("min", row_of(tx), convert(length - 1)), d), half),
        const(0.0, half)), (tx * e + d,))), T)

    def copy(key0):
        """k^T and v's tiles, the threads a key each (keys past S are zeros)."""
        def body(tx):
            key = key0 + tx
            inside, clamped = key < keys, binary("min", key, convert(keys - 1))

            def element(src, d):
                return select(inside, BufferLoad(src, at(index, src, clamped, d), half), const(0.0, half))

            return SeqStmt((serial("d", e, lambda d: BufferStore(kt_tile, element(kb, d), (d * T + tx,))),
                            serial("d", ev, lambda d: BufferStore(v_tile, element(vb, d), (tx * ev + d,)))))
        return threads(body, T)

    def products(a, b, c, k, n, lda, ldb, ldc):
        """c (T x n) += a (T x k) @ b (k x n), every 16x16 tile of c by the warp."""
        mi, nj, kk = (Var(x, dt.INDEX_DTYPE) for x in ("mi", "nj", "kk"))
        w = wmma.TILE
        call = wmma.shared_mma_call(half, Pointer(a, (mi * lda + kk) * w), Pointer(b, (kk * ldb + nj) * w),
                                    Pointer(c, (mi * ldc + nj) * w), lda, ldb, ldc)
        loops = For(mi, const(0), const(T // w), "serial", For(nj, const(0), const(n // w), "serial", For(
            kk, const(0), const(k // w), "serial", call)))
        return threads(lambda ty: loops, 1, "threadIdx.y")  # the one warp (its lanes left to the calls)

    def softmax(key0):
        def body(tx):
            row = row_of(tx)

            def masked(j):
                key, s = key0 + j, BufferLoad(scores, (tx * T + j,), FLOAT) * scale
                keep = (key < keys) & (row < length)
                if causal:
                    keep = keep & (key <= row)
                if mb is None:
                    return BufferStore(scores, select(keep, s, minus_inf), (tx * T + j,))
                m = BufferLoad(mb, at(index, mb, row, key), mb.dtype)
                value = select(m, s, minus_inf) if dt.is_bool(mb.dtype) else s + cast(FLOAT, m)
                return IfThenElse(keep, BufferStore(scores, value, (tx * T + j,)),
                                  BufferStore(scores, minus_inf, (tx * T + j,)))

            s = lambda j: BufferLoad(scores, (tx * T + j,), FLOAT)  # noqa: E731
            new_top, alpha = BufferLoad(running, (const(0),), FLOAT), BufferLoad(running, (const(1),), FLOAT)
            shift = select(binary("==", new_top, minus_inf), zero, new_top)  # every key so far masked out
            p = lambda j: cast(FLOAT, BufferLoad(p_tile, (tx * T + j,), half))  # noqa: E731
            return Allocate(running, SeqStmt((
                serial("j", T, masked),
                BufferStore(running, BufferLoad(top, (tx,), FLOAT), (const(0),)),
                serial("j", T, lambda j: BufferStore(running, binary("max", new_top, s(j)), (const(0),))),
                BufferStore(running, te.exp(BufferLoad(top, (tx,), FLOAT) - shift), (const(1),)),
                serial("j", T, lambda j: BufferStore(p_tile, cast(half, te.exp(s(j) - shift)), (tx * T + j,))),
                BufferStore(total, BufferLoad(total, (tx,), FLOAT) * alpha, (tx,)),
                serial("j", T, lambda j: BufferStore(total, BufferLoad(total, (tx,), FLOAT) + p(j), (tx,))),
                serial("d", ev, lambda d: BufferStore(acc, BufferLoad(acc, (tx * ev + d,), FLOAT) * alpha,
                                                      (tx * ev + d,))),
                BufferStore(top, new_top, (tx,)))))
        return threads(body, T)

    key_tiles = convert(ceil_div(keys, T))
    if causal:  # the tiles up to the diagonal
        key_tiles = binary("min", key_tiles, tile + 1)
    steps = For(kt, const(0), key_tiles, "serial", SeqStmt((
        copy(kt * T), fill(scores, T * T, zero), products(q_tile, kt_tile, scores, e, T, e, T, T), softmax(kt * T),
        products(p_tile, v_tile, acc, T, ev, T, ev, ev))))

    def store(tx):
        row, l = row_of(tx), BufferLoad(total, (tx,), FLOAT)

        def element(d):
            value = select(binary("==", l, zero), zero, BufferLoad(acc, (tx * ev + d,), FLOAT) / l)
            return BufferStore(ob, cast(ob.dtype, value), (*index, row, d))

        return IfThenElse(row < length, serial("d", ev, element))

    init = threads(lambda tx: SeqStmt((BufferStore(top, minus_inf, (tx,)), BufferStore(total, zero, (tx,)))), T)
    body = SeqStmt((load_q, init, fill(acc, T * ev, zero), steps, threads(store, T)))
    for buf in (q_tile, kt_tile, v_tile, p_tile, scores, acc, top, total):
        body = Allocate(buf, body)
    tiles = For(tile, const(0), convert(ceil_div(length, T)), THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))
    return For(heads, const(0), convert(math.prod(batch)), THREAD_BINDING, tiles, (("thread_tag", "blockIdx.y"),))
