"""Split-K: a float32 product whose output tiles are fewer than the GPU's multiprocessors (the
target's, `Target.gpu`; BERT-base's 768-wide layers at 128 tokens: 96 blocks of 32 x 32 on a GPU
of 132) computed as `splits` products over parts of K, then their sum (ember.passes.split_k
rewrites a model's gemm so).

Two kernels, deterministic: `gemm_partials` (ember.ops.gemm_partials) computes partial sums
P[s, i, j] over K's part s into a workspace of splits x M x N floats (`cuda_core_product` with
the part as a batch axis, over blockIdx.z; x's parts read in place as their tiles are copied into
shared memory); `sum_partials` adds the parts in a fixed order, an output element a thread
(coalesced: consecutive threads, consecutive columns), the gemm's epilogue (a bias, an
activation, a residual) fused after it (the GPU family's default). Chosen over one kernel in which
the last block of a tile to finish (an atomic counter, a semaphore) adds the others' partials:
that needs a fence and control flow on a counter's value that the loop IR does not express, and
the interpreter's blocks run one after the other, so it could not check the ordering either;
float atomics into the output would be neither deterministic nor able to apply the epilogue
once. The workspace costs a write and a read of splits x M x N floats (768 KiB for 128 x 768 in
two parts), against a grid that fills the GPU.

A half linear layer's or convolution's partial sums (`gemm_partials` of float16 or bfloat16
operands, `conv2d_gemm_partials`; ember.passes.split_k) are a Tensor Core product with the part as
a batch axis (ember.schedules.gpu.matmul), their sum the same `sum_partials`.

`splits_for` gives the number of parts: the fewest that fill the multiprocessors, K divided
into parts of at least MIN_PART (shorter parts are not worth the extra pass; on Tensor Cores a
part of 256 is 8 steps of 32, what 3 cp.async stages need to overlap twice), 1 where none
fits or the product is one the family leaves launch-bound (under matmul.SMALL multiply-adds: a
second launch would cost more than the idle multiprocessors); a product measured to do better in
other parts has them in product_choices.SPLITS. The thresholds are not measured yet:
benchmarks/split_k_sweep.py (gpu_checks.sh's step splitk) times layers of several shapes in 1, 2, 4
and 8 parts on a GPU against splits_for's choice, benchmarks/product_configs.py (step products)
the half products of ResNet-18 and BERT-base in parts that fill the GPU once and twice.
"""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...ops.gemm_partials import PARTS
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import product_choices, schedules
from .matmul import SMALL, SMS, _tensor_cores, cuda_core_tiles

MIN_PART = 256  # the shortest part of K worth its own blocks
BK = 16  # the K panels of cuda_core_product: a part a whole number of them


def splits_for(batch: int, M: int, N: int, K: int, sms: int = SMS) -> int:
    """The parts K is split into (see the module doc), or the measured choice for this product
    where product_choices.SPLITS has one."""
    if batch == 1 and (M, N, K) in product_choices.SPLITS:
        return product_choices.SPLITS[M, N, K]
    tiles = cuda_core_tiles(batch, M, N, sms)
    blocks = batch * -(-M // tiles["BM"]) * -(-N // tiles["BN"])
    best = 1
    if M * N * K < SMALL:
        return best
    for splits in range(2, K // MIN_PART + 1):
        if blocks * best >= sms:
            break
        if K % splits == 0 and (K // splits) % BK == 0:
            best = splits
    return best


@schedules("gemm_partials")
def schedule_partials(s, outputs, target) -> bool | None:
    """x's parts read in place as their tiles are copied into shared memory (a stage inlined into
    the copies), the part a batch axis (blockIdx.z) of cuda_core_product's tiles, or of Tensor
    Cores' for half operands (their float32 sums the stage the output reads)."""
    (P,) = outputs
    if not P.op.reduce_axis:
        return _tensor_cores(s, P.op.input_tensors[0], P, target.gpu)
    parts = {t.op.name for t in P.op.input_tensors if getattr(t.op, "tag", "") == PARTS}
    inline_intermediates(s.sch, where=lambda block: block.name not in parts)
    splits, M, N = (as_int(d) for d in P.shape)
    gpu.cuda_core_product(s, P, P, **cuda_core_tiles(splits, M, N, target.gpu.multiprocessors), stages=2)
