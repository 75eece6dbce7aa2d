"""Per-shape choices of the GPU's Tensor Core products, measured on a GPU: where the rules of
`matmul.tensor_core_tiles` (block and warp tiles, steps of k, stages) and `split_k.splits_for`
(parts of K) are not the best for a product that a zoo model runs, its measured best is written
here, and both functions read it first.

- SPLITS[(M, N, K)]: the parts split_k cuts K into (1: none), for a product of M x N outputs
  over K as split_k asks (a convolution: M its output channels, N the images' positions, K its
  taps);
- TILES[(batch, M, N, K)]: the keyword arguments of `tensorcore.tensorcore_product` (BM, BN, BK,
  WM, WN, stages) for the kernel's product as the schedule sees it (a split product's: batch its
  parts times the images, K a part).

`benchmarks/product_configs.py` (gpu_checks.sh's step `products`) times ResNet-18's and
BERT-base's products at batch 1 in fp16 under the rules and under alternatives, next to
cuDNN/cuBLAS, and prints the entries of its best per shape in this form. Empty until a GPU has
measured them: the rules hold.

The entries are read as a kernel is lowered, and lowered kernels are kept by their operators'
structure (ember.lowering.LOWERED, and on disk by ember's source, which an edit here changes):
code that changes them at run time clears LOWERED and compiles with EMBER_LOWERED_CACHE=0, as
the benchmark does.
"""

from __future__ import annotations

SPLITS: dict[tuple[int, int, int], int] = {}
TILES: dict[tuple[int, int, int, int], dict] = {}
