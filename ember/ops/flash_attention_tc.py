"""flash_attention's kernel on wmma (ember.ops.flash_attention chooses it for float16 and bfloat16
operands whose head sizes are multiples of 16 where the mma kernel, ember.ops.flash_attention_mma,
does not apply: head sizes past 128): the same recurrence, each warp's running state in
registers, its two products as wmma calls (ember.intrinsics.wmma's warp_mma).

A block is 4 warps over 64 queries, each warp 16 of them (one fragment's height). Per tile of
`bn` keys (`key_tile`: 64, 32 or 16, the largest whose tiles fit the shared memory):

    k, v tiles -> shared (half)           the block's threads copy them together, 16 bytes at a
                                          time: cp.async into the other of two stages while this
                                          tile computes (the key loop software-pipelined,
                                          ember.cuda.pipeline), zero-filled past the keys' end
    per warp:
      s = q k^T                           its 16 x bn scores in accumulator fragments (k read as
                                          the product's transposed b: no transposed copy), stored
                                          to the warp's own tile of shared memory
      per row, two lanes (each half of the row's keys):
        s * scale (+ mask), causal and keys past S at -inf, times log2(e) (exp2 is cheaper
        than exp: without fast math, expf is several instructions around the one ex2)
        m' = max(m, max s); p = exp2(s - m') -> the warp's p tile (half)
        l = l exp2(m - m') + sum p (of the rounded p, which the product reads)
        exp2(m - m') -> the row of the warp's factor tile (16 x 16)
      o *= factors                        o's fragments scaled in registers (wmma_rows.scale_call)
      o += p v                            into o's fragments

Why the scores go through shared memory: wmma leaves the lanes' layout of a fragment to the
compiler, so no lane knows which row an element of s is in, and a row's max and sum need the row.
mma.sync's documented layout would keep s in registers too (a row's max two shuffles across the 4
lanes holding it), at the price of per-shape register bookkeeping that the Tensor Core GEMM does
not carry yet. The output accumulator needs no row of its own: its rescaling multiplies each
fragment by a fragment loaded from the tile of factors, whose layout is the same (ember.
intrinsics.wmma_rows). The running max and each lane's share of the sum live in the thread's
registers for the whole loop; o in the warp's fragments. Each lane's half of a row sums its own
share of l; the two shares are added once at the end.

Shared memory: every tile's rows padded by 16 bytes (`strides`), and each lane walking its row
from its own column (`turned`), so that fragments' loads and stores and the lanes' steps along
their rows fall in distinct banks; 48 KiB in all (static shared memory), which bounds the tiles.

Causal: the tiles of keys past the block's last query are not visited. Rows past the queries'
end repeat the last query and store nothing (their scores are all -inf); keys past the end are
zeros in the tiles and -inf in s.
"""

from __future__ import annotations

import math

from .. import te
from ..intrinsics import wmma
from ..intrinsics.wmma_rows import scale_call
from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, Var, binary, cast, const, convert, select
from ..tir.stmt import THREAD_BINDING, Allocate, BufferStore, CallRoutine, For, IfThenElse, Pointer, SeqStmt
from .gpu_loops import HeadRows, at, batch_index, ceil_div, serial, threads

WARPS = 4
ROWS = wmma.TILE  # queries a warp: one fragment's height
BLOCK_ROWS = WARPS * ROWS  # queries a block
LANES = 32
FLOAT = "float32"
FRAGMENTS = "wmma.accumulator"  # the scope of a warp's fragments (ember.cuda.fragments)
TILE = wmma.TILE
VECTOR = 8  # halves a copy moves at a time: 16 bytes
PAD = 16  # bytes past each row of a shared tile (see `strides`)
LOG2E = math.log2(math.e)
PIPELINE = "pragma_software_pipeline"  # the key loop's k and v tiles double-buffered (ember.cuda.pipeline)


def key_tile(e: int, ev: int, limit: int) -> int | None:
    """Keys a tile: the largest of 64, 32, 16 whose tiles fit `limit` bytes; None where none does."""
    return next((bn for bn in (64, 32, 16) if shared_bytes(e, ev, bn) <= limit), None)


def fits(dtype: str, e: int, ev: int, limit: int) -> bool:
    return dtype in wmma.DTYPES and e % TILE == 0 and ev % TILE == 0 and key_tile(e, ev, limit) is not None


def strides(e: int, ev: int, bn: int) -> tuple[int, int, int, int, int]:
    """The row strides in elements of the q (and k), v, p, scores and factors tiles: each row
    padded by 16 bytes, so that the 8 rows of 16 bytes a fragment's load or store touches at once
    fall in distinct banks (rows of 64 or 128 bytes put them in the same ones: an 8-way
    conflict), and the lanes' steps along their rows stay within 2 ways."""
    return e + PAD // 2, ev + PAD // 2, bn + PAD // 2, bn + PAD // 4, TILE + PAD // 4


def shared_bytes(e: int, ev: int, bn: int) -> int:
    """The block's q, two stages of the k and v tiles, and each warp's p in half precision; each
    warp's scores and tile of row factors in fp32; rows padded (`strides`)."""
    lq, lv, lp, ls, lf = strides(e, ev, bn)
    return 2 * (BLOCK_ROWS * lq + 2 * bn * (lq + lv) + WARPS * ROWS * lp) + 4 * WARPS * ROWS * (ls + lf)


def _call(intrin, role: str, reads, writes, c_reads, c_writes, scalars, steps) -> CallRoutine:
    """A tensorized call: `scalars` passed to C, then every pointer's strides (`steps`) for the
    interpreter."""
    return CallRoutine(intrin.call(role).routine, (
        ("intrin", intrin.name), ("role", role), ("c_reads", c_reads), ("c_writes", c_writes),
        ("c_scalars", len(scalars))), tuple(reads), tuple(writes), tuple(const(x) for x in (*scalars, *steps)))


def _zero(frag: Pointer, ldf: int) -> CallRoutine:
    """A fragment set to zero (wmma's LOAD reset: its C call takes the fragment alone)."""
    return CallRoutine(wmma.ZERO, (("intrin", wmma.LOAD.name), ("role", "reset"), ("c_reads", ()), ("c_writes", (1,)),
                                   ("c_scalars", 0)), (frag,), (frag,), tuple(const(x) for x in (ldf, 1, ldf, 1)))


def _store(frag: Pointer, ldf: int, out: Pointer, ldo: int) -> CallRoutine:
    return _call(wmma.STORE, "body", (frag,), (out,), (0,), (1,), (ldo,), (ldf, 1, ldo, 1))


def _mma(half: str, wn: int, b_layout: str, a: Pointer, lda: int, b: Pointer, ldb: int, c: Pointer) -> CallRoutine:
    """c (16 x wn fragments) += a (16 x 16) @ b (16 x wn, or given as its (wn, 16) transpose)."""
    intrin = wmma.warp_mma(half, ROWS, wn, b_layout)
    return _call(intrin, "update", (a, b), (c,), (0, 1), (2,), (lda, ldb), (lda, 1, ldb, 1, wn, 1))


def copy_tile(tile_buf: Buffer, src: HeadRows, index, width: int, ld: int, first, count: int, end, warps: int,
              zeros: bool = True) -> For:
    """tile_buf[i * ld + d] = src[first + i, d] for i < count, d < width (past `end`: zeros, or with
    `zeros` False the last row again), 16 bytes (8 halves) at a time, the block's `warps` warps'
    threads a strided share each (a pipelined loop's: cp.async on sm_80 and later, zero-filled past
    the end; others one uint4 load and store where they read no condition)."""
    half, threads_ = tile_buf.dtype, warps * LANES
    vectors = count * width // VECTOR
    lane = Var("lane", dt.INDEX_DTYPE)

    def body(ty, tx):
        def step(c):
            at_vector = c * threads_ + ty * LANES + tx
            flat = at_vector * VECTOR
            i = first + flat // width
            clamped = binary("min", i, convert(end - 1))
            value = BufferLoad(src.buf, src.at(index, clamped, flat % width + lane), half)
            if zeros:
                value = select(i < end, value, const(0.0, half))
            lanes_ = For(lane, const(0), const(VECTOR), "vectorized", BufferStore(
                tile_buf, value, (flat // width * ld + flat % width + lane,)))
            return lanes_ if vectors % threads_ == 0 else IfThenElse(at_vector < vectors, lanes_)
        return serial("c", ceil_div(vectors, threads_), step)
    return threads(lambda ty: threads(lambda tx: body(ty, tx), LANES), warps, "threadIdx.y")


def kernel(qb: HeadRows, kb: HeadRows, vb: HeadRows, mb: Buffer | None, ob: HeadRows, scale: float, causal: bool,
           limit: int) -> For:
    """The kernel's statement (flash_attention's te.extern), its tiles within `limit` bytes."""
    half = qb.buf.dtype
    batch = ob.batch  # (a symbolic batch: the grid per launch)
    length, keys = qb.rows, kb.rows  # symbolic or static
    e, ev = qb.width, vb.width
    bn = key_tile(e, ev, limit)
    half_row = bn // 2  # a lane's keys of a row
    lq, lv, lp, ls, lf = strides(e, ev, bn)
    q_tile, k_tile, v_tile, p_tile = (Buffer(n, (const(size),), half) for n, size in (
        ("q_tile", BLOCK_ROWS * lq), ("k_tile", bn * lq), ("v_tile", bn * lv), ("p_tile", WARPS * ROWS * lp)))
    s_tile, f_tile = (Buffer(n, (const(WARPS * ROWS * ld),), FLOAT) for n, ld in (("s_tile", ls), ("f_tile", lf)))
    top, total = (Buffer(n, (const(1),), FLOAT, scope="local") for n in ("top", "total"))
    s_frag, o_frag = (Buffer(n, (const(ROWS), const(cols)), FLOAT, scope=FRAGMENTS) for n, cols in (
        ("s_frag", bn), ("o_frag", ev)))
    running = Buffer("running", (const(3),), FLOAT)  # the new max, exp(m - m'), a p
    minus_inf, zero = const(-math.inf, FLOAT), const(0.0, FLOAT)
    heads, tile, kt, kk = (Var(n, dt.INDEX_DTYPE) for n in ("heads", "tile", "kt", "kk"))
    index = batch_index(heads, batch)

    def warps(body_of):
        return threads(body_of, WARPS, "threadIdx.y")  # (the lanes left to the Tensor Core calls)

    def lanes(body_of):
        """body_of(ty, tx): every thread, tx the lane of warp ty."""
        return warps(lambda ty: threads(lambda tx: body_of(ty, tx), LANES))

    def row_lanes(body_of):
        """body_of(ty, r, h, row): lane tx holds half h of row r of warp ty's queries (row: the query)."""
        return lanes(lambda ty, tx: body_of(ty, tx // 2, tx % 2, tile * BLOCK_ROWS + ty * ROWS + tx // 2))

    def scores(ty):
        """The warp's 16 x bn scores q k^T in fragments, stored to its tile."""
        return SeqStmt((
            *(_zero(Pointer(s_frag, const(j * TILE)), bn) for j in range(bn // TILE)),
            For(kk, const(0), const(e // TILE), "serial", _mma(
                half, bn, "col", Pointer(q_tile, ty * ROWS * lq + kk * TILE), lq, Pointer(k_tile, kk * TILE),
                lq, Pointer(s_frag, const(0)))),
            *(_store(Pointer(s_frag, const(j * TILE)), bn, Pointer(s_tile, ty * ROWS * ls + j * TILE), ls)
              for j in range(bn // TILE))))

    def turned(j, r, n):
        """Step j of a lane's n columns of row r: (j + r) % n, so that the 16 rows' lanes touch
        distinct banks at each step (2 ways at most on p; in order, on the padded rows, 2 to 4
        ways; unpadded, 16)."""
        return (j + r) % n

    def masked(ty, r, row, key0, col, edge):
        """Score `col` of row r of warp ty in base 2, (s * scale (+ mask)) log2(e), whose exp2 is
        the softmax's exp (one multiply where there is no additive mask); -inf where the mask
        says so and, on an `edge` tile, where causal, past S or past the queries (the mask then
        read at clamped indices: never out of bounds)."""
        key = key0 + col
        s = BufferLoad(s_tile, ((ty * ROWS + r) * ls + col,), FLOAT)
        keep = None
        if edge:
            keep = (key < keys) & (row < length)
            if causal:
                keep = keep & (key <= row)
        s2 = s * (scale * LOG2E)
        if mb is not None:
            m_row, m_key = (binary("min", row, convert(length - 1)), binary("min", key, convert(keys - 1))) if edge \
                else (row, key)
            m = BufferLoad(mb, at(index, mb, m_row, m_key), mb.dtype)
            if dt.is_bool(mb.dtype):
                keep = m if keep is None else keep & m
            else:
                s2 = (s * scale + cast(FLOAT, m)) * LOG2E
        return s2 if keep is None else select(keep, s2, minus_inf)

    def softmax(key0):
        """Each lane: the row's new max over all of its scores, then its half's p and share of l.
        Nothing it reads from shared memory is written in the same phase (no barrier inside).
        A tile inside the queries and keys (and below the diagonal) checks no bound."""
        def body(ty, r, h, row, edge):
            held = lambda buf, i=0: BufferLoad(buf, (const(i),), FLOAT)  # noqa: E731
            new_top, alpha, p = held(running), held(running, 1), held(running, 2)
            shift = select(binary("==", new_top, minus_inf), zero, new_top)  # every key so far masked out
            own = (ty * ROWS + r) * lp + h * half_row

            def element(j):
                col = turned(j, r, half_row)
                score = masked(ty, r, row, key0, h * half_row + col, edge)
                return SeqStmt((
                    BufferStore(running, te.exp2(score - shift), (const(2),)),
                    BufferStore(p_tile, cast(half, p), (own + col,)),
                    BufferStore(total, held(total) + cast(FLOAT, cast(half, p)), (const(0),))))  # (p as rounded)

            if edge or mb is not None or scale <= 0:
                row_max = (BufferStore(running, held(top), (const(0),)), serial("j", bn, lambda j: BufferStore(
                    running, binary("max", new_top, masked(ty, r, row, key0, turned(j, r, bn), edge)), (const(0),))))
            else:  # the max of the scores as they are, scaled once (max(c s) = c max(s) for c > 0)
                raw = lambda j: BufferLoad(s_tile, ((ty * ROWS + r) * ls + turned(j, r, bn),), FLOAT)  # noqa: E731
                row_max = (BufferStore(running, minus_inf, (const(0),)),
                           serial("j", bn, lambda j: BufferStore(running, binary("max", new_top, raw(j)), (const(0),))),
                           BufferStore(running, binary("max", held(top), new_top * (scale * LOG2E)), (const(0),)))
            return Allocate(running, SeqStmt((
                *row_max,
                BufferStore(running, te.exp2(held(top) - shift), (const(1),)),
                BufferStore(total, held(total) * alpha, (const(0),)),
                serial("j", half_row, element),
                serial("i", TILE // 2, lambda i: BufferStore(f_tile, alpha, (
                    (ty * ROWS + r) * lf + h * (TILE // 2) + turned(i, r // 2, TILE // 2),))),
                BufferStore(top, new_top, (const(0),)))))

        inside = (key0 + bn <= keys) & ((tile + 1) * BLOCK_ROWS <= length)
        if causal:
            inside = inside & (key0 + (bn - 1) <= tile * BLOCK_ROWS)
        return IfThenElse(inside, row_lanes(lambda *a: body(*a, False)), row_lanes(lambda *a: body(*a, True)))

    def accumulate(ty):
        """o *= the rows' factors; o += p v."""
        return SeqStmt((
            *(scale_call(Pointer(f_tile, ty * ROWS * lf), lf, Pointer(o_frag, const(j * TILE)), ev)
              for j in range(ev // TILE)),
            For(kk, const(0), const(bn // TILE), "serial", _mma(
                half, ev, "row", Pointer(p_tile, ty * ROWS * lp + kk * TILE), lp, Pointer(v_tile, kk * TILE * lv), lv,
                Pointer(o_frag, const(0))))))

    key_tiles = convert(ceil_div(keys, bn))
    if causal:  # the tiles up to the block's last query
        key_tiles = binary("min", key_tiles, (tile + 1) * (BLOCK_ROWS // bn))
    steps = For(kt, const(0), key_tiles, "serial", Allocate(k_tile, Allocate(v_tile, SeqStmt((
        copy_tile(k_tile, kb, index, e, lq, kt * bn, bn, keys, WARPS),
        copy_tile(v_tile, vb, index, ev, lv, kt * bn, bn, keys, WARPS),
        warps(scores), softmax(kt * bn), warps(accumulate))))), annotations=((PIPELINE, 2),))

    def partner(tx):  # the other lane of tx's row
        return tx - tx % 2 + (1 - tx % 2)

    # each lane's share of l, added to its partner's (the sum of a row is the same in both lanes)
    shares = lanes(lambda ty, tx: BufferStore(f_tile, BufferLoad(total, (const(0),), FLOAT), (ty * ROWS * lf + tx,)))
    sums = lanes(lambda ty, tx: BufferStore(total, BufferLoad(f_tile, (ty * ROWS * lf + tx,), FLOAT) + BufferLoad(
        f_tile, (ty * ROWS * lf + partner(tx),), FLOAT), (const(0),)))

    chunk = math.gcd(bn, ev)  # o's columns staged through the scores' tile at a time

    def out_chunk(c):
        def element(ty, r, h, row):
            l = BufferLoad(total, (const(0),), FLOAT)

            def one(j):
                col = h * (chunk // 2) + turned(j, r, chunk // 2)
                value = BufferLoad(s_tile, ((ty * ROWS + r) * ls + col,), FLOAT) / l
                return BufferStore(ob.buf, cast(ob.buf.dtype, select(binary("==", l, zero), zero, value)),
                                   ob.at(index, row, c * chunk + col))  # every key masked out: 0

            return IfThenElse(row < length, serial("j", chunk // 2, one))
        stage = warps(lambda ty: SeqStmt(tuple(
            _store(Pointer(o_frag, const(c * chunk + j * TILE)), ev, Pointer(s_tile, ty * ROWS * ls + j * TILE), ls)
            for j in range(chunk // TILE))))
        return SeqStmt((stage, row_lanes(element)))

    init = SeqStmt((
        lanes(lambda ty, tx: SeqStmt((BufferStore(top, minus_inf, (const(0),)),
                                      BufferStore(total, zero, (const(0),))))),
        warps(lambda ty: SeqStmt(tuple(_zero(Pointer(o_frag, const(j * TILE)), ev) for j in range(ev // TILE))))))
    # q's rows past the end repeat its last (their scores are all -inf and nothing of them is stored)
    q = copy_tile(q_tile, qb, index, e, lq, tile * BLOCK_ROWS, BLOCK_ROWS, length, WARPS, zeros=False)
    body = SeqStmt((q, init, steps, shares, sums,
                    *(out_chunk(c) for c in range(ev // chunk))))
    for buf in (q_tile, p_tile, s_tile, f_tile, top, total, s_frag, o_frag):
        body = Allocate(buf, body)
    tiles = For(tile, const(0), convert(ceil_div(length, BLOCK_ROWS)), THREAD_BINDING, body,
                (("thread_tag", "blockIdx.x"),))
    return For(heads, const(0), convert(math.prod(batch)), THREAD_BINDING, tiles, (("thread_tag", "blockIdx.y"),))
