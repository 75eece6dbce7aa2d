"""The accelerator backend (target kind "accel", `ember.build(s, args, target=vdla)`): single
kernels whose tensorized GEMMs and cache stages run on a simulated VTA-style device (ember.accel)
and whose other loops run on the host as C. Models are not compiled for it yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..accel.kernel import AccelKernel, build_accel
from ..accel.lower import to_instructions
from ..errors import ArgumentTypeError, ConfigError
from ..tir.lower import PASSES
from ..tir.stmt import PrimFunc
from . import register
from .base import Backend

# copies stay scalar loops for the DMA to take whole; the device calls come last
SKIPPED = ("vectorize", "simplify_vectors", "unroll", "simplify_unrolled", "prefetch")


class AccelBackend(Backend):
    name = "accel"
    model = None
    graph_passes = ()
    loop_passes = (*((n, p) for n, p in PASSES if n not in SKIPPED), ("accel_instructions", to_instructions))
    tuner = None

    def check_options(self, *, checked: bool | None, precision: str = "fp32",
                      weights: str | None = None) -> None:
        raise ConfigError("an accelerator target builds single kernels for now (ember.build of a tensorized "
                          "schedule); models compile for 'c' or 'python'")

    def build_kernels(self, funcs: Sequence[PrimFunc], target, **options) -> dict[str, AccelKernel]:
        if options:
            raise ArgumentTypeError(f"an accelerator target takes no options, got {sorted(options)}")
        return build_accel(funcs, target.accel, cc=target.cc, cflags=target.cflags, align=target.align)


register(AccelBackend())
