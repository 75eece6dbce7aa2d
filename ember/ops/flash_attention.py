"""flash_attention(q, k, v, mask?; causal, scale): scaled_dot_product_attention (layout "bhsd",
its semantics and NumPy reference: ember.ops.attention) as one GPU kernel, the flash-attention
recurrence, which ember.passes.unfold_attention writes for a GPU target where it applies.

One block per (batch..., head) and tile of t queries (`tile_rows`), a thread per query:

    q tile -> shared (scaled)             once
    for each tile of t keys and values (with causal, up to the diagonal):
        k, v tiles -> shared              the block's threads copy them together
        s = q k^T (+ mask), causal and keys past S at -inf, in the thread's registers
        m' = max(m, max s);  p = exp(s - m');  l = l exp(m - m') + sum p
        acc = acc exp(m - m') + p v       (the running max, sum and accumulator in fp32)
    out = acc / l                         (0 where every key is masked out, as torch gives)

No score outlives its tile of keys and nothing of size L x S reaches memory.

Its operands are read where a transformer's projection wrote them, and its result written where
the next product reads it (`layout` and `heads` as scaled_dot_product_attention's): in layout
"bshd" q, k, v are (..., S, H, D) and the result (..., L, H, Dv), a head's rows at the stride of a
token's (ember.passes.fold_transposes folds the head split and merge into it), and with `heads`
(count, q0, k0, v0) q, k and v are heads of one packed QKV projection's output (ember.passes.
fold_qkv_split folds the split into it): a layer's split, three head splits and head merge,
each a full copy of an activation and a launch, are views (ember.ops.gpu_loops.HeadRows). A thread's state
(its q row, running max, sum and accumulator) is laid out across the threads, element d of
thread tx at d * t + tx: shared loads without bank conflicts, and accesses the sync pass sees as
the thread's own, so only the k and v tiles take barriers. Sequence lengths need not be
multiples of the tiles (rows and keys past the end are guarded), and may be symbolic, as may the
batch: the grid and the loop's key tiles are then counted from them, parameters of the kernel
(the head sizes stay static). The tiles live in static shared memory (`shared_bytes`: at most
48 KiB, which `tile_rows` picks the tiles for).

float16 and bfloat16 operands of head sizes that are multiples of 16 take the Tensor Cores for
q k^T and p v, p rounded to the operands' type as the product reads it (`choose`): up to 128, the
mma.sync kernel (ember.ops.flash_attention_mma: scores, softmax state, p and the output in each
warp's registers for the whole loop over keys; `warps` of 16 queries a block, 4 where None,
which ember.passes.unfold_attention lowers where 4 would leave the target's multiprocessors
idle, and `__launch_bounds__` that fit a thread in 128 registers at head sizes up to 64 and
static lengths), past
it the wmma kernel where its tiles fit (ember.ops.flash_attention_tc: scores through shared
memory); other operands are
loaded as floats and every product and sum is fp32 on CUDA cores. The output is stored in the operands'
type. The statement is the kernel itself (a te.extern bound to blocks and threads), so the GPU
family schedules nothing of it; only the CUDA target runs it (the interpreter with GPU semantics
included).
"""

from __future__ import annotations

import math

from .. import te
from ..target import GPU, STATIC_SHARED
from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, Var, as_int, binary, cast, const, convert, select
from ..tir.stmt import THREAD_BINDING, Allocate, BufferStore, For, IfThenElse, SeqStmt
from . import flash_attention_mma as mma
from . import flash_attention_tc as tc
from .attention import LAYOUTS, infer, reference
from .common import te_shape
from .gpu_loops import HeadRows, at, batch_index, ceil_div, serial, threads
from .registry import OpDef, OpTypeError, register

FLOAT = "float32"


def tile_rows(e: int, ev: int) -> int | None:
    """Queries (and keys) per tile for head sizes e and ev: 32, else 16, where the block's shared
    memory fits; None where neither does."""
    return next((t for t in (32, 16) if shared_bytes(t, e, ev) <= STATIC_SHARED), None)


def shared_bytes(t: int, e: int, ev: int) -> int:
    """The q, k, v tiles, the accumulator and the running max and sum of a tile of t."""
    return 4 * (t * e + t * e + t * ev + t * ev + 2 * t)


def choose(dtype: str | None, e: int, ev: int, gpu: GPU) -> str:
    """The kernel of operands of one `dtype` (None: mixed) and head sizes e and ev on `gpu` (its
    Tensor Cores, GPU.tensor_cores; the shared memory its blocks may opt in to): "mma" (ember.ops.
    flash_attention_mma, mma.sync from sm_80: half operands, head sizes multiples of 16 whose
    tiles fit), else "wmma" (ember.ops.flash_attention_tc: half ones whose tiles fit its 48 KiB;
    float16 from sm_70, bfloat16 from sm_80), else "cuda cores" (this module's: float32, mixed
    types, other head sizes, half types a GPU's Tensor Cores do not take)."""
    cores = gpu.tensor_cores(dtype) if dtype is not None else ()
    if "mma" in cores and mma.config(dtype, e, ev, gpu.shared_opt_in) is not None:
        return "mma"
    if "wmma" in cores and tc.fits(dtype, e, ev, STATIC_SHARED):
        return "wmma"
    return "cuda cores"


def _infer(types, attrs):
    if attrs["layout"] not in LAYOUTS:
        raise OpTypeError(f"flash_attention: layout must be one of {LAYOUTS}, got {attrs['layout']!r}")
    if attrs["warps"] not in (None, *mma.WARPS):
        raise OpTypeError(f"flash_attention: warps must be one of {mma.WARPS} (or None), got {attrs['warps']!r}")
    out = infer(types, attrs)
    q, k, v = types[:3]
    if not all(isinstance(x.shape[-1], int) for x in (q, v)) or tile_rows(q.shape[-1], v.shape[-1]) is None:
        raise OpTypeError(f"flash_attention: the head sizes must be static and fit the tiles in {STATIC_SHARED} bytes "
                          f"of shared memory, got q {q.shape} and v {v.shape}")
    return out


def _reference(inputs, attrs):
    return reference(inputs, attrs)


def _compute(inputs, attrs, out_types):
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) == 4 else None
    out_shape = te_shape(out_types[0], inputs)
    ins = list(dict.fromkeys(inputs))  # q, k, v may be one tensor
    slots = [ins.index(x) for x in inputs]
    e = as_int(q.shape[-1])
    scale = 1 / math.sqrt(e) if attrs["scale"] is None else attrs["scale"]

    gpu = GPU(arch=attrs["gpu_arch"], shared_opt_in=attrs["shared_opt_in"])  # (the target GPU's: OpDef.gpu_facts)
    chosen = choose(q.dtype if len({x.dtype for x in (q, k, v)}) == 1 else None, e, as_int(v.shape[-1]), gpu)

    bshd = attrs["layout"] == "bshd"
    firsts = attrs["heads"][1:] if attrs["heads"] is not None else (0, 0, 0)

    def build(bufs, outs):
        operands = (HeadRows(bufs[a], bshd, first) for a, first in zip(slots[:3], firsts))
        args = (*operands, bufs[slots[3]] if mask is not None else None, HeadRows(outs[0], bshd), float(scale),
                bool(attrs["causal"]))
        if chosen == "mma":
            ev = as_int(v.shape[-1])
            warps, bn, dynamic = mma.config(q.dtype, e, ev, gpu.shared_opt_in)
            warps = attrs["warps"] or warps
            static = all(as_int(x.shape[-3 if bshd else -2]) is not None for x in (q, k))  # the lengths
            return mma.kernel(*args, warps, bn, dynamic, min_blocks=mma.min_blocks(warps, e, ev, static))
        return tc.kernel(*args, STATIC_SHARED) if chosen == "wmma" else _kernel(*args)

    return [te.extern([(out_shape, q.dtype)], ins, build, name="flash_attention")[0]]


def _kernel(qb: HeadRows, kb: HeadRows, vb: HeadRows, mb: Buffer | None, ob: HeadRows, scale: float,
            causal: bool) -> For:
    batch = ob.batch  # (a symbolic batch: the grid per launch)
    length, keys = qb.rows, kb.rows  # symbolic or static
    e, ev = qb.width, vb.width
    t = tile_rows(e, ev)
    q_tile, k_tile, v_tile = (Buffer(n, (const(t * d),), FLOAT) for n, d in (("q_tile", e), ("k_tile", e),
                                                                             ("v_tile", ev)))
    acc, top, total = Buffer("acc", (const(t * ev),), FLOAT), Buffer("top", (const(t),), FLOAT), \
        Buffer("total", (const(t),), FLOAT)
    scores, scalar = Buffer("scores", (const(t),), FLOAT), Buffer("running", (const(2),), FLOAT)
    minus_inf = const(-math.inf, FLOAT)
    heads, tile = Var("heads", dt.INDEX_DTYPE), Var("tile", dt.INDEX_DTYPE)
    index = batch_index(heads, batch)

    def load(x: HeadRows, row, col):
        return cast(FLOAT, BufferLoad(x.buf, x.at(index, row, col), x.buf.dtype))

    def row_of(tx):
        return tile * t + tx

    load_q = threads(lambda tx: serial("d", e, lambda d: IfThenElse(
        row_of(tx) < length, BufferStore(q_tile, load(qb, row_of(tx), d) * scale, (d * t + tx,)),
        BufferStore(q_tile, const(0.0, FLOAT), (d * t + tx,)))), t)
    init = threads(lambda tx: SeqStmt((
        BufferStore(top, minus_inf, (tx,)), BufferStore(total, const(0.0, FLOAT), (tx,)),
        serial("d", ev, lambda d: BufferStore(acc, const(0.0, FLOAT), (d * t + tx,))))), t)

    def copy(tile_buf, src, width, key0):
        """The block's threads copy a tile of keys' rows together, a strided share each."""
        def body(tx):
            def step(c):
                flat = c * t + tx
                key = key0 + flat // width
                value = select(key < keys, load(src, binary("min", key, convert(keys - 1)), flat % width),
                               const(0.0, FLOAT))
                return BufferStore(tile_buf, value, (flat,))
            return serial("c", width, step)  # t * width elements, t threads
        return threads(body, t)

    def attend(key0):
        def body(tx):
            row = row_of(tx)

            def score(j):
                key = key0 + j
                dot = serial("d", e, lambda d: BufferStore(
                    scores, BufferLoad(scores, (j,), FLOAT) + BufferLoad(q_tile, (d * t + tx,), FLOAT)
                    * BufferLoad(k_tile, (j * e + d,), FLOAT), (j,)))
                keep = (key < keys) & (row < length)
                if causal:
                    keep = keep & (key <= row)
                s = BufferLoad(scores, (j,), FLOAT)
                masked = [BufferStore(scores, select(keep, s, minus_inf), (j,))]
                if mb is not None:
                    m = BufferLoad(mb, at(index, mb, row, key), mb.dtype)
                    masked = [IfThenElse(keep, BufferStore(scores, select(m, s, minus_inf) if dt.is_bool(mb.dtype)
                                                           else s + cast(FLOAT, m), (j,)),
                                         BufferStore(scores, minus_inf, (j,)))]
                return SeqStmt((BufferStore(scores, const(0.0, FLOAT), (j,)), dot, *masked))

            new_top = BufferLoad(scalar, (const(0),), FLOAT)
            shift = select(binary("==", new_top, minus_inf), const(0.0, FLOAT), new_top)  # every key so far masked out
            alpha = BufferLoad(scalar, (const(1),), FLOAT)
            p = lambda j: BufferLoad(scores, (j,), FLOAT)  # noqa: E731
            return Allocate(scores, Allocate(scalar, SeqStmt((
                serial("j", t, score),
                BufferStore(scalar, BufferLoad(top, (tx,), FLOAT), (const(0),)),
                serial("j", t, lambda j: BufferStore(scalar, binary("max", new_top, p(j)), (const(0),))),
                BufferStore(scalar, te.exp(BufferLoad(top, (tx,), FLOAT) - shift), (const(1),)),
                serial("j", t, lambda j: BufferStore(scores, te.exp(p(j) - shift), (j,))),
                BufferStore(total, BufferLoad(total, (tx,), FLOAT) * alpha, (tx,)),
                serial("j", t, lambda j: BufferStore(total, BufferLoad(total, (tx,), FLOAT) + p(j), (tx,))),
                serial("d", ev, lambda d: SeqStmt((
                    BufferStore(acc, BufferLoad(acc, (d * t + tx,), FLOAT) * alpha, (d * t + tx,)),
                    serial("j", t, lambda j: BufferStore(
                        acc, BufferLoad(acc, (d * t + tx,), FLOAT) + p(j) * BufferLoad(v_tile, (j * ev + d,), FLOAT),
                        (d * t + tx,)))))),
                BufferStore(top, new_top, (tx,))))))
        return threads(body, t)

    kt = Var("kt", dt.INDEX_DTYPE)
    key_tiles = convert(ceil_div(keys, t))
    if causal:  # the tiles up to the diagonal: keys past the tile's last query are all masked out
        key_tiles = binary("min", key_tiles, tile + 1)
    steps = For(kt, const(0), key_tiles, "serial", SeqStmt((
        copy(k_tile, kb, e, kt * t), copy(v_tile, vb, ev, kt * t), attend(kt * t))))

    def store(tx):
        row, l = row_of(tx), BufferLoad(total, (tx,), FLOAT)

        def element(d):
            value = select(binary("==", l, const(0.0, FLOAT)), const(0.0, FLOAT),
                           BufferLoad(acc, (d * t + tx,), FLOAT) / l)  # every key masked out: 0
            return BufferStore(ob.buf, cast(ob.buf.dtype, value), ob.at(index, row, d))

        return IfThenElse(row < length, serial("d", ev, element))

    body = SeqStmt((load_q, init, steps, threads(store, t)))
    for buf in (q_tile, k_tile, v_tile, acc, top, total):
        body = Allocate(buf, body)
    tiles = For(tile, const(0), convert(ceil_div(length, t)), THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))
    count = math.prod(batch)
    return For(heads, const(0), convert(count), THREAD_BINDING, tiles, (("thread_tag", "blockIdx.y"),))


register(OpDef(
    name="flash_attention",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"causal": False, "scale": None, "layout": "bhsd", "heads": None, "warps": None},
    num_inputs=(3, 4),
    gpu_facts=True,
    doc="scaled_dot_product_attention (layout bhsd) as one GPU kernel: tiles of q, k, v in shared memory, an online "
        "softmax (the CUDA target's; a symbolic batch and lengths, static head sizes whose tiles fit 48 KiB of "
        "shared memory).",
))
