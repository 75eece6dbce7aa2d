"""Tensor intrinsics of real hardware, declared through `te.decl_tensor_intrin` (one module per
unit: importing it registers its intrinsics for `sch.tensorize`), and the check of whether this
CPU has a unit (`cpu_has`)."""

from .cpu import cpu_has

__all__ = ["cpu_has"]
