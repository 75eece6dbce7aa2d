"""GPU schedule of gemm with one row of output (a linear layer at batch 1: a decode step's): a
block per 32 columns of 8 threads each, each column's reduction split over its 8 threads and
folded through shared memory (ember.cuda.schedules.gemv), so that a layer of N outputs runs
N / 32 blocks of 256 threads, each thread summing K / 8 products, its warp reading rows of the
weight 128 bytes at a time. An output element a thread (the default) runs N / 128 blocks whose
threads each sum all K products: few blocks for a GPU, and each thread a chain of K dependent
additions. A reduction that 8 does not divide leaves its last slices a shorter part (guarded).
Other shapes (several rows, symbolic sizes, columns that 32 does not divide, short reductions)
decline: the default computes an element a thread."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...tir.expr import as_int
from ..rules import inline_intermediates
from .default import count, reductions_of

COLUMNS, SLICES = 32, 8
SHORT = 64  # reductions shorter than this stay on one thread


def schedule_gemv(s, outputs, target) -> bool | None:
    """gemm's schedule where its output is one row (ember.schedules.gpu.matmul tries it first)."""
    (out,) = outputs
    found = [out] if out.op.reduce_axis else reductions_of(s, out)
    if len(found) != 1 or not out.op.axis:
        return False
    (product,) = found
    if len(product.op.reduce_axis) != 1 or product.ndim < 1:
        return False
    n, rows = count(out), count(product)
    k = as_int(product.op.reduce_axis[0].dom.extent)
    columns = as_int(product.shape[-1])
    if None in (n, rows, k, columns) or rows != columns or n != columns or columns % COLUMNS or k < SHORT:
        return False
    inline_intermediates(s.sch)
    if product is out:  # the product itself is the output: its fold into a register first
        product = s.cache_write(out, "local")
    gpu.gemv(s, out, product, COLUMNS, SLICES)
    return None
