"""flash_attention's kernel on mma.sync with the scores in registers (FlashAttention-2's
structure): ember.ops.flash_attention chooses it for float16 and bfloat16 operands whose head
sizes are multiples of 16 and whose tiles fit (`config`); the wmma kernel (ember.ops.
flash_attention_tc) takes the half ones that do not, CUDA cores the rest.

A block is `warps` warps (4 by default) of 16 queries each; per warp, with the steps of ember.
intrinsics.mma_attention:

    q tile -> shared (the block's threads, 16 bytes at a time); q's A fragments -> registers, once
    m = -inf, l = 0, o = 0                          (registers)
    per tile of `bn` keys (causal: up to the block's last query):
      k, v tiles -> shared                          cp.async into the next of `stages` (2 by
                                                    default) while this one computes; one
                                                    barrier a tile
      s = q k^T                                     the accumulators (bn / 2 floats a lane)
      online softmax on s itself                    a row's max: two shuffles in its lane group;
                                                    masks, causal, bounds on the tile that crosses
                                                    them; s := p; o *= exp2(m - m')
      o += p v                                      p's accumulators are its A fragments
    out = o / l                                     each lane its two rows' pairs, once

Nothing of the scores goes through shared memory (the wmma kernel stores them there: its
fragments' layout is the compiler's) and there is one barrier a tile of keys where that kernel has
four. The shared tiles are rows padded by 16 bytes (ldmatrix's 8 rows of a phase in distinct
banks), not swizzled, so head sizes of 128 (256-byte rows) are read as 64 are. A mask is read
from global memory by each lane at its scores (L2 keeps the tile), clamped into bounds.
"""

from __future__ import annotations

import math
import struct

from ..intrinsics import mma_attention as ma
from ..intrinsics.wmma import DTYPES
from ..target import REGISTER_FILE, STATIC_SHARED, WARP
from ..tir import dtype as dt
from ..tir.arith import Analyzer
from ..tir.expr import Buffer, Var, binary, cast, const, convert
from ..tir.stmt import THREAD_BINDING, Allocate, For, Pointer, SeqStmt
from ..tir.transform.flatten import flat_index
from .flash_attention_tc import FRAGMENTS, PIPELINE, copy_tile
from .gpu_loops import HeadRows, at, batch_index, ceil_div, threads

ROWS = ma.ROWS  # queries a warp
PAD = 8  # halves past each shared row: 16 bytes
CONFIGS = ((4, 64), (4, 32))  # (warps, keys a tile) in order of preference
DYNAMIC = "pragma_dynamic_shared"  # (ember.cuda.launch_shape.DYNAMIC)
MIN_BLOCKS = "pragma_min_blocks"  # (ember.cuda.launch_shape.MIN_BLOCKS)
MAX_HEAD = 128  # o's ev / 2 floats and q's e / 4 registers a lane: past 128, spills
WARPS = (4, 2, 1)  # warps a block, most first: the fewer, the more blocks a problem of few queries has
REGISTERS = 128  # a thread's registers that head sizes up to 64 fit without spilling (ptxas: 127-185 unbounded)


def shared_bytes(e: int, ev: int, warps: int, bn: int, stages: int = 2) -> int:
    """The block's q tile and the stages of the k and v tiles, in half precision, rows padded."""
    return 2 * (warps * ROWS * (e + PAD) + stages * bn * (e + PAD + ev + PAD))


def config(dtype: str, e: int, ev: int, opt_in: int) -> tuple[int, int, bool] | None:
    """(warps, keys a tile, whether its tiles take dynamic shared memory): the first of CONFIGS
    whose tiles fit static shared memory, else the `opt_in` bytes of dynamic shared memory a
    block of the target's GPU may opt in to (head sizes of 128: 85 KiB, 51 KiB at 32 keys a tile);
    None where the kernel does not apply (operands not half, head sizes not multiples of 16 up to MAX_HEAD)."""
    if dtype not in DTYPES or e % ROWS or ev % ROWS or max(e, ev) > MAX_HEAD:
        return None
    for limit, dynamic in ((STATIC_SHARED, False), (opt_in, True)):
        fit = next((c for c in CONFIGS if shared_bytes(e, ev, *c) <= limit), None)
        if fit is not None:
            return (*fit, dynamic)
    return None


def warps_for(heads: int, length: int, multiprocessors: int) -> int:
    """Warps a block for `heads` (batch times heads) of `length` queries: the most of WARPS whose
    blocks still cover the GPU's multiprocessors, else 1 (BERT-base's 12 heads of 128 tokens: 24
    blocks of 4 warps, 96 of 1, on 132 multiprocessors)."""
    return next((w for w in WARPS if heads * -(-length // (w * ROWS)) >= multiprocessors), WARPS[-1])


def min_blocks(warps: int, e: int, ev: int, static: bool = True) -> int | None:
    """The blocks a multiprocessor must hold (`__launch_bounds__`), so that ptxas fits a thread in
    REGISTERS: REGISTER_FILE / (warps * WARP * REGISTERS), 4 at 4 warps. None where 128 would
    spill: past head sizes of 64 (128: 168-173 registers), at one warp (its masked scores: 28
    bytes) and over symbolic lengths (`static` False: 8 to 16 bytes)."""
    return REGISTER_FILE // (warps * WARP * REGISTERS) if max(e, ev) <= 64 and warps > 1 and static else None


def _flat(buf: Buffer, indices) -> object:
    return flat_index(buf, list(indices))


def kernel(qb: HeadRows, kb: HeadRows, vb: HeadRows, mb: Buffer | None, ob: HeadRows, scale: float, causal: bool,
           warps: int, bn: int, dynamic: bool = False, stages: int = 2, min_blocks: int | None = None) -> For:
    """The kernel's statement (flash_attention's te.extern): `warps` warps of 16 queries a block,
    `bn` keys a tile (`config`), k and v in `stages` stages; `dynamic`: its shared tiles in
    dynamic shared memory (past 48 KiB)."""
    half = qb.buf.dtype
    batch = ob.batch
    length, keys = qb.rows, kb.rows
    e, ev = qb.width, vb.width
    block_rows = warps * ROWS
    lq, lv = e + PAD, ev + PAD
    q_tile, k_tile, v_tile = (Buffer(n, (const(size),), half) for n, size in (
        ("q_tile", block_rows * lq), ("k_tile", bn * lq), ("v_tile", bn * lv)))
    qf, s, o, state = (Buffer(n, (const(ROWS), const(cols)), "float32", scope=FRAGMENTS) for n, cols in (
        ("q_frag", ma.q_columns(e)), ("s_frag", bn), ("o_frag", ev), ("state", ROWS)))
    heads, tile, kt = (Var(n, dt.INDEX_DTYPE) for n in ("heads", "tile", "kt"))
    index = batch_index(heads, batch)
    ana = Analyzer()
    reg = lambda buf: Pointer(buf, const(0))  # noqa: E731  (a register buffer, from its first tile)
    scale_bits = struct.unpack("<i", struct.pack("<f", scale))[0]

    def warps_(body_of):
        return threads(body_of, warps, "threadIdx.y")  # (the lanes left to the calls)

    def row0(ty):
        return tile * block_rows + ty * ROWS

    def softmax(ty, key0, edge):
        intrin = ma.softmax(half, bn, ev, causal, mb.dtype if mb is not None else None)
        scalars = [scale_bits, row0(ty), key0, convert(length), convert(keys), edge]
        reads, strides = [], []
        if mb is not None:
            first = _flat(mb, at(index, mb, row0(ty), key0))
            steps = [ana.simplify(_flat(mb, at(index, mb, row0(ty) + dr, key0 + dk)) - first) for dr, dk in
                     ((1, 0), (0, 1))]
            # (a broadcast dimension: at() reads index 0 there, a step of 0)
            reads, strides = [Pointer(mb, _flat(mb, at(index, mb, 0, 0)))], [steps[0]]
            scalars += steps
        return ma.call(intrin, reads, [reg(s), reg(state), reg(o)], scalars, [*strides, bn, ROWS, ev])

    def step(ty):
        key0 = kt * bn
        edge = (key0 + bn > keys) | ((tile + 1) * block_rows > length)
        if causal:
            edge = edge | (key0 + (bn - 1) > row0(ty))
        return SeqStmt((
            ma.call(ma.scores(half, e, bn), [Pointer(k_tile, const(0)), reg(qf)], [reg(s)], [lq], [lq, ma.q_columns(e),
                                                                                                  bn]),
            softmax(ty, key0, cast(dt.INDEX_DTYPE, edge)),
            ma.call(ma.pv(half, bn, ev), [Pointer(v_tile, const(0)), reg(s)], [reg(o)], [lv], [lv, bn, ev])))

    key_tiles = convert(ceil_div(keys, bn))
    if causal:  # the tiles up to the block's last query
        key_tiles = binary("min", key_tiles, ceil_div((tile + 1) * block_rows, bn))
    loop = For(kt, const(0), key_tiles, "serial", Allocate(k_tile, Allocate(v_tile, SeqStmt((
        copy_tile(k_tile, kb, index, e, lq, kt * bn, bn, keys, warps),
        copy_tile(v_tile, vb, index, ev, lv, kt * bn, bn, keys, warps),
        warps_(step))))), annotations=((PIPELINE, stages),))

    def out(ty):
        first = _flat(ob.buf, ob.at(index, row0(ty), 0))
        ldo = ana.simplify(_flat(ob.buf, ob.at(index, row0(ty) + 1, 0)) - first)
        return ma.call(ma.store(half, ev), [reg(state), reg(o)], [Pointer(ob.buf, first)], [ldo, length - row0(ty)],
                       [ROWS, ev, ldo])

    # q's rows past the end repeat its last (their scores are finite; nothing of them is stored)
    q = copy_tile(q_tile, qb, index, e, lq, tile * block_rows, block_rows, length, warps, zeros=False)
    setup = warps_(lambda ty: SeqStmt((
        ma.call(ma.load_q(e), [Pointer(q_tile, ty * ROWS * lq)], [reg(qf)], [lq], [lq, ma.q_columns(e)]),
        ma.call(ma.init(ev), [], [reg(state), reg(o)], [], [ROWS, ev]))))
    body = SeqStmt((q, setup, loop, warps_(out)))
    for buf in (q_tile, qf, s, o, state):
        body = Allocate(buf, body)
    tiles = For(tile, const(0), convert(ceil_div(length, block_rows)), THREAD_BINDING, body,
                (("thread_tag", "blockIdx.x"),))
    annotations = (("thread_tag", "blockIdx.y"),) + (((DYNAMIC, True),) if dynamic else ()) \
        + (((MIN_BLOCKS, min_blocks),) if min_blocks else ())
    return For(heads, const(0), convert(math.prod(batch)), THREAD_BINDING, tiles, annotations)

