"""The GPU's design space (target "cuda"'s tuner rules): sketches that bind a task's loops to
blocks and threads, written on the GPU schedules of ember.cuda.schedules, whose parameters are
the sampling decisions the search mutates.

- **gemm** (C = A @ B, float32, A of M x K and B of K x N placeholders): the shared-memory tiled
  product (`schedules.gemm`): a block's tile BM x BN, a thread's register tile TM x TN, panels of
  BK columns of k staged in shared memory, copied 16 bytes a thread at a time wherever BK and TN
  allow (4 floats), the K loop pipelined over `stages` buffers (1 to 4, those that fit the shared
  memory; cp.async on sm_80 and later), the blocks launched `group` rows of tiles at a time down
  each column (for the L2), the loops that `gemm` leaves rolled (the copies' chunks a thread)
  unrolled up to a sampled limit.
  Tiles and panels are the CHOICES largest of their kind that divide the shape (64 to 256 and 8
  to 32 for a 4096^3 product), so the GPU family's default (ember.schedules.gpu.matmul: 64 x 64
  x 16, 4 x 4 a thread, two stages) is a candidate (`gemm_candidate`) from which a search can
  start, and so is 128 x 128 x 16, 8 x 8 a thread;
- **reduce** (one reduction over the last axis, an output element per row): a row per block,
  reduced across `threads` threads (`schedules.reduce_block`: partials in shared memory, folded
  with warp shuffles), the inner loops unrolled up to a sampled limit;
- **elementwise** (no reduction): every axis fused, `threads` threads a block of `vector`
  elements each.

The gemm's decisions are drawn within the target's limits (ember.target.GPU: threads, static
shared memory and registers a block, a block's registers estimated from its tiles), so trials go
to candidates the GPU runs, not to ones its build or launch refuses (which still count as invalid
when they come: a failed build, launch, or a run past the measuring time).
"""

from __future__ import annotations

import functools

from ..cuda import schedules
from ..errors import ScheduleError
from ..target import GPU, WARP
from ..te.schedule import TESchedule
from ..te.tensor import Tensor
from ..tir.expr import as_int
from ..tir.functor import collect
from ..tir.schedule import Schedule
from ..tir.stmt import BlockRealize
from .space import UNROLL_STEPS, Sketch, apply_sketch, root_loops
from .task import Task

TILES = (16, 32, 64, 128, 256)  # block tiles BM, BN
PANELS = (4, 8, 16, 32)  # BK
CHOICES = 3  # of TILES and PANELS, the largest that divide the shape
THREAD_TILES = (2, 4, 8, 16)  # TM, TN
MAX_ACCUMULATORS = 128  # TM x TN: past it, a thread's registers (255 at most) spill
SPARE_REGISTERS = 32  # a gemm thread's registers besides its tiles (addresses, indices), estimated
VECTOR = 4  # floats a copy moves (16 bytes) wherever BK and TN are multiples of it
STAGES = (1, 2, 3, 4)  # shared buffers of the K loop (ember.cuda.pipeline: copies S - 1 iterations ahead)
GROUPS = (1, 4, 16)  # rows of tiles a column of blocks walks before the next (those dividing the rows)
THREADS = (32, 64, 128, 256, 512, 1024)


def gpu_design_space(task: Task, target=None) -> list[Sketch]:
    """The one GPU sketch that fits the task (ScheduleError when none does), its decisions within
    the limits of `target`'s GPU (GPU()'s when it has none)."""
    gpu = target.gpu if target is not None and target.gpu is not None else GPU()
    for name, rules in RULES.items():
        rules = functools.partial(rules, gpu=gpu)
        try:
            rules(Schedule(task.func, seed=0))
        except ScheduleError:
            continue
        return [Sketch(f"gpu-{name}", False, rules=rules)]
    raise ScheduleError(f"task {task.name}: no GPU sketch fits it (a float32 product C = A @ B, one reduction over "
                        f"the last axis, or an elementwise computation)")


def _choice(sch: Schedule, values) -> int:
    values = list(values)
    if not values:
        raise ScheduleError("no legal value to sample")
    return int(sch.sample_categorical(values, [1] * len(values)))


def _blocks(sch: Schedule) -> list:
    return [r.block for r in collect(sch.mod.body, lambda s: isinstance(s, BlockRealize)) if r.block.name != "root"]


def _view(sch: Schedule) -> tuple[TESchedule, dict[str, Tensor]]:
    """A te view of the schedule and the tensors of its parameters, by name."""
    return TESchedule.over(sch), {p.name: Tensor(None, 0, p) for p in sch.mod.params}


def gemm_rules(sch: Schedule, gpu: GPU) -> None:
    blocks = _blocks(sch)
    if len(blocks) != 1 or not blocks[0].is_reduction or len(sch.mod.params) != 3:
        raise ScheduleError("gemm: one reduction block of three parameters")
    A, B, C = sch.mod.params
    if C.dtype != "float32" or not all(b.ndim == 2 for b in (A, B, C)):
        raise ScheduleError("gemm: three float32 matrices")
    (M, K), (K2, N), shape = (tuple(as_int(d) for d in b.shape) for b in (A, B, C))
    if K != K2 or shape != (M, N):
        raise ScheduleError("gemm: C = A @ B")
    rows, cols = ([t for t in TILES if n % t == 0][-CHOICES:] for n in (M, N))
    BM = _choice(sch, [b for b in rows if any(_threads(gpu, b, c) for c in cols)])
    BN = _choice(sch, [c for c in cols if _threads(gpu, BM, c)])
    BK = _choice(sch, [t for t in PANELS if K % t == 0 and (BM + BN) * t * 4 <= gpu.shared_per_block][-CHOICES:])
    TM = _choice(sch, [t for t in THREAD_TILES if any(_fits(gpu, BM, BN, t, u) for u in THREAD_TILES)])
    TN = _choice(sch, [u for u in THREAD_TILES if _fits(gpu, BM, BN, TM, u)])
    vector = VECTOR if BK % VECTOR == 0 and TN % VECTOR == 0 else 1
    stages = _choice(sch, [n for n in STAGES if n * (BM + BN) * BK * 4 <= gpu.shared_per_block])
    group = _choice(sch, [g for g in GROUPS if (M // BM) % g == 0])
    unroll = _choice(sch, UNROLL_STEPS)
    s, t = _view(sch)
    schedules.gemm(s, t[A.name], t[B.name], t[C.name], BM=BM, BN=BN, BK=BK, TM=TM, TN=TN, vector=vector,
                   stages=stages)
    _group_rows(sch, blocks[0].name, group)
    _unroll(sch, unroll)


def _group_rows(sch: Schedule, name: str, group: int) -> None:
    """Blocks launched `group` rows of tiles at a time down each column of tiles (blockIdx.x the
    column and the row within the group, the row fastest), so that the blocks that run together
    read fewer panels of A and B, which stay in the L2 between them (Triton's grouped order);
    1: row by row, as `gemm` binds them."""
    if group > 1:
        rows, cols = sch.get_loops(sch.get_block(name))[:2]
        rows, within = sch.split(rows, [None, group])
        sch.reorder(rows, cols, within)
        sch.bind(rows, "blockIdx.y")
        sch.bind(sch.fuse(cols, within), "blockIdx.x")


def _threads(gpu: GPU, BM: int, BN: int) -> bool:
    """Some thread tile fits a BM x BN block tile."""
    return any(_fits(gpu, BM, BN, t, u) for t in THREAD_TILES for u in THREAD_TILES)


def _fits(gpu: GPU, BM: int, BN: int, TM: int, TN: int) -> bool:
    """A block of (BM/TM) x (BN/TN) threads, at least a warp, within the GPU's threads and registers
    a block, each thread's accumulators within MAX_ACCUMULATORS."""
    threads = (BM // TM) * (BN // TN)
    registers = TM * TN + TM + TN + SPARE_REGISTERS  # accumulators, a column of A's tile, a row of B's
    return BM % TM == 0 and BN % TN == 0 and TM * TN <= MAX_ACCUMULATORS and \
        WARP <= threads <= gpu.threads_per_block and threads * registers <= gpu.registers_per_block


def gemm_candidate(task: Task, target=None, *, BM: int, BN: int, BK: int, TM: int, TN: int, stages: int,
                   group: int = 1, unroll: int = 0) -> Schedule:
    """The gemm sketch's candidate of these decisions (a ScheduleError when the space lacks one):
    a trace the search knows as one of its own, so that a default schedule measured first seeds it."""
    [sketch] = gpu_design_space(task, target)
    if sketch.name != "gpu-gemm":
        raise ScheduleError(f"task {task.name} is not a float32 product C = A @ B: its GPU sketch is {sketch.name}")
    wanted, decisions = [BM, BN, BK, TM, TN, stages, group, unroll], []
    for value in wanted:  # each decision an index into the values legal after the ones before it
        sch = apply_sketch(task, sketch, decisions)
        inst = [i for i in sch.trace if i.kind == "sample_categorical"][len(decisions)]
        values = list(dict(inst.attrs)["candidates"])
        if value not in values:
            raise ScheduleError(f"gemm: {value} is not among the legal values {values} of decision {len(decisions)} "
                                f"(BM, BN, BK, TM, TN, stages, group, unroll)")
        decisions.append(values.index(value))
    return apply_sketch(task, sketch, decisions)


def reduce_rules(sch: Schedule, gpu: GPU) -> None:
    blocks = _blocks(sch)
    if len(blocks) != 1 or not blocks[0].is_reduction:
        raise ScheduleError("reduce: one reduction block")
    block = blocks[0]
    reduce_axes = [iv for iv in block.iter_vars if iv.kind == "reduce"]
    if len(reduce_axes) != 1 or len(block.iter_vars) < 2 or len(block.writes) != 1:
        raise ScheduleError("reduce: one reduction axis, an output element per row")
    m = as_int(reduce_axes[0].dom.extent)
    threads = _choice(sch, [t for t in THREADS if t <= min(max(32, m), gpu.threads_per_block)])
    unroll = _choice(sch, UNROLL_STEPS)
    s, t = _view(sch)
    out = t[block.writes[0].buffer.name]
    schedules.reduce_block(s, out, out, threads)
    _unroll(sch, unroll)


def elementwise_rules(sch: Schedule, gpu: GPU) -> None:
    blocks = _blocks(sch)
    if len(blocks) != 1 or blocks[0].is_reduction or len(blocks[0].writes) != 1:
        raise ScheduleError("elementwise: one block without a reduction")
    threads = _choice(sch, [t for t in THREADS if t <= gpu.threads_per_block])
    vector = _choice(sch, (1, VECTOR))
    s, t = _view(sch)
    schedules.elementwise(s, t[blocks[0].writes[0].buffer.name], threads, vector)


def _unroll(sch: Schedule, limit: int) -> None:
    """The auto-unroll limit on the outermost loop of each nest (its inner serial loops unrolled
    while their code stays under `limit` statements)."""
    if limit:
        for loop in root_loops(sch):
            sch.annotate(loop, "pragma_auto_unroll_max_step", limit)


RULES = {"gemm": gemm_rules, "reduce": reduce_rules, "elementwise": elementwise_rules}
