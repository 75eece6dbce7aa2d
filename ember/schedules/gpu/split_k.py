"""Split-K: a float32 product whose output tiles are fewer than the GPU's multiprocessors (BERT-base's
768-wide layers at 128 tokens: 96 blocks of 32 x 32 on a GPU of 132) computed as `splits`
products over parts of K, then their sum.

Two kernels, deterministic: the first computes partial sums P[s, i, j] over K's part s (the
product of A's and B's columns/rows s*K/splits ..., read in place through views that the
tiles' copies into shared memory inline: `cuda_core_product` with the part as a batch axis, over
blockIdx.z), into a workspace of splits x M x N floats; the second sums the parts in a fixed
order, an output element a thread (coalesced: consecutive threads, consecutive columns), its
epilogue (a bias) applied. Chosen over one kernel in which the last block of a tile to finish
(an atomic counter, a semaphore) adds the others' partials: that needs a fence and control flow
on a counter's value that the loop IR does not express, and the interpreter's blocks run one
after the other, so it could not check the ordering either; float atomics into the output would
be neither deterministic nor able to apply the epilogue once. The workspace costs a write and a
read of splits x M x N floats (1.5 MiB for 768 x 128 in two parts), against a grid that fills
the GPU.

`splits_for` gives the number of parts: the fewest that fill the multiprocessors, K divided
into parts of at least MIN_PART (shorter parts are not worth the extra pass), 1 where none
fits.
"""

from __future__ import annotations

from ... import te
from ...cuda import schedules as gpu
from ...errors import ScheduleError
from .matmul import SMS, cuda_core_tiles

MIN_PART = 256  # the shortest part of K worth its own blocks
BK = 16  # the K panels of cuda_core_product: a part a whole number of them


def splits_for(batch: int, M: int, N: int, K: int, sms: int = SMS) -> int:
    """The parts K is split into (see the module doc)."""
    tiles = cuda_core_tiles(batch, M, N)
    blocks = batch * -(-M // tiles["BM"]) * -(-N // tiles["BN"])
    best = 1
    for splits in range(2, K // MIN_PART + 1):
        if blocks * best >= sms:
            break
        if K % splits == 0 and (K // splits) % BK == 0:
            best = splits
    return best


def split_k_gemm(M: int, N: int, K: int, splits: int, *, trans_b: bool = False, bias: bool = False):
    """C = A @ B (B given as (N, K) with `trans_b`: a linear layer's weights) plus a bias of N
    where `bias`, as the module doc's two kernels. Returns ((partials' schedule, [A, B, P]),
    (the sum's schedule, [P, bias?, C]))."""
    if splits < 2 or K % splits or (K // splits) % BK:
        raise ScheduleError(f"split_k_gemm: {splits} parts of K = {K} must be at least 2, each a multiple of {BK}")
    part = K // splits
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((N, K) if trans_b else (K, N), "float32", name="B")
    Av = te.compute((splits, M, part), lambda s, i, k: A[i, s * part + k], name="Av")
    if trans_b:
        Bv = te.compute((splits, N, part), lambda s, j, k: B[j, s * part + k], name="Bv")
    else:
        Bv = te.compute((splits, part, N), lambda s, k, j: B[s * part + k, j], name="Bv")
    k = te.reduce_axis((0, part), name="k")
    P = te.compute((splits, M, N), lambda s, i, j: te.sum(Av[s, i, k] * (Bv[s, j, k] if trans_b else Bv[s, k, j]),
                                                          axis=k), name="P")
    first = te.create_schedule(P.op)
    gpu.cuda_core_product(first, P, P, **cuda_core_tiles(splits, M, N), stages=2)
    Pin = te.placeholder((splits, M, N), "float32", name="P")
    r = te.reduce_axis((0, splits), name="s")
    total = te.compute((M, N), lambda i, j: te.sum(Pin[r, i, j], axis=r), name="total")
    args = [Pin]
    if bias:
        b = te.placeholder((N,), "float32", name="bias")
        C = te.compute((M, N), lambda i, j: total[i, j] + b[j], name="C")
        args.append(b)
    else:
        C = total
    second = te.create_schedule(C.op)
    if bias:
        gpu.elementwise(second, C, threads=256, vector=1, producers=[total])
    else:
        gpu.rows(second, C, threads=256)
    return (first, [A, B, P]), (second, [*args, C])
