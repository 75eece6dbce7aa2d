"""The accelerators ember ships, each with the tensor intrinsic of its GEMM core.

- `vdla`: the teaching material's device, an 8x8x8 fp32 GEMM core whose tiles are stored
  k-major (`gemm8x8`: z[i, j] = sum_k w[k, i] * x[k, j], declared as the material declares it).
- `vta`: VTA's default configuration, a 16x16 int8 core (one row of 16 inputs times a 16x16
  weight block per cycle, BATCH=1, BLOCK_IN=BLOCK_OUT=16) with int32 accumulators; `gemm16`
  takes a 16x16x16 block (16 core steps, VTA's micro-op loop) with inputs (i, k) and weights
  (j, k) row-major, as VTA lays them out.
"""

from __future__ import annotations

from .. import te as t
from .spec import Accelerator, Costs, GemmCore, memories


def _gemm8x8():
    w, xx = t.placeholder((8, 8), name="w"), t.placeholder((8, 8), name="xx")
    kk = t.reduce_axis((0, 8), name="kk")
    z = t.compute((8, 8), lambda i, j: t.sum(w[kk, i] * xx[kk, j], axis=kk), name="gemm8x8")

    def gemm_intrinsic_lower(inputs, outputs):
        ww_ptr = inputs[0].access_ptr("r")
        xx_ptr = inputs[1].access_ptr("r")
        zz_ptr = outputs[0].access_ptr("w")
        compute = t.hardware_intrinsic("gemm8x8", ww_ptr, xx_ptr, zz_ptr)
        reset = t.hardware_intrinsic("fill_zero", zz_ptr)
        update = t.hardware_intrinsic("fuse_gemm8x8_add", ww_ptr, xx_ptr, zz_ptr)
        return compute, reset, update

    return t.decl_tensor_intrinsic(z.op, gemm_intrinsic_lower, override=True)


def _gemm16():
    inp, wgt = t.placeholder((16, 16), "int8", name="inp"), t.placeholder((16, 16), "int8", name="wgt")
    k = t.reduce_axis((0, 16), name="k")
    z = t.compute((16, 16), lambda i, j: t.sum(inp[i, k].astype("int32") * wgt[j, k].astype("int32"), axis=k),
                  name="gemm16")

    def lower(ins, outs):
        a, b, c = ins[0].access_ptr("r"), ins[1].access_ptr("r"), outs[0].access_ptr("w")
        return (t.hardware_intrinsic("vta_gemm", a, b, c), t.hardware_intrinsic("vta_reset", c),
                t.hardware_intrinsic("vta_gemm_acc", a, b, c))

    return t.decl_tensor_intrinsic(z.op, lower, override=True)


_VDLA_CORE = GemmCore(8, 8, 8, "float32", "float32", "float32", inp_layout="ki", wgt_layout="kj")
vdla = Accelerator("vdla", _VDLA_CORE, **memories("vdla", 16 << 10, 16 << 10, 16 << 10, _VDLA_CORE),
                   intrinsics=(_gemm8x8(),))

_VTA_CORE = GemmCore(1, 16, 16, "int8", "int8", "int32")
vta = Accelerator("vta", _VTA_CORE, **memories("vta", 32 << 10, 256 << 10, 128 << 10, _VTA_CORE),
                  costs=Costs(dma_bytes_per_cycle=8, dma_latency=32, gemm_latency=4, alu_lanes=16),
                  intrinsics=(_gemm16(),))
