"""The CUDA backend (target "cuda"): single GPU kernels (ember.build of a schedule bound to blocks
and threads) and tile kernels (ember.triton: the GPU's Emitter spreads a program's blocks over a
CUDA block's threads), CUDA C on the C-style base, built by NVRTC and launched through the driver
API (ember.cuda). Models are not compiled for it yet.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cuda import CUDAKernel, build_cuda
from ..cuda.kernel import device_arch
from ..cuda.tile import TileLauncher, render_tile
from ..errors import ArgumentTypeError, ConfigError
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

    @property
    def tile_emitter(self):
        """The GPU's Emitter (ember.triton.compiler.cuda), imported on a tile launch."""
        from ..triton.compiler.cuda import CUDAEmitter

        return CUDAEmitter

    def check_options(self, *, checked: bool | None) -> None:
        raise ConfigError("target 'cuda' builds single kernels for now (ember.build of a GPU schedule, ember.triton "
                          "kernels); models compile for 'c' or 'python'")

    def build_kernels(self, funcs: Sequence[PrimFunc], target, **options) -> dict[str, CUDAKernel]:
        """Options: arch, ptx, debug (ember.cuda.build_cuda)."""
        return {f.name: build_cuda(f, **options) for f in funcs}

    def render_kernels(self, funcs: Sequence[PrimFunc], target, *, checked: bool = False) -> str:
        return "\n".join(render_tile(f) for f in funcs)

    def open_launcher(self, source: str, name: str, target):
        """Compiled by NVRTC for the GPU's architecture (sm_90 without one); loaded at the first launch."""
        launcher = TileLauncher(source, name, device_arch())
        return launcher, launcher

    def call_tile(self, compiled, tensors: list, scalars: list, grid: tuple[int, int, int], options: dict) -> int:
        """Every tensor on one GPU, checked before the launch; on the `stream=` option, else torch's
        current stream of that GPU when a tensor is torch's, else the default stream."""
        from ..triton.args import DeviceTensorArg

        ordinal = None
        for name, t in tensors:
            if not isinstance(t, DeviceTensorArg):
                raise ArgumentTypeError(f"kernel {compiled.name}: argument '{name}' is in host memory; a launch for "
                                        f"target 'cuda' takes GPU tensors (torch CUDA tensors, CuPy, "
                                        f"__cuda_array_interface__): move it with .cuda()")
            if ordinal is None:
                ordinal = t.device
            elif t.device != ordinal:
                raise ArgumentTypeError(f"kernel {compiled.name}: argument '{name}' is on cuda:{t.device}, the "
                                        f"tensors before it on cuda:{ordinal}; a kernel runs on one GPU")
        ordinal = ordinal or 0
        stream = options.get("stream")
        if stream is None:
            torch = sys.modules.get("torch")
            uses_torch = torch is not None and any(t.torch for _, t in tensors)
            stream = int(torch.cuda.current_stream(ordinal).cuda_stream) if uses_torch else 0
        spans = [x for _, t in tensors for x in t.span]
        return compiled.cfunc([t.data_ptr for _, t in tensors], list(zip(scalars, compiled.scalar_dtypes)), spans,
                              len(compiled.sites), grid, ordinal, int(stream))


register(CUDABackend())
