"""Features of a GPU candidate for the cost model: the per-store features every target has
(ember.tune.features: arithmetic, loops, memory walks), then what decides a kernel's speed on a
GPU and that those do not see: how the work is spread (blocks, threads a block, whole warps, work
a thread), what a block stages in shared memory (bytes, times the pipeline's buffers) and keeps in
registers, the vector width of its accesses, its unrolled loops and pipeline depth.

Counts that grow with the problem are log2(1 + x), as in ember.tune.features.
"""

from __future__ import annotations

import numpy as np

from ..target import Target
from ..tir import dtype as dt
from ..tir.expr import as_int
from ..tir.functor import collect
from ..tir.stmt import BLOCK_TAGS, BlockRealize, For, PrimFunc
from .features import FEATURE_LENGTH, extract_features
from .task import flop_count

GPU_FEATURES = ("blocks", "threads", "warps", "partial_warp", "flops_per_thread", "shared_bytes",
                "local_bytes", "vector_lanes", "unrolled_loops", "unroll_limit", "pipeline_stages")
GPU_FEATURE_LENGTH = FEATURE_LENGTH + len(GPU_FEATURES)


def gpu_features(func: PrimFunc, target: Target | None = None) -> np.ndarray:
    """The feature vector (float32, GPU_FEATURE_LENGTH) of a scheduled GPU function (`sch.mod`)."""
    func = getattr(func, "mod", func)
    loops = collect(func.body, lambda s: isinstance(s, For))
    extents = {}  # a hardware index -> the largest extent bound to it (the launch's)
    for f in loops:
        if f.thread_tag is not None:
            extents[f.thread_tag] = max(extents.get(f.thread_tag, 1), as_int(f.extent) or 1)
    blocks = int(np.prod([e for t, e in extents.items() if t in BLOCK_TAGS]))
    threads = int(np.prod([e for t, e in extents.items() if t not in BLOCK_TAGS]))
    stages = max((int(f.annotation("pragma_software_pipeline", 1)) for f in loops), default=1)
    scratch = {id(b): b for r in collect(func.body, lambda s: isinstance(s, BlockRealize))
               for b in r.block.alloc_buffers}.values()
    shared = sum(_bytes(b) for b in scratch if b.scope == "shared") * stages
    local = sum(_bytes(b) for b in scratch if b.scope == "local")
    gpu = [
        _log(blocks), _log(threads), _log(-(-threads // 32)), float(threads % 32 != 0),
        _log(flop_count(func) / max(1, blocks * threads)), _log(shared), _log(local),
        max((as_int(f.extent) or 1 for f in loops if f.kind == "vectorized"), default=1),
        float(sum(f.kind == "unrolled" for f in loops)),
        _log(max((int(f.annotation("pragma_auto_unroll_max_step", 0)) for f in loops), default=0)),
        float(stages),
    ]
    return np.concatenate([extract_features(func, target or Target("cuda")), np.asarray(gpu, np.float32)])


def _bytes(b) -> int:
    return int(np.prod([as_int(d) or 1 for d in b.shape])) * dt.bits(b.dtype) // 8


def _log(x: float) -> float:
    return float(np.log2(1 + x))
