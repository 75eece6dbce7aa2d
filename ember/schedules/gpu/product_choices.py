"""Per-shape choices of the GPU's Tensor Core products, measured on a GPU: where the rules of
`matmul.tensor_core_tiles` (block and warp tiles, steps of k, stages) and `split_k.splits_for`
(parts of K) are not the best for a product that a zoo model runs, its measured best is written
here, and both functions read it first.

- SPLITS[(M, N, K)]: the parts split_k cuts K into (1: none), for a product of M x N outputs
  over K as split_k asks (a convolution: M its output channels, N the images' positions, K its
  taps);
- TILES[(batch, M, N, K)]: the keyword arguments of `tensorcore.tensorcore_product` (BM, BN, BK,
  WM, WN, stages; fragment_stores False where the epilogue through a float tile in shared memory
  measured faster than from the lanes' fragments) for the kernel's product as the schedule sees it
  (a split product's: batch its parts times the images, K a part).

`benchmarks/product_configs.py` (gpu_checks.sh's step `products`) times ResNet-18's and
BERT-base's products at batch 1 in fp16 under the rules and under alternatives, next to
cuDNN/cuBLAS, and prints the entries of its best per shape in this form. Empty until a GPU has
measured them: the rules hold.

The entries are read as a kernel is lowered, and lowered kernels are kept by their operators'
structure and the target, and for a GPU by the entries in force (`entries`: ember.lowering's keys,
in the process and on disk; on disk by ember's source too, which an edit here changes), so a
change of them, in this file or at run time, never serves a kernel lowered under others. Worker
processes read this file as it is: while the entries differ from it (`changed`), the process
lowers its GPU kernels itself.
"""

from __future__ import annotations

SPLITS: dict[tuple[int, int, int], int] = {}
TILES: dict[tuple[int, int, int, int], dict] = {}


def entries() -> str:
    """The entries in force as text (sorted): part of every key of a kernel lowered for a GPU."""
    return repr((sorted(SPLITS.items()), sorted((k, sorted(v.items())) for k, v in TILES.items())))


_WRITTEN = entries()  # (this file's, what a worker process reads)


def changed() -> bool:
    """Whether the entries in force differ from this file's (changed at run time)."""
    return entries() != _WRITTEN
