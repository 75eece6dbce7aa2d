"""The single-kernel path: a TE schedule (or loop-IR schedule or function) to a lowered loop-IR
function (`lower`) and to a callable kernel (`build`), for a target (ember.target), by its backend
(ember.backends): C compiled by the system compiler, or the loop-IR interpreter."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ArgumentTypeError
from .target import Target, as_target
from .te.schedule import TESchedule
from .tir.lower import lower as lower_func
from .tir.params import bind_params
from .tir.schedule import Schedule
from .tir.stmt import PrimFunc


def _prim_func(sch, args, name: str) -> PrimFunc:
    if isinstance(sch, TESchedule):
        if args is None:
            raise ArgumentTypeError("lowering a te schedule needs its arguments: lower(s, [A, B, C])")
        return sch.to_prim_func(args, name)
    if isinstance(sch, Schedule):
        sch = sch.mod
    if not isinstance(sch, PrimFunc):
        raise ArgumentTypeError(f"expected a te schedule, a tir Schedule or a PrimFunc, got {type(sch).__name__}")
    if args is not None:
        return bind_params(sch, [a.buffer if hasattr(a, "buffer") else a for a in args], name)
    return sch if sch.name == name or name == "main" else PrimFunc(name, sch.params, sch.body, sch.attrs)


def lower(sch, args: Sequence | None = None, name: str = "main", *, print_after: bool | None = None,
          skip: Sequence[str] = (), target: str | Target = "c") -> PrimFunc:
    """The lowered loop-IR function; `print(ember.lower(s, [A, B, C]))` shows its loops. The
    target's backend gives the loop passes; loops are vectorized for the target's SIMD width (none
    for the interpreter)."""
    target = as_target(target)
    return lower_func(_prim_func(sch, args, name), print_after=print_after, skip=skip,
                      vector_bytes=target.vector_bytes, passes=target.backend.loop_passes)


def build(sch, args: Sequence | None = None, target: str | Target = "c", name: str = "main", **options):
    """A callable kernel: f(*numpy_arrays) computes in place into the output arrays, built by the
    target's backend.

    target "c" (or a C Target): C compiled by the system compiler (options: cc, cflags, checked:
    an integer division by zero raises ZeroDivisionError instead of giving 0 as numpy does;
    num_threads: the OpenMP threads of each call, default the num_threads option, 0 the calling
    thread's setting, which a call never changes); "python": the loop-IR interpreter, no compiler
    involved; "cuda": a GPU kernel of a schedule bound to blocks and threads, CUDA C compiled by
    NVRTC (options: arch, ptx; ember.cuda.kernel). `f.source` is the generated code.
    """
    skip = options.pop("skip", ())
    target = as_target(target, cc=options.pop("cc", None), cflags=options.pop("cflags", None))
    target.check_runs_here()
    func = lower(sch, args, name, skip=skip, target=target)
    return target.backend.build_kernels([func], target, **options)[func.name]
