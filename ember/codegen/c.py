"""C code generation: lowered `PrimFunc`s become one readable C translation unit.

The unit is the prelude (includes, vector typedefs and the inline helpers the kernels use; see
`c_prelude`), then one function per kernel. A kernel takes its buffers as `restrict` pointers
(`const` when it never stores to them) to flat row-major data, then its size variables as int64:

    void vadd(const float* restrict A, const float* restrict B, float* restrict C, int64_t n)

A unit of kernels called one by one (`codegen_c`: ember.build, ember.triton) ends with a launcher
per kernel, what the runtime calls: the kernel's arguments, then the call's OpenMP threads,

    void ember_launch_vadd(void* ember_p0, void* ember_p1, void* ember_p2, int64_t ember_s0, int ember_threads)

which runs the kernel on that many threads (0: the calling thread's setting) and gives the calling
thread its own setting back when the kernel returns (`c_runtime.enter_threads`, the helpers a
model's entry uses too: ember.codegen.entry), so that a kernel's thread count never changes the
caller's, torch's included (one libgomp per process: ember.runtime.openmp).

Integer division never traps (c_expr). A checked renderer (`CRenderer(checked=True)`, the
`checked` option) gives every kernel one more parameter, `int64_t* ember_status`, and a division
by zero stores 1 there; the results are the same. A kernel that reads indices from a tensor (the
loop IR's INDEX intrinsic: gather, embedding, scatters) takes that parameter in every mode, and an
index out of range is recorded there (c_runtime's ember_index; ember.codegen.entry).

Loops: "parallel" is an OpenMP `parallel for` (the outermost of a nest only; an inner one is
serial), "vectorized" an `omp simd` loop, "unrolled" a `GCC unroll` loop. A `CallRoutine` calls
the routine's C function (ember.codegen.routines), written into the prelude the first time a
kernel of the unit calls it.

A kernel's C (and the prelude entries it needs) is kept as long as its function object lives:
functions are immutable, and a compiler that finds a kernel lowered before (ember.lowering.LOWERED)
hands over the same object, so a model compiled again renders none of its kernels again.

`CRenderer` fills the hooks of the C-style base (`cstyle.CStyleRenderer`: the tables of types,
operators and math functions, and the walk) with C's in three layers, one idea each:
`c_expr.CExprRenderer` the values (GCC vector extensions, the prelude's helpers, vector math,
atomics), `c_buffers.CBufferRenderer` where buffers live and how they are read and written (stack,
heap and register scratch), and `CRenderer` here the units, launchers, kernels' parameters,
OpenMP loops and routine calls.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

from ..errors import LowerError
from ..target import Target
from ..tir.expr import as_int
from ..tir.functor import checks_indices
from ..tir.stmt import THREAD_BINDING, CallRoutine, For, PrimFunc, Stmt
from ..tir.work import PARALLEL_MIN_WORK, static_work
from . import c_runtime
from .c_buffers import CBufferRenderer
from .c_prelude import CPrelude
from .c_runtime import enter_threads
from .common import not_lowered
from .cstyle import ADD, REL
from .routines import c_routine, tensor_intrin_args

LAUNCHER_PREFIX = "ember_launch_"  # + a kernel's C name: its launcher
# the text of each rendered function, and the prelude it needs, by renderer: kept as long as the function
_RENDERED: weakref.WeakKeyDictionary[PrimFunc, dict[tuple, tuple[str, CPrelude]]] = weakref.WeakKeyDictionary()
_RENDERED_LOCK = threading.Lock()


def codegen_c(funcs: PrimFunc | Sequence[PrimFunc], *, checked: bool = False, align: int = Target.align) -> str:
    """The C translation unit of one or several lowered functions, with their launchers (see the
    module doc; `checked`, `align`: see CRenderer)."""
    funcs = [funcs] if isinstance(funcs, PrimFunc) else list(funcs)
    return CRenderer(checked, align).render_unit(funcs, launchers=True)


def kernel_symbol(name: str) -> str:
    """The C name of the kernel called `name` (CRenderer.symbol_of)."""
    return CRenderer.symbol_of(name)


def takes_status(func: PrimFunc, *, checked: bool) -> bool:
    """Whether the kernel takes the status parameter (CRenderer.takes_status)."""
    return CRenderer(checked).takes_status(func)


def launcher_symbol(name: str) -> str:
    """The C name of the launcher of the kernel called `name` (CRenderer.launcher_of)."""
    return CRenderer.launcher_of(name)


def _runs(texts: list[str], count: int) -> list[list[str]]:
    """`texts` cut into `count` consecutive runs (none empty) of about equal total length."""
    total, runs, size = sum(map(len, texts)), [[]], 0
    for k, text in enumerate(texts):
        left = len(texts) - k  # texts not placed yet, this one included
        if runs[-1] and (size >= total * len(runs) / count or left == count - len(runs)) and len(runs) < count:
            runs.append([])
        runs[-1].append(text)
        size += len(text)
    return runs


class CRenderer(CBufferRenderer):
    """Renders lowered functions as C (the C-style base's hooks filled with OpenMP, GCC vector
    extensions and the prelude's helpers). One instance renders one translation unit."""

    def takes_status(self, func: PrimFunc) -> bool:
        """Whether the kernel takes the status parameter: in checked mode, or when it checks
        indices read at run time (the INDEX intrinsic)."""
        return self.checked or checks_indices(func.body)

    @classmethod
    def launcher_of(cls, name: str) -> str:
        """The C name of the launcher of the kernel called `name` (see the module doc)."""
        return LAUNCHER_PREFIX + cls.symbol_of(name)

    def render_unit(self, funcs: Sequence[PrimFunc], *, launchers: bool = False) -> str:
        """The unit of these kernels, and of their launchers when `launchers` (a model's unit has
        none: its entry, appended to the unit, calls the kernels)."""
        kernels = self._kernels(funcs)
        kernels += [self.render_launcher(f) for f in funcs] if launchers else []
        return "\n\n".join([*self._head(funcs), *kernels]) + "\n"

    def render_units(self, funcs: Sequence[PrimFunc], unit_bytes: int, most: int) -> list[str]:
        """The kernels as translation units of about equal size, one per `unit_bytes` of their C
        (at most `most`, and one per kernel), which a compiler builds in parallel and links into
        one library: each holds the prelude of them all and a run of the kernels; the last one
        also declares the others' kernels, so that the entry appended to it calls them. One unit
        is `render_unit(funcs)`."""
        kernels = self._kernels(funcs)
        head = self._head(funcs)
        count = max(1, min(most, len(kernels), 1 + sum(map(len, kernels)) // unit_bytes))
        runs = _runs(kernels, count)
        # (a kernel's text is its comment line, then its signature and " {": render_kernel)
        declared = [k.split("\n", 2)[1].removesuffix(" {") + ";" for run in runs[:-1] for k in run]
        return ["\n\n".join([*head, *(["\n".join(declared)] if declared and k == len(runs) - 1 else []), *run]) + "\n"
                for k, run in enumerate(runs)]

    def _kernels(self, funcs: Sequence[PrimFunc]) -> list[str]:
        """The kernels' C (their helpers merged into this unit's prelude, with the threads' helpers
        that launchers and the model's entry use); two kernels of one C name are a ValueError."""
        seen: dict[str, str] = {}
        for f in funcs:
            sym = self.symbol(f)
            if sym in seen:
                raise ValueError(f"two kernels in one unit would both be called {sym!r}: "
                                 f"{seen[sym]!r} and {f.name!r}; rename one")
            seen[sym] = f.name
        kernels = [self._kept(f) for f in funcs]
        c_runtime.threads(self.lib)  # for the launchers, or the model's entry
        return kernels

    def _head(self, funcs: Sequence[PrimFunc]) -> list[str]:
        return [f"/* Generated by ember: {', '.join(f.name for f in funcs)}. */", self.lib.text()]

    def render_launcher(self, func: PrimFunc) -> str:
        """The kernel's launcher (see the module doc). Its names start with `ember_`, which no
        kernel's does, so none hides a kernel."""
        params = [f"void* ember_p{k}" for k in range(len(func.params))] \
            + [f"int64_t ember_s{k}" for k in range(len(func.size_vars))] \
            + [f"int64_t* {self.STATUS}"] * self.takes_status(func)
        args = [p.rpartition(" ")[2] for p in params]
        return "\n".join([
            f"/* {self.symbol(func)} on ember_threads OpenMP threads; the caller's setting comes back on return. */",
            f"void {self.launcher_of(func.name)}({', '.join([*params, 'int ember_threads'])}) {{",
            f"  {enter_threads('ember_threads')}",
            f"  {self.symbol(func)}({', '.join(args)});",
            "}",
        ])

    def _kept(self, func: PrimFunc) -> str:
        """`render_kernel(func)`, kept while the function lives (functions are immutable, and the
        compiler hands over the same objects for kernels lowered before: ember.lowering.LOWERED);
        the typedefs and helpers it needs are merged into this unit's prelude."""
        key = type(self), self.checked, self.align
        with _RENDERED_LOCK:
            kept = _RENDERED.setdefault(func, {}).get(key)
        if kept is None:
            unit, self.lib = self.lib, CPrelude(self.SCALAR_TYPES, self.align)
            try:
                kept = self.render_kernel(func), self.lib
            finally:
                self.lib = unit
            with _RENDERED_LOCK:
                _RENDERED.setdefault(func, {})[key] = kept
        self.lib.merge(kept[1])
        return kept[0]

    # -- kernels ----------------------------------------------------------------------------
    def _begin_kernel(self, func: PrimFunc) -> None:
        super()._begin_kernel(func)
        self._in_parallel = self._in_simd = False
        self._status = self.takes_status(func)  # (read by _extra_params and _prologue)

    def _extra_params(self) -> list[str]:
        return [f"int64_t* {self.STATUS}"] * self._status

    def _prologue(self, func: PrimFunc) -> list[str]:
        return [f"  (void){self.STATUS};"] * self._status

    def _other_stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        if not isinstance(s, CallRoutine):
            raise not_lowered(s)
        params = dict(s.params)
        fn = c_routine(self.lib, s.routine, params)
        reads, writes, scalars = tensor_intrin_args(s) if "intrin" in params else (s.reads, s.writes, s.scalars)
        args = [f"(const void*)({self._buffer(p.buffer)} + {self._e(p.offset, ADD)})" for p in reads]
        args += [f"(void*)({self._buffer(p.buffer)} + {self._e(p.offset, ADD)})" for p in writes]
        args += [self._e(x) for x in scalars]
        out.append(f"{'  ' * depth}{fn}({', '.join(args)});")

    def _loop_open(self, s: For, pad: str, out: list[str]):
        """An OpenMP `parallel for` (the outermost of a nest only), an `omp simd` loop, or a `GCC
        unroll` loop."""
        if s.kind == THREAD_BINDING:
            raise LowerError(f"loop {s.loop_var.name} is bound to {s.thread_tag}: GPU indices are for target "
                             f"'cuda'; C runs loops serial, parallel, vectorized or unrolled")
        saved = self._in_parallel, self._in_simd
        if s.kind == "parallel" and not (self._in_parallel or self._in_simd):
            pragma = self._parallel(s)
            if pragma is not None:
                out.append(f"{pad}{pragma}")
            self._in_parallel = True
        elif s.kind == "vectorized" and not self._in_simd:
            out.append(f"{pad}#pragma omp simd")
            self._in_simd = True
        elif s.kind == "unrolled":
            n = as_int(s.extent)
            out.append(f"{pad}#pragma GCC unroll {8 if n is None else max(1, min(n, 65534))}")
        return saved

    def _loop_close(self, restore) -> None:
        self._in_parallel, self._in_simd = restore

    def _parallel(self, s: For) -> str | None:
        """The OpenMP pragma of a parallel loop; a nest with too little work for a parallel
        region to pay (ember.tir.work) runs serially: no pragma where that is known statically,
        else an `if` clause on the loop's extent."""
        pragma = "#pragma omp parallel for schedule(static)"
        per_iteration, extent = static_work(s.body), as_int(s.extent)
        if per_iteration is None or per_iteration >= PARALLEL_MIN_WORK:
            return pragma
        least = -(-PARALLEL_MIN_WORK // max(per_iteration, 1))  # iterations that make enough work
        if extent is not None:
            return pragma if extent >= least else None
        return f"{pragma} if({self._e(s.extent, REL + 1)} >= {least})"
