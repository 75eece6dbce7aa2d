"""GPU schedules of the products (matmul, gemm: linear layers, batched matmul; conv2d_gemm:
convolutions as implicit GEMMs, and conv2d_gemm_partials, their split-K parts as a batch axis;
conv2d_nhwc_gemm and its partials, channels-last ones, their output's (OH, OW) the product's rows).

float16 and bfloat16 operands (a model compiled with precision "fp16" or "bf16"), and float32 ones
of a product marked tf32 (precision "tf32": as TF32), take Tensor Cores at any shape
(ember.cuda.tensorcore.tensorcore_product) where the target GPU has them for that type
(`GPU.tensor_cores`: mma.sync from sm_80, wmma on sm_70 and sm_75, bfloat16 and TF32 from sm_80;
TF32 products without them run on CUDA cores, half ones take the default schedule): the kernel's
output (the product cast to the inputs' type, and the epilogue fused after it: a bias, a GELU, a
residual) computed from the fp32 sums of a block's tile; tiles that do not divide the shape padded
with zeros; a convolution's columns (im2col) computed as their tiles are copied into shared memory.
The tiles follow the shape (`tensor_core_tiles`): 64x64 where the grid fills the GPU, smaller where
it would not (a linear layer at batch 1 has as many rows as tokens, 1 when decoding), four warps a
block where the tile allows, three cp.async stages where K is long enough; the GPU's multiprocessors
are the target's (`Target.gpu`: the device's, SMS without one). A shape measured on a GPU to do
better otherwise has its choice in `product_choices`.

float32 matmul of 2-D operands whose tiles divide the shape, and no epilogue: shared-memory tiles
with a register tile per thread (ember.cuda.schedules.gemm: 64x64 block tiles, 4x4 a thread,
16-wide panels of k, 16-byte copies, the next panels copied while this one's products run). Every
other float32 product (linear layers, their weights read in place; batched and broadcast matmul;
any M, N, K; an epilogue: bias, activation, residual) on CUDA cores the same way, its tiles padded
where they do not divide the shape (ember.cuda.schedules.cuda_core_product): the block tiles
follow the shape as the Tensor Cores' do (`block_tiles`), 16 x 16 threads a block, each a register
tile of (BM/16) x (BN/16) sums from which it computes its outputs, the epilogue included (a
float32 convolution as an implicit GEMM too, its columns computed as their tiles are copied). A gemm
with one output row (a decode step's linear layers) takes `gemv` first. Products of fewer than
SMALL multiply-adds (launch-bound on a GPU whatever their schedule) decline: the default computes
an output element a thread, its reduction in a register.

Symbolic sizes of a product (a model compiled with `dynamic_shapes`: rows as batch x sequence, a
KV cache's length as N or K of attention's products), on CUDA cores and on Tensor Cores alike,
are tiled as static ones are: the product padded to whole tiles as an expression of the sizes
(pad_einsum), the shared tiles of constant shapes (compacted around the copies and the
tensorized calls, whose pointers keep their indices: ember.tir.intrin_regions), zeros copied past
the symbolic edge, the grid's blocks along that axis ceil(size / tile) at each launch
(ember.cuda.grid), the partial tiles of the output guarded, and a symbolic K loop pipelined as a
constant one is (ember.cuda.pipeline: the next copies guarded by a next iteration; K padded to
at least one tile, so that K = 0 sums a tile of zeros). The tiles are chosen, and SMALL
compared, as for a size of TYPICAL (128 tokens) where one is symbolic.
"""

from __future__ import annotations

from math import prod

from ...cuda import schedules as gpu
from ...cuda import tensorcore
from ...errors import ScheduleError
from ...intrinsics import wmma
from ...ops.conv_gemm import COLUMNS
from ...ops.gemm_partials import PARTS
from ...target import GPU, STATIC_SHARED
from ...te.tensor import PlaceholderOp
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import product_choices, schedules
from .default import reductions_of
from .gemv import schedule_gemv

TILES = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}  # a tile of A or B: one float4 a thread
SMS = GPU().multiprocessors  # blocks that fill the GPU once where no device says: an H100's or H200's
SMALL = 1 << 15  # multiply-adds below which a float32 product keeps the default (launch-bound either way)
TYPICAL = 128  # the size a symbolic dimension is tiled for (rows: tokens of a prefill, a BERT's sequence)
WARPS = 4  # warps a Tensor Core block has where its tile allows (tensor_core_tiles)
STAGES = 3  # the cp.async stages of a Tensor Core product's K loop where it is long enough


@schedules("gemm")
def schedule_gemm(s, outputs, target) -> bool | None:
    if schedule_gemv(s, outputs, target) is None:  # (it declines before changing anything)
        return None
    return schedule_matmul(s, outputs, target)


@schedules("matmul", "conv2d_gemm", "conv2d_gemm_partials", "conv2d_nhwc_gemm", "conv2d_nhwc_gemm_partials")
def schedule_matmul(s, outputs, target) -> bool | None:
    (out,) = outputs
    found = [out] if out.op.reduce_axis else reductions_of(s, out)
    if len(found) != 1:
        return False
    (C,) = found
    sms = target.gpu.multiprocessors
    if C is not out and _tensor_core_operands(C) and target.gpu.tensor_cores(C.op.input_tensors[0].dtype):
        return _tensor_cores(s, C, out, target.gpu)
    if out.op.name == "matmul" and C is out and _float32(s, out) is None:
        return None
    return cuda_cores(s, C, out, sms=sms)


def _tensor_core_operands(C) -> bool:
    """C sums products of half operands, or of float32 ones marked TF32 (a "tf32" model's)."""
    dtypes = {t.dtype for t in C.op.input_tensors}
    return C.dtype == "float32" and (dtypes <= set(wmma.DTYPES) or (dtypes == {"float32"} and C.op.attrs.get("tf32")))


def _tensor_cores(s, C, out, gpu: GPU) -> bool | None:
    """out computed from C, the float32 product of half operands (see the module doc), on the
    Tensor Core intrinsic `gpu` has for them (GPU.tensor_cores: mma.sync from sm_80, else wmma;
    False, declined, where it has none: bfloat16 before sm_80); a stage of its operands that is a
    convolution's columns or split-K's parts of x is computed as its tiles are copied."""
    cores = gpu.tensor_cores(C.op.input_tensors[0].dtype)
    if not cores:
        return False
    columns = {t.op.name for t in C.op.input_tensors if getattr(t.op, "tag", "") in (COLUMNS, PARTS)}
    shape = _product_shape(s, C, out, conv=True, keep=columns)
    if shape is None:
        return False
    *batch, M, N, K = _typical(shape)  # (a symbolic size tiled as TYPICAL)
    tiles = tensor_core_tiles(prod(batch), M, N, K, C.op.input_tensors[0].dtype, gpu.multiprocessors)
    tensorcore.tensorcore_product(s, C, out, **tiles, intrinsic=None if "mma" in cores else "wmma")
    return None


def cuda_cores(s, C, out, tiles: dict | None = None, sms: int = SMS) -> bool | None:
    """out computed from C, a float32 product of float32 operands (see the module doc), in
    `tiles` (cuda_core_product's BM, BN, BK, TM, TN; default: `cuda_core_tiles` for a GPU of `sms`
    multiprocessors); False where it declines."""
    if C.dtype != "float32" or any(t.dtype != "float32" for t in C.op.input_tensors):
        return False
    columns = {t.op.name for t in C.op.input_tensors if getattr(t.op, "tag", "") == COLUMNS}
    shape = _product_shape(s, C, out, conv=True, keep=columns)
    if shape is None or prod(_typical(shape)) < SMALL:
        return False
    *batch, M, N, _ = _typical(shape)
    gpu.cuda_core_product(s, C, out, **(tiles or cuda_core_tiles(prod(batch), M, N, sms)))
    return None


def _product_shape(s, C, out, conv: bool = False, keep=()) -> list[int | None] | None:
    """(*batch, M, N, K) of C's product (None for a symbolic size), whose output `out` is of C's
    shape (with `conv`, or C's columns split in two: a convolution's output positions; or its
    rows, a channels-last one's), after
    inlining the kernel's intermediates but those named in `keep` (b transposed for the CPU's
    vectors is then read in place); None where C is no product of two operands."""
    shape, out_shape = [_dim(d) for d in C.shape], [_dim(d) for d in out.shape]
    if conv and gpu.channels_last(out.shape, C.shape):
        out_shape = [*out_shape[:-3], shape[-2], out_shape[-1]]  # (a channels-last convolution's positions)
    elif (conv and len(out_shape) == len(shape) + 1 and all(isinstance(d, int) for d in (*out_shape[-2:], shape[-1]))
          and out_shape[-2] * out_shape[-1] == shape[-1]):
        out_shape = [*out_shape[:-2], shape[-1]]  # (a convolution's output positions)
    if out_shape != shape or len(shape) < 2 or len(C.op.reduce_axis) != 1:
        return None
    inline_intermediates(s.sch, where=lambda block: block.name not in keep)
    try:
        gpu.product_operands(s, C)
    except ScheduleError:
        return None
    return [as_int(d) for d in C.shape] + [as_int(C.op.reduce_axis[0].dom.extent)]


def _dim(d) -> int | str:
    """A dimension as its value, or a symbolic one as its expression's text (comparable)."""
    n = as_int(d)
    return str(d) if n is None else n


def _typical(shape: list[int | None]) -> list[int]:
    """The shape with TYPICAL for each symbolic size (what the tiles are chosen for)."""
    return [TYPICAL if n is None else n for n in shape]


def block_tiles(batch: int, M: int, N: int, sms: int = SMS) -> tuple[int, int]:
    """Block tiles BM x BN (16, 32 or 64: the least that covers a small M or N), halved from 64
    to 32 while the grid has fewer blocks than the GPU has multiprocessors (`sms`)."""
    BM, BN = (16 if n <= 16 else 32 if n <= 32 else 64 for n in (M, N))
    while batch * -(-M // BM) * -(-N // BN) < sms and max(BM, BN) > 32:
        if BN >= BM:
            BN //= 2
        else:
            BM //= 2
    return BM, BN


def cuda_core_tiles(batch: int, M: int, N: int, sms: int = SMS) -> dict:
    """`block_tiles`, with 16 x 16 threads a block, each a (BM/16) x (BN/16) register tile."""
    BM, BN = block_tiles(batch, M, N, sms)
    return {"BM": BM, "BN": BN, "BK": 16, "TM": BM // 16, "TN": BN // 16}


def tensor_core_tiles(batch: int, M: int, N: int, K: int, dtype: str = "float16", sms: int = SMS) -> dict:
    """The measured choice for this product where product_choices.TILES has one, else:
    `block_tiles`; 32-wide steps of k (16 for a short K, and for float32 tiles, twice the bytes);
    warps of at most 32 x 32, their columns halved down to 16 until the block has WARPS of them
    (a batch-1 product's few blocks each need warps to hide their loads; warps of 16 rows in 3
    stages spilled 4 bytes on sm_90, those of 32 none); STAGES stages where the K loop has at
    least two steps a stage and they fit the static shared memory beside the block's float32
    tile, else 2."""
    if (batch, M, N, K) in product_choices.TILES:
        return dict(product_choices.TILES[batch, M, N, K])
    BM, BN = block_tiles(batch, M, N, sms)
    WM, WN = min(BM, 32), min(BN, 32)
    while (BM // WM) * (BN // WN) < WARPS and WN > 16:
        WN //= 2
    BK = 16 if K <= 16 or dtype == "float32" else 32
    size = 4 if dtype == "float32" else 2
    shared = STAGES * (BM * (BK + 16 // size) + BK * (BN + 16 // size)) * size + BM * BN * 4  # (wmma's rows padded)
    stages = STAGES if -(-K // BK) >= 2 * STAGES and shared <= STATIC_SHARED else 2
    return {"BM": BM, "BN": BN, "BK": BK, "WM": WM, "WN": WN, "stages": stages}


def _float32(s, C) -> bool | None:
    inputs = C.op.input_tensors
    if (C.ndim != 2 or C.dtype != "float32" or len(C.op.reduce_axis) != 1 or len(inputs) != 2
            or not all(isinstance(t.op, PlaceholderOp) and t.ndim == 2 for t in inputs)):
        return False
    (M, N), K = (as_int(d) for d in C.shape), as_int(C.op.reduce_axis[0].dom.extent)
    if None in (M, N, K) or M % TILES["BM"] or N % TILES["BN"] or K % TILES["BK"]:
        return False
    A, B = inputs
    gpu.gemm(s, A, B, C, **TILES, vector=4, stages=2)
    return None
