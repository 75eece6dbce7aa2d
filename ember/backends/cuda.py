"""The CUDA backend (target "cuda"): GPU kernels in CUDA C on the C-style base, built by NVRTC and
launched through the driver API (ember.cuda), for single kernels (ember.build of a schedule bound
to blocks and threads), tile kernels (ember.triton: the GPU's Emitter spreads a program's blocks
over a CUDA block's threads) and whole models.

A model takes none of the CPU's target graph passes (no blocked layouts, no weight packing: the
GPU family's schedules read the plain layouts) and no fold_attention: its attention is unfolded
into matmul, softmax, matmul (ember.passes.unfold_attention), which the family schedules; a fused
attention kernel for the GPU is still to come. Every kernel
is scheduled by the GPU family (ember.schedules.gpu) and built by NVRTC, for the target GPU's
architecture (`Target.gpu.arch`: the device's, sm_90 without one), and checked against its
limits; a kernel whose loops the family bound to no block or thread (an extern call, a scalar
output) is a CompileError naming its operators, at compile time.
The model runs its call program on the GPU (ember.cuda.model.CUDAModel), or, for
`Target("cuda", simulate=True)`, on the loop-IR interpreter with GPU semantics
(ember.cuda.simt: the same lowered kernels, blocks and threads in a shuffled order, races
checked), which needs no GPU. Static or symbolic shapes (a kernel's grid computed per launch
from its sizes, ember.cuda.grid), no control flow; saved by `cm.save` in a format of its own
(ember.cuda.artifact), which `load_model` reads back. Its precisions
(ember.passes.pipeline.GPU_PRECISIONS): fp32, tf32 (products of tf32-rounded operands), fp16 and
bf16 (every weight and activation in half precision, sums in fp32).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from ..cuda import CUDAKernel, build_cuda
from ..cuda import driver as cuda_driver
from ..cuda.artifact import read_cuda
from ..cuda.driver import device
from ..cuda.limits import device_gpu
from ..cuda.model import CUDAModel, DeviceEntry, SimulatedModel
from ..cuda.simt import build_simt, is_gpu_kernel
from ..cuda.streams import torch_stream
from ..cuda.tile import TileLauncher, render_tile
from ..errors import ArgumentTypeError, CompileError, ConfigError, DeviceError, LowerError
from ..passes.pipeline import GPU_PRECISIONS
from ..passes.plan_memory import MemoryPlan
from ..program import Branch, Loop, Program
from ..runtime.interpreted import InterpretedEntry
from ..runtime.spec import ModelSpec
from ..schedules.gpu.split_k import splits_for
from ..target import GPU, REGISTERS_PER_THREAD
from ..tir.lower import PASSES
from ..tir.stmt import PrimFunc
from ..tune.gpu_features import gpu_features
from ..tune.gpu_measure import GPURunner
from ..tune.gpu_space import gpu_design_space
from . import register
from .base import Backend, Rendered, TunerRules

REGISTER_BYTES = REGISTERS_PER_THREAD * 4  # a thread's registers: local scratch past them spills to (slow) local memory
SKIPPED = ("vectorize", "simplify_vectors")  # CUDA C renders no vector expressions yet (it unrolls the loops)


def _model(spec, built, weights, plan, **options):
    """The compiled model of what `build` gave: on the GPU, or simulated on the interpreter."""
    cls = SimulatedModel if isinstance(built, InterpretedEntry) else CUDAModel
    return cls(spec, built, weights, plan, **options)


def _kernel_named(spec: ModelSpec, f: PrimFunc) -> str:
    """A kernel as an error names it: its operators and the graph's nodes."""
    info = next(k for k in spec.kernels if k.name == f.name)
    return f"kernel {f.name} ({' + '.join(info.ops)}; nodes {', '.join(info.nodes)})"


class CUDABackend(Backend):
    name = "cuda"
    model = staticmethod(_model)
    graph_passes = ("unfold_attention", "split_k", "split_reduce")  # the attention operator is a CPU extern call:
    # matmul, softmax, matmul here; split_k asks k_splits how many parts of K a product's grid needs; split_reduce
    # reads the multiprocessors
    def k_splits(self, m: int, n: int, k: int, target) -> int:
        return splits_for(1, m, n, k, target.gpu.multiprocessors)

    # fold_attention would fold them back (and fold_repeat_kv make gqa of a repeat, which
    # unfold_attention would repeat again); the CPU's target passes (given no target, they would
    # block and pack for this machine's vectors) make layouts the GPU schedules do not read
    skipped_passes = ("fold_attention", "fold_repeat_kv", "pad_gemv", "layout", "pack_weights")
    precisions = GPU_PRECISIONS  # fp16/bf16: every activation and weight in half precision, sums in fp32
    loop_passes = tuple((name, p) for name, p in PASSES if name not in SKIPPED)
    tuner = TunerRules(gpu_design_space, gpu_features, GPURunner, REGISTER_BYTES)

    def gpu(self, target) -> GPU:
        """The device's facts (its driver attributes), GPU()'s (DEFAULT_ARCH's, what a build without
        a device assumes) where there is none or the GPU is simulated."""
        if target.simulate:
            return GPU()
        try:
            dev = cuda_driver.device()  # (looked up at the call: a stand-in driver in tests replaces it)
        except DeviceError:
            return GPU()
        return device_gpu(dev)

    def machine(self, target) -> str:
        """ "cuda | <GPU> | <arch>"; a simulated GPU's times are the interpreter's: "cuda | simulated"."""
        if target.simulate:
            return f"cuda | simulated | {target.gpu.arch}"
        try:
            dev = device()
        except DeviceError:
            return f"cuda | no GPU | {target.gpu.arch}"
        return f"cuda | {dev.name} | {dev.arch}"

    @property
    def tile_emitter(self):
        """The GPU's Emitter (ember.triton.compiler.cuda), imported on a tile launch."""
        from ..triton.compiler.cuda import CUDAEmitter

        return CUDAEmitter

    def check_options(self, *, checked: bool | None, precision: str = "fp32",
                      weights: str | None = None) -> None:
        if checked:
            raise ConfigError("checked=True needs target 'c': CUDA kernels do not check divisions")
        if weights is not None:
            raise ConfigError(f"weights={weights!r} does not compile for target 'cuda' yet (its kernels are the "
                              f"CPU's); models on the GPU keep their float weights")

    def render(self, program: Program, spec: ModelSpec, plan, weights: Mapping[str, np.ndarray], *,
               checked: bool, target) -> Rendered:
        """Every kernel built by NVRTC (cached on disk), and the entry that runs the program."""
        if any(isinstance(st, Branch | Loop) for st in program.body):
            raise CompileError(f"model '{spec.name}': control flow (if, loop) does not compile for target 'cuda' yet; "
                               f"compile it for 'c'")
        for f in program.kernels:
            if not is_gpu_kernel(f):
                raise CompileError(f"model '{spec.name}': {_kernel_named(spec, f)} has no GPU schedule: its loops are "
                                   f"bound to no block or thread")
        kernels = {}
        for f in program.kernels:
            try:
                kernels[f.name] = build_cuda(f, arch=target.gpu.arch, gpu=target.gpu)
            except LowerError as e:  # (a kernel the GPU family schedules in part only)
                raise CompileError(f"model '{spec.name}': {_kernel_named(spec, f)} does not lower for the GPU: "
                                   f"{e}") from e
        entry = InterpretedEntry(program, load=build_simt) if target.simulate else DeviceEntry(program, kernels)
        return Rendered("\n\n".join(k.source for k in kernels.values()), entry)

    def load_model(self, path) -> CUDAModel:
        """A CUDA model saved by `cm.save(path)` (ember.cuda.artifact): every file checked, nothing
        compiled, no GPU touched before the first call."""
        saved = read_cuda(path)
        entry = DeviceEntry(saved.program, saved.kernels)
        plan = MemoryPlan.from_json(saved.workspace, saved.align)
        return CUDAModel(saved.spec, entry, saved.weights, plan, source=entry.source, own_weights=True)

    def build(self, rendered: Rendered, target) -> tuple[object, bool]:
        return rendered.entry, False  # built as rendered (NVRTC's cache holds the cubins)

    def build_kernels(self, funcs: Sequence[PrimFunc], target, **options) -> dict[str, CUDAKernel]:
        """Options: arch (default: the target GPU's), ptx, debug (ember.cuda.build_cuda); checked against the
        target's block limits."""
        return {f.name: build_cuda(f, gpu=target.gpu, **{"arch": target.gpu.arch, **options}) for f in funcs}

    def render_kernels(self, funcs: Sequence[PrimFunc], target, *, checked: bool = False) -> str:
        """Each kernel's unit, its shared memory checked against what a block of the target's GPU may opt in to."""
        return "\n".join(render_tile(f, target.gpu) for f in funcs)

    def open_launcher(self, source: str, name: str, target):
        """Compiled by NVRTC for the target GPU's architecture (the device's, sm_90 without one); loaded at
        the first launch."""
        launcher = TileLauncher(source, name, target.gpu.arch)
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
            stream = torch_stream(ordinal) if uses_torch else 0
        spans = [x for _, t in tensors for x in t.span]
        return compiled.cfunc([t.data_ptr for _, t in tensors], list(zip(scalars, compiled.scalar_dtypes)), spans,
                              len(compiled.sites), grid, ordinal, int(stream))

    def direct_tile(self, compiled, runtime: list):
        """The GPU launcher's `direct` on the remembered launch's GPU (the signature fixes each
        tensor's device) and stream rule, for a kernel without checks (one with checks sends the
        tensors' spans and waits for its status: call_tile)."""
        from ..triton.args import DeviceTensorArg, TensorArg

        tensors = [t for _, t in runtime if isinstance(t, TensorArg | DeviceTensorArg)]
        if compiled.sites or not all(isinstance(t, DeviceTensorArg) for t in tensors):
            return None
        launcher = compiled.cfunc.typed(len(tensors), compiled.scalar_dtypes)
        return functools.partial(launcher.direct, ordinal=tensors[0].device if tensors else 0,
                                 torch=any(t.torch for t in tensors))


register(CUDABackend())
