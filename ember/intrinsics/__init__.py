"""Tensor intrinsics of real hardware, declared through `te.decl_tensor_intrin` (one module per
unit: importing it registers its intrinsics for `sch.tensorize`), and the check of whether this
CPU has a unit (`cpu_has`). The tile units (avx512, amx, and conv_bf16's convolution tile) and
VNNI's dot product (qgemm's, which a tuning task's own schedule tensorizes onto) are imported with
the package, so that a kernel that calls one of their intrinsics finds it by name in
any process (tiles.UNITS, conv_bf16's resolver)."""

from . import amx, avx512, conv_bf16, vnni
from .cpu import cpu_has

__all__ = ["amx", "avx512", "conv_bf16", "cpu_has", "vnni"]
