"""The GEMM on an accelerator, scheduled by its tile sizes: C's (ty, tx) output tile accumulates
in the accumulator memory while k advances tk at a time, each step loading A's and B's tiles
into the input and weight memories and running (ty/m)(tx/n)(tk/k) GEMM instructions on them (the
core intrinsic's m x n x k). Larger tiles reuse each loaded tile across more GEMMs and so move
fewer DMA bytes per MAC, up to what the memories hold (ember.accel.tune searches them).

The operands are laid out as the core reads them: for vdla A is (K, M) and B (K, N), k-major (the
teaching material's C[y, x] = sum_k A[k, y] * B[k, x]); for vta A is (M, K) and B (N, K), VTA's
input rows and weight rows (C[i, j] = sum_k A[i, k] * B[j, k], int8 products summed in int32).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import te as t
from ..errors import ScheduleError
from ..tir.expr import as_int
from .spec import Accelerator

# how the device tiles are held: "single"; "inputs": those of each k step twice, so that the next
# step's loads overlap this step's GEMMs; "tiles": those of each output tile twice (the
# accumulator's, and the inputs' too when one k step covers the reduction), so that the next
# tile's loads and reset overlap this tile's GEMMs and store (ember.accel.double_buffer)
BUFFERING = ("single", "inputs", "tiles")


@dataclass(frozen=True)
class Tiles:
    ty: int
    tx: int
    tk: int


def gemm_tensors(accel: Accelerator, m: int, n: int, k: int, a=None):
    """A, B and C of an m x n x k GEMM in the accelerator's layout (see the module doc); `a`: a
    tensor of A's shape to take as A (a computed one: an im2col of a convolution's input)."""
    core = accel.core
    a_shape = (k, m) if core.inp_layout == "ki" else (m, k)
    b_shape = (k, n) if core.wgt_layout == "kj" else (n, k)
    A = a if a is not None else t.placeholder(a_shape, core.inp_dtype, name="A")
    B = t.placeholder(b_shape, core.wgt_dtype, name="B")
    r = t.reduce_axis((0, k), name="k")
    acc = core.acc_dtype

    def at_a(y):
        return A[r, y] if core.inp_layout == "ki" else A[y, r]

    def at_b(x):
        return B[r, x] if core.wgt_layout == "kj" else B[x, r]

    def widen(v):
        return v if v.dtype == acc else v.astype(acc)

    C = t.compute((m, n), lambda y, x: t.sum(widen(at_a(y)) * widen(at_b(x)), axis=r), name="C")
    return A, B, C


def intrinsic_shape(accel: Accelerator) -> tuple[int, int, int]:
    """(m, n, k) of the block one call of the accelerator's GEMM intrinsic computes."""
    intrin = accel.intrinsics[0]
    im, in_ = (as_int(d) for d in intrin.desc.params[2].shape)
    return im, in_, as_int(intrin.desc.params[0].shape[accel.core.inp_layout.index("k")])


def gemm(accel: Accelerator, m: int, n: int, k: int, tiles: Tiles | None = None, buffering: str = "single"):
    """(schedule, [A, B, C]) of the GEMM tiled by `tiles` (default: one core tile), tensorized
    onto the accelerator's GEMM intrinsic, its tiles buffered as `buffering` says (BUFFERING)."""
    A, B, C = gemm_tensors(accel, m, n, k)
    return schedule(accel, A, B, C, tiles=tiles, buffering=buffering), [A, B, C]


def schedule(accel: Accelerator, A, B, C, out=None, acc_inputs=(), *, tiles: Tiles | None = None,
             buffering: str = "single"):
    """The schedule of GEMM C = A B (gemm_tensors') tiled and tensorized, and when `out` is given,
    of the epilogue `out`, an elementwise function of C and of `acc_inputs` (a bias) that the ALU
    computes on each accumulator tile: C is inlined into it, and the inputs loaded into the
    accumulator next to the tile. `buffering`: see BUFFERING."""
    if buffering not in BUFFERING:
        raise ScheduleError(f"buffering is one of {BUFFERING}, got {buffering!r}")
    intrin = accel.intrinsics[0]
    im, in_, ik = intrinsic_shape(accel)
    tiles = tiles or Tiles(im, in_, ik)
    m, n = (as_int(d) for d in C.shape)
    k = as_int(C.op.reduce_axis[0].dom.extent)
    for size, whole, step, name in ((tiles.ty, m, im, "ty"), (tiles.tx, n, in_, "tx"), (tiles.tk, k, ik, "tk")):
        if size % step or whole % size:
            raise ScheduleError(f"tile {name}={size} must be a multiple of the intrinsic's {step} and divide {whole}")
    out = C if out is None else out
    s = t.create_schedule(out.op)
    CL = s.cache_write(C, accel.acc_buffer)
    at_tile = [CL]  # computed at the output tile, consumers first
    if out is not C:
        s[C].compute_inline()
        OL = s.cache_write(out, accel.acc_buffer)
        at_tile = [OL, *(s.cache_read(b, accel.acc_buffer, [OL]) for b in acc_inputs), CL]
    AL = s.cache_read(A, accel.inp_buffer, [CL])
    BL = s.cache_read(B, accel.wgt_buffer, [CL])
    y, x = s[out].op.axis
    _, xo, _, _ = s[out].tile(y, x, tiles.ty, tiles.tx)
    for stage in at_tile:
        s[stage].compute_at(s[out], xo)
    yc, xc = s[CL].op.axis
    (kc,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kc, factor=tiles.tk)
    y1, y2 = s[CL].split(yc, factor=im)
    x1, x2 = s[CL].split(xc, factor=in_)
    k1, k2 = s[CL].split(ki, factor=ik)
    s[CL].reorder(ko, k1, y1, x1, y2, x2, k2)
    s[AL].compute_at(s[CL], ko)
    s[BL].compute_at(s[CL], ko)
    if buffering == "inputs":
        s[CL].pragma(ko, "double_buffer")
    elif buffering == "tiles":
        s[out].pragma(xo, "double_buffer")
    s[CL].tensorize(y2, intrin)
    return s
