"""The CPU backend: C with OpenMP and SIMD, built by the configured C compiler (target "c").

A model is one library: every kernel (ember.codegen.c's CRenderer), the entry function that
runs the call program (ember.codegen.entry) and the library's contract (ember.runtime.contract),
built once and cached by content (ember.runtime.build), run by CompiledModel
(ember.runtime.model). Its source is one translation unit, or, when its kernels' C is larger than
UNIT_BYTES, one unit per UNIT_BYTES (at most one per core of the target), which the compiler
builds in parallel: -O3 over a large model's kernels is most of a cold compile (ResNet-18's 22
kernels, 200 KB of C: about a second of GCC). A single kernel is the same renderer's unit with a launcher per kernel
(ember.runtime.module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..codegen.c import CRenderer, codegen_c, launcher_symbol
from ..codegen.entry import render_entry, render_spec
from ..errors import ConfigError
from ..intrinsics import vnni  # noqa: F401  (registers what qgemm's schedule tensorizes onto: rendered by name)
from ..passes.pipeline import TARGET_PASSES
from ..program import Program
from ..runtime.build import UNIT_SEPARATOR, build_library, is_cached
from ..runtime.contract import contract, contract_text
from ..runtime.library import open_library
from ..runtime.model import CompiledModel
from ..runtime.module import CKernel, build_c_module
from ..runtime.spec import ModelSpec
from ..tir.lower import PASSES
from ..tir.stmt import PrimFunc
from ..tir.tensor_intrin import required_features
from ..tune.features import extract_features
from ..tune.measure import LocalRunner
from ..tune.space import design_space
from . import register
from .base import Backend, Rendered, TunerRules

UNIT_BYTES = 64 * 1024  # of kernels' C per translation unit, beyond which a model's source is cut


class CBackend(Backend):
    name = "c"
    model = CompiledModel
    graph_passes = TARGET_PASSES
    loop_passes = PASSES
    tuner = TunerRules(design_space, extract_features, LocalRunner, CRenderer.STACK_LIMIT)

    @property
    def tile_emitter(self):
        """The CPU's Emitter: SIMD loop nests under one OpenMP loop (imported here, on a tile
        launch, rather than with the backend: compiling a model needs none of ember.triton)."""
        from ..triton.compiler.vector import VectorEmitter

        return VectorEmitter

    def render(self, program: Program, spec: ModelSpec, plan, weights: Mapping[str, np.ndarray], *,
               checked: bool, target) -> Rendered:
        _check_units(program.kernels, target)
        renderer = CRenderer(checked, target.align)
        status = frozenset(f.name for f in program.kernels if renderer.takes_status(f))
        units = renderer.render_units(program.kernels, UNIT_BYTES, target.cores)
        units[-1] = "\n".join([units[-1], render_entry(program.body, status=status),
                                render_spec(contract_text(contract(spec, plan.to_json(), weights))), ""])
        return Rendered(UNIT_SEPARATOR.join(units))

    def build(self, rendered: Rendered, target) -> tuple[object, bool]:
        cached = is_cached(rendered.source, cc=target.cc, cflags=target.cflags)
        return build_library(rendered.source, cc=target.cc, cflags=target.cflags), cached

    def render_kernels(self, funcs: Sequence[PrimFunc], target, *, checked: bool = False) -> str:
        return codegen_c(funcs, checked=checked, align=target.align)

    def build_kernels(self, funcs: Sequence[PrimFunc], target, **options) -> dict[str, CKernel]:
        """Options: checked, num_threads (ember.runtime.module.build_c_module)."""
        _check_units(funcs, target)
        return build_c_module(funcs, cc=target.cc, cflags=target.cflags, align=target.align, **options)

    def open_launcher(self, source: str, name: str, target):
        handle = open_library(build_library(source, cc=target.cc, cflags=target.cflags)).handle
        cfunc = getattr(handle, launcher_symbol(name))
        cfunc.restype = None
        return cfunc, handle


def _check_units(funcs: Sequence[PrimFunc], target) -> None:
    """Kernels call a unit's intrinsics only for a target whose flags enable the unit."""
    if missing := {f: i for f, i in required_features(funcs).items() if f not in target.features}:
        raise ConfigError("; ".join(f"the tensor intrinsic {i} needs {f}, which the flags of target {target.key!r} "
                                    f"do not enable" for f, i in missing.items()))


register(CBackend())
