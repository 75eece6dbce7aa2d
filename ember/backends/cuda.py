"""The CUDA backend (target "cuda"): single GPU kernels for now (ember.build of a schedule bound to
blocks and threads), CUDA C on the C-style base, built by NVRTC and launched through the driver
API (ember.cuda). Models and tile kernels are not compiled for it yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cuda import CUDAKernel, build_cuda
from ..errors import ConfigError
from ..tir.lower import PASSES
from ..tir.stmt import PrimFunc
from . import register
from .base import Backend

SKIPPED = ("vectorize", "simplify_vectors")  # CUDA C renders no vector expressions yet (it unrolls the loops)


class CUDABackend(Backend):
    name = "cuda"
    model = None
    graph_passes = ()
    loop_passes = tuple((name, p) for name, p in PASSES if name not in SKIPPED)
    tuner = None

    def check_options(self, *, checked: bool | None) -> None:
        raise ConfigError("target 'cuda' builds single kernels for now (ember.build of a GPU schedule); "
                          "models compile for 'c' or 'python'")

    def build_kernels(self, funcs: Sequence[PrimFunc], target, **options) -> dict[str, CUDAKernel]:
        """Options: arch, ptx, debug (ember.cuda.build_cuda)."""
        return {f.name: build_cuda(f, **options) for f in funcs}


register(CUDABackend())
