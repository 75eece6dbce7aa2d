"""The loop-IR interpreter backend (target "python"): slow, exact, no compiler.

The same kernels, memory plan and call program as for C, run in Python: each kernel as
ember.codegen.python renders it, the program by ember.runtime.interpreted (InterpretedModel: a
CompiledModel in every respect but its entry). The oracle that separates lowering bugs from
code generation bugs (ember.debug.bisect_kernels). A single kernel bound to GPU blocks and
threads runs thread by thread with GPU semantics (ember.cuda.simt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..cuda.simt import build_simt, is_gpu_kernel
from ..errors import ArgumentTypeError, ConfigError
from ..passes.pipeline import TARGET_PASSES
from ..program import Program
from ..runtime.interpreted import InterpretedEntry, InterpretedModel
from ..runtime.module import PythonKernel, build_python
from ..runtime.spec import ModelSpec
from ..tir.lower import PASSES
from ..tir.stmt import PrimFunc
from . import register
from .base import Backend, Rendered


class PythonBackend(Backend):
    name = "python"
    model = InterpretedModel
    graph_passes = TARGET_PASSES
    loop_passes = PASSES
    tuner = None  # the interpreter is the oracle, not a target to make fast

    def check_options(self, *, checked: bool | None, precision: str = "fp32",
                      weights: str | None = None) -> None:
        if checked:
            raise ConfigError("checked=True needs target 'c': the interpreter (target 'python') does not check "
                              "divisions")

    def render(self, program: Program, spec: ModelSpec, plan, weights: Mapping[str, np.ndarray], *,
               checked: bool, target) -> Rendered:
        entry = InterpretedEntry(program)  # (rendering a kernel in Python loads it)
        return Rendered(entry.source, entry)

    def build(self, rendered: Rendered, target) -> tuple[object, bool]:
        return rendered.entry, False  # nothing to build

    def build_kernels(self, funcs: Sequence[PrimFunc], target, *, seed: int = 0, **options) -> dict[str, PythonKernel]:
        """A kernel bound to GPU blocks and threads runs with GPU semantics (ember.cuda.simt), its
        blocks and threads in an order `seed` shuffles."""
        if options:
            raise ArgumentTypeError(f"target 'python' takes no options but seed, got {sorted(options)}")
        return {f.name: build_simt(f, seed=seed) if is_gpu_kernel(f) else build_python(f) for f in funcs}


register(PythonBackend())
