"""The GPU's design space (target "cuda"'s tuner rules): sketches that bind a task's loops to
blocks and threads, written on the GPU schedules of ember.cuda.schedules, whose parameters are
the sampling decisions the search mutates.

- **gemm** (C = A @ B, float32, A of M x K and B of K x N placeholders): the shared-memory tiled
  product (`schedules.gemm`): a block's tile BM x BN, a thread's register tile TM x TN, panels of
  BK columns of k staged in shared memory, copied `vector` elements a thread at a time (16 bytes
  for 4), the K loop pipelined over `stages` buffers (cp.async on sm_80 and later), the loops that
  `gemm` leaves rolled (the copies' chunks a thread) unrolled up to a sampled limit;
- **reduce** (one reduction over the last axis, an output element per row): a row per block,
  reduced across `threads` threads (`schedules.reduce_block`: partials in shared memory, folded
  with warp shuffles), the inner loops unrolled up to a sampled limit;
- **elementwise** (no reduction): every axis fused, `threads` threads a block of `vector`
  elements each.

The gemm's decisions are drawn within what every GPU allows (32 to 1024 threads a block, 48 KiB
of static shared memory for its panels of A and B), so few trials go to candidates the build
refuses; one that fails (its build, its launch, or past the measuring time) counts as invalid.
"""

from __future__ import annotations

from ..cuda import schedules
from ..errors import ScheduleError
from ..te.schedule import TESchedule
from ..te.tensor import Tensor
from ..tir.expr import as_int
from ..tir.functor import collect
from ..tir.schedule import Schedule
from ..tir.stmt import BlockRealize
from .space import UNROLL_STEPS, Sketch, root_loops
from .task import Task

TILES = (16, 32, 64, 128)  # block tiles BM, BN (those dividing the output)
PANELS = (4, 8, 16, 32)  # BK
THREAD_TILES = (1, 2, 4, 8)  # TM, TN
VECTORS = (1, 4)
STAGES = (1, 2)
BLOCK_THREADS = (32, 1024)  # the gemm's threads a block: a warp at least, the limit every GPU shares
SHARED_BYTES = 48 * 1024  # static shared memory every GPU allows a block
THREADS = (32, 64, 128, 256, 512, 1024)


def gpu_design_space(task: Task, target=None) -> list[Sketch]:
    """The one GPU sketch that fits the task (ScheduleError when none does); every GPU takes
    the same sketches, so `target` says nothing here."""
    for name, rules in RULES.items():
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


def gemm_rules(sch: Schedule) -> None:
    blocks = _blocks(sch)
    if len(blocks) != 1 or not blocks[0].is_reduction or len(sch.mod.params) != 3:
        raise ScheduleError("gemm: one reduction block of three parameters")
    A, B, C = sch.mod.params
    if C.dtype != "float32" or not all(b.ndim == 2 for b in (A, B, C)):
        raise ScheduleError("gemm: three float32 matrices")
    (M, K), (K2, N), shape = (tuple(as_int(d) for d in b.shape) for b in (A, B, C))
    if K != K2 or shape != (M, N):
        raise ScheduleError("gemm: C = A @ B")
    BM = _choice(sch, [t for t in TILES if M % t == 0])
    BN = _choice(sch, [t for t in TILES if N % t == 0])
    BK = _choice(sch, [t for t in PANELS if K % t == 0 and (BM + BN) * t * 4 <= SHARED_BYTES])

    def fits(tm: int, tn: int) -> bool:
        return BM % tm == 0 and BN % tn == 0 and BLOCK_THREADS[0] <= (BM // tm) * (BN // tn) <= BLOCK_THREADS[1]

    TM = _choice(sch, [t for t in THREAD_TILES if any(fits(t, u) for u in THREAD_TILES)])
    TN = _choice(sch, [u for u in THREAD_TILES if fits(TM, u)])
    vector = _choice(sch, [v for v in VECTORS if BK % v == 0 and TN % v == 0])
    stages = _choice(sch, [n for n in STAGES if n * (BM + BN) * BK * 4 <= SHARED_BYTES])
    unroll = _choice(sch, UNROLL_STEPS)
    s, t = _view(sch)
    schedules.gemm(s, t[A.name], t[B.name], t[C.name], BM=BM, BN=BN, BK=BK, TM=TM, TN=TN, vector=vector,
                   stages=stages)
    _unroll(sch, unroll)


def reduce_rules(sch: Schedule) -> None:
    blocks = _blocks(sch)
    if len(blocks) != 1 or not blocks[0].is_reduction:
        raise ScheduleError("reduce: one reduction block")
    block = blocks[0]
    reduce_axes = [iv for iv in block.iter_vars if iv.kind == "reduce"]
    if len(reduce_axes) != 1 or len(block.iter_vars) < 2 or len(block.writes) != 1:
        raise ScheduleError("reduce: one reduction axis, an output element per row")
    m = as_int(reduce_axes[0].dom.extent)
    threads = _choice(sch, [t for t in THREADS if t <= max(32, m)])
    unroll = _choice(sch, UNROLL_STEPS)
    s, t = _view(sch)
    out = t[block.writes[0].buffer.name]
    schedules.reduce_block(s, out, out, threads)
    _unroll(sch, unroll)


def elementwise_rules(sch: Schedule) -> None:
    blocks = _blocks(sch)
    if len(blocks) != 1 or blocks[0].is_reduction or len(blocks[0].writes) != 1:
        raise ScheduleError("elementwise: one block without a reduction")
    threads = _choice(sch, THREADS)
    vector = _choice(sch, VECTORS)
    s, t = _view(sch)
    schedules.elementwise(s, t[blocks[0].writes[0].buffer.name], threads, vector)


def _unroll(sch: Schedule, limit: int) -> None:
    """The auto-unroll limit on the outermost loop of each nest (its inner serial loops unrolled
    while their code stays under `limit` statements)."""
    if limit:
        for loop in root_loops(sch):
            sch.annotate(loop, "pragma_auto_unroll_max_step", limit)


RULES = {"gemm": gemm_rules, "reduce": reduce_rules, "elementwise": elementwise_rules}
