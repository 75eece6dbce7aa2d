"""ember.triton's launches for target "cuda" without a GPU: each compiled as on one (the GPU's
Emitter, CUDA C, NVRTC to a cubin of the target's architecture) and its loop IR (programs bound
to blocks, block statements to threads, with its scopes and barriers) run by the interpreter with
GPU semantics (ember.cuda.simt: blocks and threads in a shuffled order, a race or a barrier not
every thread reaches is an error). The `on_cuda` fixture (conftest.py) puts `interpret_cuda` in
place of the compiler's launch for the tests of test_tile_cuda_*.py."""

import importlib
import importlib.util

import numpy as np
import pytest

from ember.codegen.python import load_python
from ember.cuda.codegen import SYNC, launch_dims
from ember.cuda.kernel import prepare
from ember.cuda.simt import SimtRenderer, run_grid
from ember.target import as_target
from ember.tir.expr import as_int
from ember.tir.functor import stmt_children
from ember.tir.lower import lower
from ember.tir.stmt import Evaluate, For, IfThenElse
from ember.triton.args import TensorArg

L = importlib.import_module("ember.triton.compiler.launch")
CUDA = as_target("cuda")
HAS_NVRTC = importlib.util.find_spec("cuda.bindings") is not None
needs_nvrtc = pytest.mark.skipif(not HAS_NVRTC, reason="NVRTC (cuda-bindings) is not installed")


def interpret_cuda(jit_fn, grid, bound, options, target):
    """A launch compiled for the GPU (NVRTC included) whose loop IR runs on the interpreter with
    GPU semantics, the grid's blocks as the launch gives them."""
    launch, sources, target = interpret_cuda.launch, interpret_cuda.sources, interpret_cuda.target
    compiled, runtime = L.prepare(jit_fn, bound, options, target)
    assert b"ELF" in compiled.cfunc.binary[:4] and compiled.cfunc.arch == target.gpu.arch  # (sm_90 without a GPU)
    sources.append(compiled.source)
    debug = L.debug_mode(jit_fn, options)
    spec, _ = L.specialize(jit_fn, bound, debug, target, options.get("num_warps") or 4,
                           options.get("num_stages") or 3)
    func, _, _ = L.build_func(jit_fn, spec, debug, target)
    lowered = prepare(lower(func, skip=("hoist_init", "compact_buffers"), passes=target.backend.loop_passes))
    check_barriers(lowered)
    dims = {**launch_dims(lowered), "blockIdx.x": grid[0] * grid[1] * grid[2]}
    thread = load_python(SimtRenderer(lowered, dims).render(), lowered)
    arrays, spans = [], []
    for _, v in runtime:
        if isinstance(v, TensorArg):
            assert v.span[0] == 0
            arrays.append(v.flat())
            spans += v.span
    scalar_dtypes = iter(compiled.scalar_dtypes)
    arrays += [np.array([v], dtype=next(scalar_dtypes)) for _, v in runtime if not isinstance(v, TensorArg)]
    meta = np.array(spans or [0], dtype=np.int64)
    status = np.zeros(1, dtype=np.int64)
    run_grid(thread, lowered.name, [*arrays, meta, status, *grid], dims, seed=len(launch))
    assert status[0] == 0
    launch.append(grid)
    return compiled


def check_barriers(func) -> None:
    """Every barrier is reached by every thread of the block: none in a thread loop shorter than
    the block's dimension, nor under a branch inside a thread loop."""
    dims = launch_dims(func)

    def walk(s, threads: bool, divergent: bool):
        if isinstance(s, Evaluate) and getattr(s.value, "name", None) == SYNC:
            assert not divergent, f"a barrier not every thread reaches in {func.name}"
            found.append(s)
        if isinstance(s, For) and (s.thread_tag or "").startswith("threadIdx"):
            threads, divergent = True, divergent or as_int(s.extent) < dims[s.thread_tag]
        if isinstance(s, IfThenElse) and threads:
            divergent = True
        for c in stmt_children(s):
            walk(c, threads, divergent)

    found: list = []
    walk(func.body, False, False)


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 as the Tensor Cores take it (cvt.rna: to nearest, ties away from 0)."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = ((bits & 0x7FFFFFFF) + 0x1000) & 0xFFFFE000
    return (rounded | (bits & 0x80000000)).view(np.float32)
