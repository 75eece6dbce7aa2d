"""GPU schedules of operator kernels (the family of target "cuda", and of the interpreter's GPU
runs: Target("python", schedules="gpu")), declared per operator as the CPU's are
(ember.schedules.family), on the kernel shapes of ember.cuda.schedules:

- every pattern kind without a schedule of its own (`default.default_schedule`): intermediate
  stages inlined; an output without reduction axes (elementwise, broadcast, injective: gather,
  transpose, concat, pad, ...) fused, 4 elements a thread where they divide it, 256 threads a
  block; an output with reduction axes (pooling, convolution, a reduction that does not take the
  block schedule), or one that reads reductions (a convolution's fused bias and ReLU), one
  output element a thread, its reductions in registers; a 0-d output on one thread;
- `reduce`: a reduction long enough, or to few outputs (a global average pool at batch 1), one
  output element a block, the block's threads reducing strided parts through shared memory and
  the partials folded with warp shuffles (`rows`); a reduction to one value (0-d) in one block;
- `rows`: softmax, log_softmax, layer_norm, rms_norm over the last axis (the leading ones, static
  or symbolic, are the rows), a row a block, the row read from global memory once (kept in
  registers or shared memory), each statistic of the row reduced across the block's threads;
- `matmul`: matmul and gemm of float16/bfloat16 operands (or marked tf32) on Tensor Cores at
  any shape (linear layers, batched matmul; the epilogue fused after them from the fp32 sums),
  convolutions as implicit GEMMs (conv2d_gemm, conv2d_nhwc_gemm) likewise, and matmul of 2-D float32 operands
  tiled in shared memory (register tiles per thread, the K loop pipelined) where the tiles
  divide the shape;
- `gemv`: gemm with one output row (a linear layer at batch 1), whatever its type, a block per
  32 columns, each column's reduction split over 8 threads and folded through shared memory
  (`matmul`'s gemm tries it first).
- `scan`: cumsum and cumprod written as GPU kernels of their own (Family.computes), a row a
  block scanned in chunks carrying the running total, or a thread a column;
- `tensor_scatter`: a cache update as a choice per element (Family.computes), spread by the default;
- `externs`: det's statement (Family.computes), its parallel loop over matrices on threads;
- `topk`: a thread an output element, its row's ranks in its registers (static rows of up to 1024).
A declared schedule that does not fit a kernel declines it (returns False) before changing
anything, and the default runs.
"""

from __future__ import annotations

from ..family import Family
from .default import default_schedule

FAMILY = Family(__name__, __path__, default_schedule)
schedules, declared, schedule_for = FAMILY.schedules, FAMILY.declared, FAMILY.schedule_for
computes, compute_for = FAMILY.computes, FAMILY.compute_for
