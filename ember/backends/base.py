"""What a backend is: everything that differs between the targets ember compiles for.

Everything above the target asks `target.backend` (ember.backends) for these and branches on no
kind:
- the compiler (ember.compiler): `check_options`, `check_graph`, then `render` (the kernels and the call program,
  ember.program, as one unit of source: the kernel renderer and the wrapper renderer), `build`
  (the builder and the loader), and `model`, the compiled-model class that runs what `build` gave;
- single kernels (ember.build, the tuner's measurement through it, ember.debug.bisect_kernels):
  `build_kernels`; the tile launcher (ember.triton): `tile_emitter` (how a tile kernel's block
  operations become loops on this machine), `render_kernels` and `open_launcher`, since it caches
  a kernel's source apart from its loop IR, and `call_tile` (a launch's arguments passed to it);
- the graph passes that read the target (`graph_passes`, names of ember.passes.pipeline), those
  it leaves out (`skipped_passes`), and the loop passes in order (`loop_passes`, those of
  ember.tir.lower);
- the tuner's rules (`tuner`: the design space, the features the cost model sees, the runner
  that measures), which ember.tune takes from the target it tunes for.

A backend is one object, registered by its `name` (the target's kind).
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .. import config
from ..errors import ArgumentTypeError, ConfigError
from ..program import Program
from ..runtime import fork
from ..runtime.module import Kernel
from ..runtime.spec import ModelSpec
from ..tir.stmt import PrimFunc


@dataclass(frozen=True)
class Rendered:
    """A model as a backend renders it: its source (what `cm.source` shows) and, for a backend
    whose rendering loads it too (the interpreter), what runs it."""

    source: str
    entry: object = None


@dataclass(frozen=True)
class TunerRules:
    """How the tuner explores a target's kernels: `space(task, target=)`, the task's design space
    on that target (a list of sketches, ember.tune.space: a tile unit's only where the target has
    it); `features(func, target)`, what the cost model sees of a
    candidate (ember.tune.features); `runner(workers=...)`, what builds, checks and times
    candidates (ember.tune.measure.LocalRunner's interface); `stack_limit`, the bytes of local
    scratch the renderer keeps on the stack (larger goes to the heap, which the features count)."""

    space: Callable
    features: Callable
    runner: Callable
    stack_limit: int


class Backend(ABC):
    """One target kind's code generation, build and runtime (see the module doc)."""

    name: str
    # the compiled-model class: model(spec, built, weights, plan, graph=, source=, num_threads=, stats=);
    # None: no model compiles for this target (check_options says so)
    model: type | None
    graph_passes: tuple[str, ...]  # the graph passes that read the target
    # graph passes this target leaves out: those making operators it has no schedule for
    skipped_passes: tuple[str, ...] = ()
    # precision -> the graph passes it adds (ember.passes.pipeline); None: the pipeline's PRECISIONS
    precisions: Mapping[str, tuple[str, ...]] | None = None
    loop_passes: Sequence  # (name, pass) pairs, in order
    tuner: TunerRules | None  # None: kernels of this target are not tuned
    # the Emitter of tile kernels (ember.triton.compiler.emitter), built as
    # tile_emitter(target, debug, num_warps=, num_stages=) (the launch's: a GPU's warps per program, and
    # stages of a loop's copies of dot operands);
    # None: this backend launches no tile kernels
    tile_emitter: Callable | None = None

    def check_options(self, *, checked: bool | None, precision: str = "fp32",  # noqa: B027 (most take every option)
                      weights: str | None = None) -> None:
        """Refuse, before anything is compiled, a model this backend cannot compile with these
        options (ConfigError); none by default."""

    def check_graph(self, graph, symbols: Sequence[str]) -> None:  # noqa: B027 (most backends take every graph)
        """Refuse, before any kernel is lowered, a fused graph this backend cannot compile
        (CompileError naming why); `symbols`: the sizes each call binds. None by default."""

    def render(self, program: Program, spec: ModelSpec, plan, weights: Mapping[str, np.ndarray], *,
               checked: bool, target) -> Rendered:
        """The model's kernels and call program as this backend's source."""
        raise ConfigError(f"target {self.name!r} compiles no models")

    def load_model(self, path):
        """The model saved in `path` in this backend's own format (ember.runtime.artifact.backend_of)."""
        raise ConfigError(f"target {self.name!r} saves no models in a format of its own")

    def machine(self, target) -> str:
        """The machine `target` runs on, as tuning records are kept under it (Target.key)."""
        return target.kind

    def build(self, rendered: Rendered, target) -> tuple[object, bool]:
        """What `model` runs (a library, an entry), and whether it came from the build cache."""
        raise ConfigError(f"target {self.name!r} compiles no models")

    @abstractmethod
    def build_kernels(self, funcs: Sequence[PrimFunc], target, **options) -> dict[str, Kernel]:
        """Single kernels built to be called on NumPy arrays, by function name."""

    def render_kernels(self, funcs: Sequence[PrimFunc], target, *, checked: bool = False) -> str:
        """The source of single kernels for `target`, each callable on its own through
        `open_launcher` (the tile launcher's pair; a backend without them launches no tile kernels)."""
        raise self.no_tile_kernels()

    def open_launcher(self, source: str, name: str, target):
        """The launcher of kernel `name` in `source` (render_kernels'), built and loaded."""
        raise self.no_tile_kernels()

    def call_tile(self, compiled, tensors: list, scalars: list, grid: tuple[int, int, int], options: dict) -> int:
        """Run a tile kernel's launcher (`compiled.cfunc`, open_launcher's) over `grid`; tensors:
        (name, TensorArg) pairs, scalars: their values, in the parameters' order. Returns the
        status word: 0, or the number of the check that failed. This default is the C launcher's
        convention: host pointers, then a pointer to each scalar, the spans, the status word, the
        grid's sizes and the OpenMP thread count (0: the calling thread's; one on the thread that
        forked this process)."""
        from ..triton.args import TensorArg

        pointers, keep, spans = [], [], []
        for name, t in tensors:
            if not isinstance(t, TensorArg):
                raise ArgumentTypeError(f"kernel {compiled.name}: argument '{name}' is in a GPU's memory; a launch "
                                        f"for target {self.name!r} takes host arrays (NumPy, CPU tensors), or "
                                        f"launch with target='cuda'")
            pointers.append(t.data_ptr)
            spans += t.span
        for v, dtype in zip(scalars, compiled.scalar_dtypes):
            arr = np.array([v], dtype=dtype)
            keep.append(arr)
            pointers.append(arr.ctypes.data)
        meta = np.array(spans or [0], dtype=np.int64)
        status = np.zeros(1, dtype=np.int64)
        threads = fork.threads(config.threads())
        compiled.cfunc(*(ctypes.c_void_p(x) for x in pointers), ctypes.c_void_p(meta.ctypes.data),
                       ctypes.c_void_p(status.ctypes.data), *(ctypes.c_int64(g) for g in grid), ctypes.c_int(threads))
        return int(status[0])

    def direct_tile(self, compiled, runtime: list) -> Callable | None:
        """A launcher of `compiled` for later launches whose arguments are of the kinds of a remembered
        launch's `runtime` (ember.triton.compiler.relaunch: the same types, dtypes, devices), taking
        (each tensor's address, then each scalar's value; the grid; the `stream=` option) and
        describing nothing again; None (this default): those launches take call_tile."""
        return None

    def no_tile_kernels(self) -> ConfigError:
        """The error of a tile launch for this backend's targets when it launches none."""
        return ConfigError(f"target {self.name!r} launches no tile kernels: they run on 'c', or on ember.triton's "
                           f"interpreter (TRITON_INTERPRET=1)")
