"""GPU schedules of a few kernel shapes, written once for the tests and the benchmarks (and the
defaults a CUDA backend will choose from): each takes a te schedule and the tensor to schedule.

- `elementwise`: every axis fused, split into blocks of `threads` threads of `vector` elements
  each (a vectorized loop: 16-byte accesses for 4 lanes of 4 bytes, ember.cuda.vectors), or of
  `per_thread` such vectors each, the reductions it reads (a convolution under its bias and
  ReLU) computed at each thread;
- `rows`: a row per thread (a reduction over the last axis, softmax), its reductions in
  registers, rows split into blocks of `threads` (coalesced only across rows: a first schedule,
  until reductions across a block's threads exist);
- `row_block`: a row per block (softmax, normalizations), its reductions across the block's
  threads in two phases, partials through shared memory, their fold through warp shuffles
  (ember.cuda.warp); reads coalesced, the output optionally 16 bytes a thread, the row
  optionally read from global memory once, into shared memory or registers;
- `reduce_block`: an element of a reduction's output per block, reduced across the block's
  threads as `row_block`'s statistics are (its reduced axes taken as one), stored by one thread;
  a 0-d output (a whole tensor's sum) in one block;
- `gemv`: a one-row product (a decode step's linear layer), a block per 32 columns, each
  column's reduction split over 8 threads and folded through shared memory;
- `gemm`: C = A @ B tiled for shared memory: a block computes a BM x BN tile of C with
  (BM/TM) x (BN/TN) threads, each a TM x TN register tile (cache_write "local"); the K loop
  stages BK-wide panels of A and B in shared memory (cache_read "shared"), loaded by all the
  block's threads together (with `vector=4`, 16 bytes a thread, and B's register tile loaded
  16 bytes at a time); the barriers come from ember.cuda.sync. `matmul` builds the same
  product with its shared tiles laid out for conflict-free reads (a compute of its own);
- `cuda_core_product`: an operator's float32 product tiled as `gemm` is, at any shape (batch
  axes, B transposed, tiles padded), its epilogue computed from each thread's register tile;
- Tensor Cores' (mma.sync or wmma fragments), `tensorcore_gemm` and `tensorcore_product`: ember.cuda.tensorcore.
"""

from __future__ import annotations

from .. import te
from ..errors import ScheduleError
from ..te.schedule import TESchedule, ThreadAxis
from ..tir.expr import BufferLoad, as_int
from ..tir.functor import stmt_exprs, visit_expr, visit_stmt


def elementwise(s: TESchedule, out, threads: int = 256, vector: int = 4, producers=(), per_thread: int = 1) -> None:
    """`producers`: stages `out` reads (reductions, consumers first) computed at each thread,
    for its elements only. `per_thread`: vectors a thread computes, `threads` vectors apart (each
    step of the unrolled loop coalesced across the block; more loads in flight a thread, fewer
    blocks)."""
    stage = s[out]
    fused = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
    if vector > 1:
        fused, lanes = stage.split(fused, factor=vector)
        stage.vectorize(lanes)
    block, thread = stage.split(fused, factor=threads)
    if per_thread > 1:
        block, step = stage.split(block, factor=per_thread)
        stage.reorder(block, thread, step)
        stage.unroll(step)
    stage.bind(block, ThreadAxis("blockIdx.x"))
    stage.bind(thread, ThreadAxis("threadIdx.x"))
    for t in producers:
        s[t].compute_at(stage, thread)


def rows(s: TESchedule, out, producers=(), threads: int = 128) -> None:
    """A row of `out` (its leading axes fused; a row reduction's output has no last axis) per
    thread, with the `producers` it reads (row reductions: their value stays in a register)
    computed at that thread, and inlined where they are elementwise (`inline`)."""
    stage = s[out]
    axes = stage.op.axis if not stage.op.reduce_axis else (*stage.op.axis, None)
    leading = axes[:-1]
    row = stage.fuse(*leading) if len(leading) > 1 else leading[0]
    block, thread = stage.split(row, factor=threads)
    stage.bind(block, ThreadAxis("blockIdx.x"))
    stage.bind(thread, ThreadAxis("threadIdx.x"))
    for t in producers:
        s[t].compute_at(stage, thread)


def row_block(s: TESchedule, out, reductions, threads: int = 256, vector: int = 1, staged=None,
              scope: str = "shared", rows_per_block: int = 1) -> None:
    """A row of `out` (its last axis; any leading axes fused) per block, its columns split over
    `threads` threads (`vector` consecutive columns each at a time: a vectorized loop, 16-byte
    accesses for 4 lanes); each row reduction in `reductions` (given in the order they run: a
    later one may read an earlier one) is computed per block as TVM's cross-thread reductions
    are, in two phases: each thread reduces its part of the row in a register, stored once into
    a shared array of partials (rfactor), then every thread reduces those partials into its own
    register (through warp shuffles: ember.cuda.warp). Among `reductions`, a stage without a
    reduction is a value of the row such as 1/sqrt(var) (computed once per row by every thread),
    or, of `out`'s shape, a row of its own (softmax's exp(x - max), which the sum and the output
    read: computed once, each thread its columns). The barriers between phases come from
    ember.cuda.sync. Columns that `threads` x `vector` do not divide are guarded.

    `staged`: an input (or several) whose row is read from global memory once, 16 bytes a thread
    at a time where `vector` is 4, into `scope`: "shared" (the block's copy of the row, which
    the phases read, each thread a strided part: conflict-free), or "local" (registers: each
    thread keeps the elements it reads in every phase, those of the output's columns it
    computes, as persistent reductions do, and so do the rows of their own; ember.cuda.private
    shrinks each copy to the thread's part, and the loops over them are unrolled so that their
    indices are constants).

    `rows_per_block` > 1 (a 2-D `out`): that many rows a block, a row on each threadIdx.y (short
    rows: a warp a row, blocks with more work); every thread folds the partials of each of the
    block's rows (a loop over them, each through shuffles) and reads its own row's."""
    staged = [] if staged is None else list(staged) if isinstance(staged, list | tuple) else [staged]
    registers = bool(staged) and scope == "local"
    rows = [t for t in reductions if not s[t].op.reduce_axis and t.ndim == out.ndim]
    phases = [r for r in (*reductions, out) if r.ndim == out.ndim or s[r].op.reduce_axis]  # (values of the row
    # read global memory, once per row)
    if registers and not all(reads_own_columns(s, r, x) for r in phases for x in (*staged, *rows)):
        raise ScheduleError("row_block: a stage reads the row at another column than its own (a row's first "
                            "element): a thread's registers hold only its columns; stage the row in shared memory")
    if rows_per_block > 1 and out.ndim != 2:
        raise ScheduleError(f"row_block: {rows_per_block} rows a block take a 2-D output, not {out.ndim}-D")
    stage = s[out]
    *lead, col = stage.op.axis
    row = stage.fuse(*lead) if len(lead) > 1 else lead[0]
    if vector > 1:
        col, lanes = stage.split(col, factor=vector)
    outer, thread = stage.split(col, factor=threads)
    if rows_per_block > 1:
        row, in_block = stage.split(row, factor=rows_per_block)
        stage.reorder(row, in_block, thread, outer)
        stage.bind(in_block, ThreadAxis("threadIdx.y"))
    else:
        stage.reorder(row, thread, outer)
    if vector > 1:
        stage.vectorize(lanes)
    if registers:
        stage.unroll(outer)
    stage.bind(row, ThreadAxis("blockIdx.x"))
    stage.bind(thread, ThreadAxis("threadIdx.x"))
    several = rows_per_block > 1
    readers = []
    for red in reversed(reductions):  # a stage is placed after the ones it reads
        if any(red is r for r in rows):  # a row of its own: in registers, else in shared memory (ember.cuda.scopes)
            if registers:
                local = s.cache_write(red, "local")
                s[red].compute_inline()  # (its readers read the registers)
                red = local
            s[red].compute_at(stage, row)
            _spread(s, red, threads, vector, registers, several)
            readers.append(red)
            continue
        if not s[red].op.reduce_axis:  # a value of the row computed from reductions (1 / sqrt(var))
            s[red].compute_at(stage, row)
            continue
        (axis,) = s[red].op.reduce_axis
        if registers:  # the output's columns: column (ko * threads + part) * vector + lane
            _, axis = s[red].split(axis, factor=threads * vector)
            part, _ = s[red].split(axis, factor=vector)
        else:  # a thread's columns `threads` apart: a warp reads 32 consecutive ones
            _, part = s[red].split(axis, factor=threads)
        partials = s.rfactor(red, part, factor_axis=len(s[red].op.axis))
        local = s.cache_write(partials, "local")  # the thread's part reduced in a register, stored once
        s[red].compute_at(stage, row)
        s[partials].compute_at(stage, row)
        s[partials].bind(s[partials].op.axis[-1], ThreadAxis("threadIdx.x"))
        if several:
            s[partials].bind(s[partials].op.axis[0], ThreadAxis("threadIdx.y"))
        s[local].compute_at(s[partials], s[partials].op.axis[-1])
        if registers:
            for axis in s[local].op.reduce_axis:
                s[local].unroll(axis)
        readers.append(local)
    for tensor in staged:
        copy = s.cache_read(tensor, scope, [r for r in (*readers, out) if _reads(s, r, tensor)])
        s[copy].compute_at(stage, row)
        _spread(s, copy, threads, vector, registers, several)


def _spread(s: TESchedule, t, threads: int, vector: int, unroll: bool, several: bool = False) -> None:
    """A row stage computed at a block's row (its last axis; the others are the row's) spread
    over the block's threads as the output's columns are: `vector` at a time, `threads` apart;
    `several` rows, a row on each threadIdx.y."""
    col = s[t].op.axis[-1]
    if vector > 1:
        col, lanes = s[t].split(col, factor=vector)
        s[t].vectorize(lanes)
    outer, thread = s[t].split(col, factor=threads)
    s[t].bind(thread, ThreadAxis("threadIdx.x"))
    if several:
        s[t].bind(s[t].op.axis[0], ThreadAxis("threadIdx.y"))
    if unroll:
        s[t].unroll(outer)


def reduce_block(s: TESchedule, out, reduction, threads: int = 256) -> None:
    """An element of `out` per block (its axes fused): `reduction`, the one reduction it is
    (`out` itself) or reads at its own index (a mean's sum), is reduced across the block's
    `threads` threads in two phases as `row_block`'s are: each thread's strided part reduced in a
    register, stored once into a shared array (rfactor), then those partials into every thread's
    register (through warp shuffles), from which thread 0 alone computes and stores the element of `out` (every thread
    storing it, one could overwrite an input that another still reads, where the memory plan gives
    `out` that input's buffer: a residual's)."""
    red = s.cache_write(out, "local") if reduction is out else reduction  # the fold into a register
    stage = s[out]
    axes = stage.op.axis
    if not axes:
        _reduce_to_one(s, out, red, threads)
        return
    block = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    block, one = stage.split(block, factor=1)
    stage.bind(block, ThreadAxis("blockIdx.x"))
    stage.bind(one, ThreadAxis("threadIdx.x"))  # (of extent 1: thread 0, the others guarded off)
    axes = s[red].op.reduce_axis  # (several: taken as one, a map's rows and columns)
    axis = s[red].fuse(*axes) if len(axes) > 1 else axes[0]
    _, part = s[red].split(axis, factor=threads)
    partials = s.rfactor(red, part, factor_axis=len(s[red].op.axis))
    local = s.cache_write(partials, "local")
    s[red].compute_at(stage, block)
    s[partials].compute_at(stage, block)
    s[partials].bind(s[partials].op.axis[-1], ThreadAxis("threadIdx.x"))
    s[local].compute_at(s[partials], s[partials].op.axis[-1])


def _reduce_to_one(s: TESchedule, out, red, threads: int) -> None:
    """A reduction to one value (a 0-d `out`: a whole tensor's sum) in one block, the loop of the
    partials split into that block and its threads: each thread's strided part reduced in a
    register, stored into a shared array of partials, which every thread then folds (warp
    shuffles) and from which every thread stores `out` (after the barrier before the fold, no
    thread still reads an input whose buffer `out` may be given)."""
    axes = s[red].op.reduce_axis
    axis = s[red].fuse(*axes) if len(axes) > 1 else axes[0]
    _, part = s[red].split(axis, factor=threads)
    partials = s.rfactor(red, part, factor_axis=0)
    local = s.cache_write(partials, "local")
    block, thread = s[partials].split(s[partials].op.axis[0], nparts=1)
    s[partials].bind(block, ThreadAxis("blockIdx.x"))
    s[partials].bind(thread, ThreadAxis("threadIdx.x"))
    s[local].compute_at(s[partials], thread)
    for t in (red, out) if red is not out else (red,):
        s[t].reverse_compute_at(s[partials], block)
    stage = s[out]
    stage.bind(stage.sch.add_unit_loop(stage.block), ThreadAxis("threadIdx.x"))  # (thread 0 stores it)


def gemv(s: TESchedule, out, product, columns: int = 32, slices: int = 8) -> None:
    """`out`, one row (its axes fused) computed from `product`, a reduction at the same index (a
    vector-matrix product: a decode step's linear layer), `columns` consecutive elements a block:
    the block's threads are `columns` x `slices`, thread (x, y) summing the products of rows
    y, y + slices, ... of its column (a warp reads `columns` consecutive elements of a row of
    the matrix: coalesced) in a register, stored once into a shared array of partials
    (rfactor), then one thread per column (`columns` of the block's threads) folds its
    column's partials and stores the element. The barrier between the phases comes from
    ember.cuda.sync."""
    if columns % slices:
        raise ScheduleError(f"gemv: {slices} slices do not divide {columns} columns")
    stage = s[out]
    axes = stage.op.axis
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    block, column = stage.split(fused, factor=columns)
    stage.bind(block, ThreadAxis("blockIdx.x"))
    # a column's element folded and stored by one thread of the block: the others must not read
    # an input the output overwrites in place (a residual's buffer)
    row, at = stage.split(column, factor=columns // slices)
    stage.bind(row, ThreadAxis("threadIdx.y"))
    stage.bind(at, ThreadAxis("threadIdx.x"))
    (axis,) = s[product].op.reduce_axis
    _, part = s[product].split(axis, factor=slices)
    partials = s.rfactor(product, part, factor_axis=len(s[product].op.axis))
    local = s.cache_write(partials, "local")  # each thread's sum in a register, stored once
    s[product].compute_at(stage, at)
    s[partials].compute_at(stage, block)
    p = s[partials]
    inner = p.fuse(*p.op.axis[:-1]) if len(p.op.axis) > 2 else p.op.axis[0]
    p.bind(inner, ThreadAxis("threadIdx.x"))
    slice_ = p.op.axis[-1]
    p.bind(slice_, ThreadAxis("threadIdx.y"))
    s[local].compute_at(p, slice_)


def reads_own_columns(s: TESchedule, stage, tensor) -> bool:
    """Whether the stage's block (after inlining) reads the tensor only at its own last
    iteration variable in the last index (x[i, k] in a reduction over k, x[i, j] in the output):
    the elements of a row that the thread computing that column holds (`row_block` in
    registers)."""
    blk = s.sch.get_realize(s[stage].block).block
    loads: list = []

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer is tensor.buffer:
            loads.append(e)

    for part in (blk.body, blk.init):
        if part is not None:
            visit_stmt(part, lambda x: [visit_expr(e, on_expr) for e in stmt_exprs(x)])
    own = blk.iter_vars[-1].var if blk.iter_vars else None
    return all(load.indices[-1] is own for load in loads)


def _reads(s: TESchedule, stage, tensor) -> bool:
    """Whether the stage's block (after inlining) reads the tensor."""
    return any(r.buffer is tensor.buffer for r in s.sch.get_realize(s[stage].block).block.reads)


def gemm(s: TESchedule, A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8,
         vector: int = 1, stages: int = 1) -> None:
    """C = A @ B (C's compute reads A[i, k] and B[k, j]) tiled as the module doc says; `vector`
    4: the tiles are copied to shared memory 16 bytes a thread at a time, and at each k step a
    thread copies its TN columns of B's tile (contiguous) into registers 16 bytes at a time (its
    TM rows of A's tile are BK apart: they stay scalar loads); `stages` 2: the K loop is
    pipelined, the next panels copied (with `vector=4`, by cp.async) while this one's products
    run (ember.cuda.pipeline)."""
    _check_tiles(C, BM, BN, TM, TN)
    _tiled(s, s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C]), C, BM, BN, BK, TM, TN,
           [lambda axes: axes, lambda axes: axes], vector, stages)


def matmul(M: int, N: int, K: int, *, BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8,
           dtype: str = "float32"):
    """C = A @ B, tiled as `gemm` is, with its shared tiles laid out as the threads read them:
    the product reads A and B through views (Ap[ib, k, r, t] = A[ib*BM + t*TM + r, k], and Bp
    likewise), inlined into the copies to shared memory, so that in a tile a thread's TM rows
    (TN columns) are 16 elements apart and the threads of a warp read consecutive elements
    (conflict-free shared loads, where `gemm`'s contiguous register tiles make TN threads share a
    bank). Returns the te schedule and its arguments [A, B, C]."""
    ty, tx = BM // TM, BN // TN
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    Ap = te.compute((M // BM, K, TM, ty), lambda ib, k, r, t: A[ib * BM + t * TM + r, k], name="Ap")
    Bp = te.compute((N // BN, K, TN, tx), lambda jb, k, r, t: B[k, jb * BN + t * TN + r], name="Bp")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(Ap[i // BM, k, i % TM, i % BM // TM]
                                                * Bp[j // BN, k, j % TN, j % BN // TN], axis=k), name="C")
    s = te.create_schedule(C.op)
    _check_tiles(C, BM, BN, TM, TN)
    AS, BS = s.cache_read(Ap, "shared", [C]), s.cache_read(Bp, "shared", [C])
    s[Ap].compute_inline()
    s[Bp].compute_inline()
    # copies in the order of memory: along a row of A (k), along a row of B (its columns)
    _tiled(s, AS, BS, C, BM, BN, BK, TM, TN,
           [lambda axes: (axes[0], axes[3], axes[2], axes[1]), lambda axes: (axes[0], axes[1], axes[3], axes[2])])
    return s, [A, B, C]


def _check_tiles(C, BM, BN, TM, TN) -> None:
    M, N = (as_int(d) for d in C.shape)
    if M % BM or N % BN or BM % TM or BN % TN:
        raise ScheduleError(f"gemm: tiles {BM}x{BN} (threads' {TM}x{TN}) must divide {M}x{N}")


def _tiled(s: TESchedule, AS, BS, C, BM, BN, BK, TM, TN, copy_orders, vector: int = 1, stages: int = 1) -> None:
    """The tiling of C and its shared copies AS, BS; `copy_orders` orders each copy's axes before
    they are fused and spread over the block's threads; `vector` > 1: the copies move `vector`
    consecutive elements a thread at a time, and a thread's columns of BS at each k step are
    copied into registers `vector` lanes a load."""
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=BM)
    ti, ri = s[C].split(ii, factor=TM)
    bj, jj = s[C].split(j, factor=BN)
    tj, rj = s[C].split(jj, factor=TN)
    s[C].reorder(bi, bj, ti, tj, ri, rj)
    for axis, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        s[C].bind(axis, ThreadAxis(tag))
    s[CL].compute_at(s[C], tj)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(k, factor=BK)
    s[CL].reorder(ko, ki, ci, cj)
    if stages > 1:
        s[CL].pragma(ko, "software_pipeline", stages)
    if vector > 1:
        BL = s.cache_read(BS, "local", [CL])
        s[BL].compute_at(s[CL], ki)
        outer, lanes = s[BL].split(s[BL].op.axis[-1], factor=vector)
        s[BL].unroll(outer)
        s[BL].vectorize(lanes)
    for axis in (ki, ci, cj):
        s[CL].unroll(axis)
    ty, tx = BM // TM, BN // TN
    for S, order in zip((AS, BS), copy_orders):
        s[S].compute_at(s[CL], ko)
        axes = order(s[S].op.axis)
        s[S].reorder(*axes)
        if vector > 1:  # each thread copies `vector` consecutive elements of a row at a time
            *axes, last = axes
            last, lanes = s[S].split(last, factor=vector)
            axes.append(last)
            s[S].vectorize(lanes)
        _, rest = s[S].split(s[S].fuse(*axes), factor=ty * tx)
        y, x = s[S].split(rest, factor=tx)
        s[S].bind(y, ThreadAxis("threadIdx.y"))
        s[S].bind(x, ThreadAxis("threadIdx.x"))


def cuda_core_product(s: TESchedule, C, out, *, BM: int = 64, BN: int = 64, BK: int = 16, TM: int = 4,
                      TN: int = 4, stages: int = 2) -> None:
    """An operator's float32 product on CUDA cores, any shape: C, its sum of products (read as
    `product_operands` says: batch axes first, B possibly transposed, a linear layer's weights
    read in place), and `out`, the kernel's output computed from C (C itself, or an epilogue
    fused after it: a bias, an activation, a residual), of C's shape. A block computes a BM x BN
    tile of C (of one batch element) with (BM/TM) x (BN/TN) threads, each a TM x TN tile of sums
    in registers over the K loop, from which the same thread computes and stores its elements of
    `out` (the epilogue applied to the register tile, no shared round trip). The K loop stages
    BK-wide panels of A and B in shared memory, copied by the block's threads 4 elements at a
    time (16 bytes where the operands' rows are aligned), the next panels copied while this one's
    products run (`stages` 2: ember.cuda.pipeline). Where the tiles do not divide M, N or K the
    product is padded with zeros (pad_einsum, as `tensorcore_product`) and `out`'s tiles are
    guarded. The panels' rows are padded (storage_align) so that a warp's reads hit distinct
    banks: A's by 4 elements (its two rows of threads read rows TM apart), B's read transposed
    (B[.., j, k], copied an element a thread) by one (its threads read a column)."""
    A, B, b_layout = product_operands(s, C)
    if BM % TM or BN % TN or BK % 4:
        raise ScheduleError(f"cuda_core_product: threads' tiles {TM}x{TN} must divide the block's {BM}x{BN}, and 4 "
                            f"the panels' {BK} columns")
    if C is out:  # the sums into registers first
        C = s.cache_write(out, "local")
    C, operands = shared_operands(s, C, A, B, BM, BN, BK)
    ii, jj, _ = block_grid(s, out, C, BM, BN)
    ti, ri = s[out].split(ii, factor=TM)
    tj, rj = s[out].split(jj, factor=TN)
    s[out].reorder(ti, tj, ri, rj)
    s[out].bind(ti, ThreadAxis("threadIdx.y"))
    s[out].bind(tj, ThreadAxis("threadIdx.x"))
    s[C].compute_at(s[out], tj)  # the thread's tile of sums: registers (ember.cuda.scopes)
    *_, ci, cj = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=BK)
    s[C].reorder(ko, ki, ci, cj)
    if stages > 1:
        s[C].pragma(ko, "software_pipeline", stages)
    for axis in (ki, ci, cj):
        s[C].unroll(axis)
    tx = BN // TN
    for S, transposed, tile in zip(operands, (False, b_layout == "col"), (BM * BK, BK * BN)):
        s[S].compute_at(s[C], ko)
        *lead, row, col = s[S].op.axis
        if transposed:
            s[S].storage_align(row, BK, 1)
        else:  # 4 consecutive elements a thread at a time (16-byte accesses where aligned: ember.cuda.vectors)
            if S is operands[0]:  # A's rows 16 bytes longer: a warp's two rows of threads read distinct banks
                s[S].storage_align(row, BK, 4)
            col, lanes = s[S].split(col, factor=4)
            s[S].vectorize(lanes)
            tile //= 4
        rest = s[S].fuse(*lead, row, col)
        if tile > (BM // TM) * tx:  # (fewer: rows of threads left out, no guard around each vector)
            _, rest = s[S].split(rest, factor=(BM // TM) * tx)
        y, x = s[S].split(rest, factor=tx)
        s[S].bind(y, ThreadAxis("threadIdx.y"))
        s[S].bind(x, ThreadAxis("threadIdx.x"))


def shared_operands(s: TESchedule, C, A, B, BM: int, BN: int, BK: int):
    """C's product padded with zeros to whole BM x BN x BK tiles (pad_einsum; the copy of its part
    out inlined into its reader), and A's and B's copies into shared memory for it, the padding
    written as their tiles are copied (an operand that is a stage of the kernel, a convolution's
    columns, computed there too). Returns (the padded C, [A's copy, B's copy])."""
    padded = s.pad_einsum(C, [1] * (C.ndim - 2) + [BM, BN, BK])
    if C.buffer in padded:  # the copy of C's part out, read by the epilogue
        s[C].compute_inline()
    C = padded.get(C.buffer, C)
    operands = []
    for X in (A, B):
        copy = s.cache_read(padded.get(X.buffer, X), "shared", [C])
        if X.buffer in padded:
            s[padded[X.buffer]].compute_inline()  # zeros past the operand's end, written as the tile is copied
        if s.computed(X):
            s[X].compute_inline()  # (a convolution's columns: computed as their tile is copied)
        operands.append(copy)
    return C, operands


def channels_last(out_shape, c_shape) -> bool:
    """Whether out (.., OH, OW, OC) is C (.., OH*OW, OC) with its rows split in two (a
    channels-last convolution's output positions, ember.ops.conv_gemm's conv2d_nhwc_gemm), not
    its columns (NCHW's (.., OC, OH, OW) of (.., OC, OH*OW)); static shapes, C's unpadded."""
    out_shape, c_shape = [as_int(d) for d in out_shape], [as_int(d) for d in c_shape]
    if len(out_shape) != len(c_shape) + 1 or None in out_shape[-3:] or None in c_shape[-2:]:
        return False
    nchw = out_shape[-2] * out_shape[-1] == c_shape[-1] and out_shape[-3] == c_shape[-2]
    return not nchw and out_shape[-3] * out_shape[-2] == c_shape[-2] and out_shape[-1] == c_shape[-1]


def block_grid(s: TESchedule, out, C, BM: int, BN: int):
    """out's BM x BN tiles of C's last two axes over blockIdx.y and x (C's columns may be out's
    last two axes: a convolution's output positions; or C's rows out's (OH, OW), a channels-last
    one's), the longest batch axis over blockIdx.z and
    any other a loop in the block (fused, the tiles' addresses would leave the buffers' regions
    unknown to their compaction). Returns (the tile's row loop, its column loop, the innermost
    loop outside them, where the block's tile of C is computed)."""
    axes = s[out].op.axis
    if out.ndim == C.ndim + 1 and reads_own_columns(s, out, C):  # C's rows as out's (OH, OW): channels last
        *outer, i, j = (*axes[:-3], s[out].fuse(*axes[-3:-1]), axes[-1])
    else:
        *outer, i, j = axes[:C.ndim]
        if out.ndim == C.ndim + 1:  # C's columns as out's last two axes (a convolution's output positions)
            j = s[out].fuse(j, axes[-1])
    bi, ii = s[out].split(i, factor=BM)
    bj, jj = s[out].split(j, factor=BN)
    z = max(outer, key=lambda a: as_int(a.dom.extent), default=None)
    serial = [a for a in outer if a is not z]
    s[out].reorder(*([z] if z is not None else []), bi, bj, *serial, ii, jj)
    if z is not None:
        s[out].bind(z, ThreadAxis("blockIdx.z"))
    s[out].bind(bi, ThreadAxis("blockIdx.y"))
    s[out].bind(bj, ThreadAxis("blockIdx.x"))
    return ii, jj, serial[-1] if serial else bj


def product_operands(s: TESchedule, C):
    """(A, B, B's layout) of C's product as its block reads them, A[.., i, k] and B[.., k, j]
    ("row") or B[.., j, k] ("col"), batch dimensions first (read at C's batch axes or at 0, a
    broadcast); a ScheduleError where C is not such a product of two float16, bfloat16 or
    float32 (TF32) operands."""
    from ..intrinsics import wmma
    from ..te.tensor import Tensor

    blk = s.sch.get_realize(s[C].block).block
    spatial = [iv.var for iv in blk.iter_vars if iv.kind == "spatial"]
    reduce = [iv.var for iv in blk.iter_vars if iv.kind == "reduce"]
    reads = [r for r in blk.reads if r.buffer is not C.buffer]
    if len(reduce) != 1 or len(spatial) < 2 or len(reads) != 2 or C.dtype != "float32":
        raise ScheduleError(f"tensorcore_product: {blk.name} is not a float32 sum over one axis of products of two "
                            "operands")
    *batch, i, j = spatial
    (k,) = reduce
    by_tail = {}  # (the variables of its last two indices) -> the operand
    for r in reads:
        *lead, p, q = [x.min for x in r.region]
        if (r.buffer.dtype not in (*wmma.DTYPES, "float32") or len(lead) > len(batch)
                or any(x is not v and as_int(x) is None for x, v in zip(reversed(lead), reversed(batch)))):
            raise ScheduleError(f"tensorcore_product: {blk.name} reads {r.buffer.name} as no Tensor Core operand")
        by_tail[id(p), id(q)] = r.buffer
    a = by_tail.get((id(i), id(k)))
    b, b_layout = by_tail.get((id(k), id(j))), "row"
    if b is None:
        b, b_layout = by_tail.get((id(j), id(k))), "col"
    if a is None or b is None or a.dtype != b.dtype:
        raise ScheduleError(f"tensorcore_product: {blk.name} does not read A[.., i, k] and B[.., k, j] (or "
                            "B[.., j, k]) of one type")
    return Tensor(C.op, 0, a), Tensor(C.op, 0, b), b_layout
