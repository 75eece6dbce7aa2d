"""C code generation: lowered `PrimFunc`s become one readable C translation unit.

The unit is the prelude (includes, vector typedefs and the inline helpers the kernels use; see
`c_prelude`), then one function per kernel. A kernel takes its buffers as `restrict` pointers
(`const` when it never stores to them) to flat row-major data, then its size variables as int64:

    void vadd(const float* restrict A, const float* restrict B, float* restrict C, int64_t n)

A unit of kernels called one by one (`codegen_c`: ember.build, ember.triton) ends with a launcher
per kernel, what the runtime calls: the kernel's arguments, then the call's OpenMP threads,

    void ember_launch_vadd(void* ember_p0, void* ember_p1, void* ember_p2, int64_t ember_s0, int ember_threads)

which runs the kernel on that many threads (0: the calling thread's setting) and gives the calling
thread its own setting back when the kernel returns (`c_prelude.enter_threads`, the helpers a
model's entry uses too: ember.codegen.entry), so that a kernel's thread count never changes the
caller's, torch's included (one libgomp per process: ember.runtime.openmp).

Integer `//` and `%` follow numpy: x // 0 == x % 0 == 0 and MIN // -1 == MIN (wraps), computed
branch-free (c_prelude), so no division ever traps. A checked renderer (`CRenderer(checked=True)`,
the `checked` option) gives every kernel one more parameter, `int64_t* ember_status`, and a
division by zero stores 1 there; the results are the same. A kernel that reads indices from a
tensor (the loop IR's INDEX intrinsic: gather, embedding, scatters) takes that parameter in every
mode, and an index out of range is recorded there (c_prelude's ember_index; ember.codegen.entry).

Loops: "parallel" is an OpenMP `parallel for` (the outermost of a nest only; an inner one is
serial), "vectorized" an `omp simd` loop, "unrolled" a `GCC unroll` loop. Scalars are plain C,
computed in their own type (narrow integers wrap after each operation, like numpy; float16 is
stored as `_Float16` and computed as float). Vector expressions use GCC vector extensions.
Allocations: "local" scratch of constant size up to 64 KiB is an aligned stack array, and so is
any buffer of constant size up to 1 KiB (a row's statistics inside a parallel loop: a heap
allocation per row and statistic otherwise); anything else `aligned_alloc`/`free` around its
body. A `CallRoutine` calls the routine's C function (ember.codegen.routines), written into the
prelude the first time a kernel of the unit calls it.

A kernel's C (and the prelude entries it needs) is kept as long as its function object lives:
functions are immutable, and a compiler that finds a kernel lowered before (ember.lowering.LOWERED)
hands over the same object, so a model compiled again renders none of its kernels again.

`CRenderer` fills the hooks of the C-style base (`cstyle.CStyleRenderer`: the tables of types,
operators and math functions, and the walk) with C's: OpenMP loops, GCC vector extensions, stack
and heap scratch, GCC's atomics, the launcher. Math intrinsics are
libm calls (lane by lane in a vector), except float32's (and float16's) exp, log, tanh, erf,
sigmoid, pow, expm1 and log1p: C vector code of `c_vmath`, which scalars run too, so that a
value does not depend on whether it was computed in a vector or in a loop's scalar tail.
Floating-point expressions may be contracted to FMA by the compiler (GCC's default), so results
can differ from numpy's in the last bit.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
import weakref
from collections.abc import Sequence

from ..errors import LowerError
from ..target import Target
from ..tir import dtype as dt
from ..tir.expr import (
    COMPARE_OPS,
    INDEX,
    PREFETCH,
    REINTERPRET,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    Call,
    Cast,
    Const,
    Not,
    PrimExpr,
    Ramp,
    Select,
    as_int,
)
from ..tir.functor import checks_indices
from ..tir.schedule.cache import DEVICE_SCOPES
from ..tir.stmt import THREAD_BINDING, CallRoutine, For, PrimFunc, Stmt
from ..tir.work import PARALLEL_MIN_WORK, static_work
from .c_prelude import CPrelude, enter_threads
from .c_storage import HELD_AS_BITS, STORAGE
from .c_vmath import VECTOR_MATH, vector_math
from .common import not_lowered, single_index
from .cstyle import ADD, EQ, PRIMARY, REL, UNARY, CStyleRenderer
from .registers import register_gather, register_lanes, whole_register
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


class CRenderer(CStyleRenderer):
    """Renders lowered functions as C (the C-style base's hooks filled with OpenMP, GCC vector
    extensions and the prelude's helpers). One instance renders one translation unit."""

    TARGET = "C"
    SCALAR_TYPES = {elem: row.held for elem, row in STORAGE.items()}  # as held in memory (c_storage)
    STACK_LIMIT = 64 * 1024  # bytes; larger local scratch goes to the heap
    SMALL_LIMIT = 1024  # bytes; a buffer of any scope up to this size goes on the stack
    # ember's helpers, OpenMP's names, C's reserved `_X`, and vector type names ("float32x8")
    RESERVED_PREFIXES = ("ember_", "omp_", "_", *(f"{d}x" for d in SCALAR_TYPES))

    STATUS = "ember_status"  # a kernel's last parameter (takes_status), `int64_t* ember_status`

    def __init__(self, checked: bool = False, align: int = Target.align):
        self.checked = checked
        self.align = align  # every buffer's alignment, the target's (ember.target.Target.align)
        self.lib = CPrelude(self.SCALAR_TYPES, align)

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
        self.lib.threads()  # for the launchers, or the model's entry
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
        self._registers: dict[Buffer, int] = {}  # promoted local buffers -> their vector width
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

    def _allocate(self, buf: Buffer, body: Stmt, depth: int, out: list[str]) -> None:
        if buf.scope in DEVICE_SCOPES:
            raise LowerError(f"{buf.name} is staged in {buf.scope}, an accelerator's memory: build the kernel "
                             f"for that accelerator (ember.build(..., target=<its ember.accel description>))")
        pad, inner = "  " * depth, "  " * (depth + 1)
        name, ctype = self._name(buf), self.SCALAR_TYPES[buf.dtype]
        dims = [as_int(d) for d in buf.shape]
        count = None if None in dims else functools.reduce(operator.mul, dims, 1)
        nbytes = None if count is None else count * dt.bits(buf.dtype) // 8
        on_stack = nbytes is not None and nbytes <= (self.STACK_LIMIT if buf.scope == "local" else self.SMALL_LIMIT)
        width = register_lanes(buf, body)
        out.append(f"{pad}{{")
        if width is not None:
            vtype = self.lib.vec(dt.element_of(buf.dtype), width)  # float16: half lanes, as in memory
            regs = ", ".join(f"{name}_{k}" for k in range(count // width))
            out.append(f"{inner}{vtype} {regs};  /* {name}: in registers */")
            self._registers[buf] = width
            on_stack = True
        elif on_stack:
            out.append(f"{inner}{ctype} {name}[{max(count, 1)}] __attribute__((aligned({self.align})));")
        else:
            size = self._e(functools.reduce(operator.mul, buf.shape)) if buf.shape else "1"
            out.append(f"{inner}{ctype}* restrict {name} = ({ctype}*)aligned_alloc({self.align}, "
                       f"{self.lib.padded_bytes()}({size}, sizeof({ctype})));")
        self._buffers.add(buf)
        self._stmt(body, depth + 1, out)
        self._buffers.discard(buf)
        if not on_stack:
            out.append(f"{inner}free({name});")
        out.append(f"{pad}}}")

    def _register(self, buf: Buffer, index: PrimExpr) -> str:
        width = self._registers[buf]
        name = self._buffer(buf)
        if whole_register(index, width):
            return f"{name}_{as_int(index.base) // width}"
        if isinstance(index, Ramp):  # lanes of several registers (registers.register_gather)
            return self._register_gather(name, buf.dtype, width, register_gather(index))
        return f"{name}_{as_int(index) // width}[{as_int(index) % width}]"

    def _register_gather(self, name: str, dtype: str, width: int, offsets: list[int]) -> str:
        """A vector of the register elements at `offsets`. The same lane of several registers is
        a column of their tile transposed (CPrelude.column: the C compiler shares the shuffles
        of the transpose between the columns); anything else is composed lane by lane."""
        regs = [o // width for o in offsets]
        lanes = 1 << (len(offsets) - 1).bit_length()  # columns of 3, 5..7 lanes live in vectors of 4, 8
        elem = dt.element_of(dtype)
        if len({o % width for o in offsets}) == 1 and lanes <= width and dt.compute_dtype(elem) == elem \
                and elem != "bool":
            regs += [regs[-1]] * (lanes - len(regs))
            args = ", ".join(f"{name}_{r}" for r in regs)
            return f"{self.lib.column(elem, width, lanes)}({offsets[0] % width}, {args})"
        lanes_text = ", ".join(self._register_lane(elem, f"{name}_{o // width}[{o % width}]") for o in offsets)
        return f"({self.lib.value_vec(dtype, len(offsets))}){{{lanes_text}}}"

    def _register_lane(self, elem: str, lane: str) -> str:
        """A lane of a register as computed: types held as their bits are widened."""
        return STORAGE[elem].lane(self.lib, lane) if elem in HELD_AS_BITS else f"({lane})"

    def _store(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str:
        lanes = dt.lanes_of(index.dtype)
        if buf in self._registers:
            if lanes > 1 and dt.lanes_of(value.dtype) == 1:
                value = Broadcast(value, lanes, dt.with_lanes(value.dtype, lanes))
            return f"{self._register(buf, index)} = {self._to_memory(buf.dtype, lanes, self._e(value))}"
        copy = self._copy(buf, index, value)
        if copy is not None:
            return copy
        if lanes == 1:
            code = self._to_memory(buf.dtype, 1, self._e(value))
            return f"{self._buffer(buf)}[{self._e(index)}] = {code}"
        if dt.lanes_of(value.dtype) == 1:
            value = Broadcast(value, lanes, dt.with_lanes(value.dtype, lanes))
        v = self._mask(value, 8) if buf.dtype == "bool" else self._e(value)
        if _contiguous(index):
            address = f"{self._buffer(buf)} + {self._e(index.base, ADD + 1)}"
            return f"{self.lib.store(buf.dtype, lanes)}({address}, {v})"
        return f"{self.lib.scatter(buf.dtype, lanes)}({self._buffer(buf)}, {self._index_vector(index)}, {v})"

    def _to_memory(self, dtype: str, lanes: int, code: str) -> str:
        """A computed value as its type is held (c_storage): rounded (float16 vectors, bfloat16,
        the narrow floats) or its low bits (the sub-byte integers)."""
        row = STORAGE[dtype]
        return row.narrow(self.lib, lanes, code) if lanes > 1 else row.store(self.lib, code)

    def _copy(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str | None:
        """A store of a type held as its bits whose value is a load of the same type, as a copy of
        the bits (data movement keeps every code, as NumPy's does, NaN payloads included), or
        None. Vectors move as vectors of the bits: contiguous ones whole, others lane by lane."""
        if buf.dtype not in HELD_AS_BITS or not isinstance(value, BufferLoad) or value.buffer.dtype != buf.dtype \
                or value.buffer in self._registers:
            return None
        src, lanes = single_index(value), dt.lanes_of(index.dtype)
        if lanes == 1 and dt.lanes_of(src.dtype) == 1:
            return f"{self._buffer(buf)}[{self._e(index)}] = {self._buffer(value.buffer)}[{self._e(src)}]"
        if lanes == 1 or dt.lanes_of(src.dtype) != lanes:
            return None
        whole = _power_of_two(lanes)
        if whole and _contiguous(src):
            u = self.lib.unaligned_vec(buf.dtype, lanes)
            bits = f"*(const {u}*)({self._buffer(value.buffer)} + {self._e(src.base, ADD + 1)})"
        else:
            bits = f"{self.lib.gather_bits(buf.dtype, lanes)}({self._buffer(value.buffer)}, {self._index_vector(src)})"
        if whole and _contiguous(index):
            u = self.lib.unaligned_vec(buf.dtype, lanes)
            return f"*({u}*)({self._buffer(buf)} + {self._e(index.base, ADD + 1)}) = {bits}"
        return f"{self.lib.scatter_bits(buf.dtype, lanes)}({self._buffer(buf)}, {self._index_vector(index)}, {bits})"

    # -- expressions -------------------------------------------------------------------------
    def _vector_select(self, e: Select) -> tuple[str, int]:
        elem, bits = self._lane_type(e)
        args = f"{self._mask(e.cond, bits)}, {self._value(e.t, bits)}, {self._value(e.f, bits)}"
        return f"{self.lib.select(elem, dt.lanes_of(e.dtype))}({args})", PRIMARY

    def _ramp(self, e: Ramp) -> tuple[str, int]:
        elem = dt.element_of(e.dtype)
        args = f"{self._scalar(e.base, elem)}, {self._scalar(e.stride, elem)}"
        return f"{self.lib.ramp(elem, dt.lanes_of(e.dtype))}({args})", PRIMARY

    def _broadcast(self, e: Broadcast) -> tuple[str, int]:
        elem = dt.element_of(dt.compute_dtype(e.dtype))
        return f"{self.lib.broadcast(elem, dt.lanes_of(e.dtype))}({self._e(e.value)})", PRIMARY

    def _binary(self, e: Binary) -> tuple[str, int]:
        elem, lanes = dt.element_of(e.dtype), dt.lanes_of(e.dtype)
        if e.op in ("min", "max") and elem in ("float32", "float64") and lanes > 1 and (_number(e.b) or _number(e.a)):
            x, c = (e.a, e.b) if _number(e.b) else (e.b, e.a)  # a clip's bound: ember_maxc_*
            return f"{self.lib.minmax_const(e.op, elem, lanes)}({self._e(x)}, {self._e(c)})", PRIMARY
        code, p = self._binary_code(e)
        if elem in dt.SUBBYTE_INTS:  # computed in a byte, wrapped to the width after each operation
            return f"{self.lib.wrap(elem, dt.lanes_of(e.dtype))}({code})", PRIMARY
        return code, p

    def _minmax(self, op: str, elem: str, lanes: int) -> str:
        return self.lib.minmax(op, elem, lanes)

    def _floordiv(self, op: str, elem: str, lanes: int, a: PrimExpr, b: PrimExpr) -> str:
        checked = self.checked and dt.is_int(elem)
        status = f", {self.STATUS}" if checked else ""
        return f"{self.lib.floordiv(op, elem, lanes, checked)}({self._e(a)}, {self._e(b)}{status})"

    def _cast(self, dtype: str, v: PrimExpr) -> tuple[str, int]:
        lanes = dt.lanes_of(dtype)
        src, dst = dt.element_of(v.dtype), dt.element_of(dtype)
        if lanes == 1:
            if dst == "float16":  # round to half, compute on in float
                return f"(float)(_Float16){self._e(v, UNARY)}", UNARY
            if dst in dt.BITS_FLOATS:  # round to dst's codes, compute on in float
                x = f"(float){self._e(v, UNARY)}" if dt.compute_dtype(src) != "float32" else self._e(v)
                return f"{self.lib.to_float(dst)}({self.lib.from_float(dst)}({x}))", PRIMARY
            if dst in dt.SUBBYTE_INTS:  # a float through int32, as ml_dtypes converts
                x = f"(int32_t){self._e(v, UNARY)}" if dt.is_float(src) else self._e(v)
                return f"{self.lib.wrap(dst, 1)}({x})", PRIMARY
            if dt.compute_dtype(src) == dt.compute_dtype(dst):
                return self._expr(v)
            return f"({self.SCALAR_TYPES[dst]}){self._e(v, UNARY)}", UNARY
        if dst == "bool":
            if src == "bool":
                return self._expr(v)
            return f"{self._e(v, EQ)} != 0", EQ
        target = self.lib.value_vec(dst, lanes)
        if (src, dst) == ("float32", "int32") and isinstance(v, Call) and v.name == "round":
            return f"{self.lib.rint_int32(lanes)}({self._e(v.args[0])})", PRIMARY
        code = f"{self._e(v, ADD)} & 1" if src == "bool" else self._e(v)  # mask lanes -1 -> 1
        if dst == "float16":
            code = f"__builtin_convertvector({code}, {self.lib.vec('float16', lanes)})"
        elif dst in dt.BITS_FLOATS:
            if self.lib.value_vec(src, lanes) != target or src == "bool":
                code = f"__builtin_convertvector({code}, {target})"
            return f"{self.lib.widen(dst, lanes)}({self.lib.narrow(dst, lanes)}({code}))", PRIMARY
        elif dst in dt.SUBBYTE_INTS:
            if dt.is_float(src):
                code = f"__builtin_convertvector({code}, {self.lib.vec('int32', lanes)})"
            if dt.is_float(src) or self.lib.value_vec(src, lanes) != target or src == "bool":
                code = f"__builtin_convertvector({code}, {target})"
            return f"{self.lib.wrap(dst, lanes)}({code})", PRIMARY
        elif src in ("float32", "float64") and dt.is_int(dst) and dt.bits(dst) < 32:
            # GCC converts floats to 8- and 16-bit lanes one by one; through int32 it is two
            # instructions (vcvttps2dq, vpmovdb), with the same values wherever C defines them
            code = f"__builtin_convertvector({code}, {self.lib.vec('int32', lanes)})"
        elif dt.is_int(src) and src not in dt.SUBBYTE_INTS and dt.bits(src) < 32 <= dt.bits(dst):
            # GCC (12) widens 8- and 16-bit lanes to 32 bits or floats one by one, or in pieces:
            # through int32 by the unit's own widening (ember_widen_*), then on
            code = f"{self.lib.widen_int32(src, lanes)}({code})"
            if dst == "int32":
                return code, PRIMARY
        elif self.lib.value_vec(src, lanes) == target and src != "bool":
            return self._expr(v)
        return f"__builtin_convertvector({code}, {target})", PRIMARY

    def _call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        if name == INDEX:
            i, n = (self._e(a) for a in args)
            return f"{self.lib.index()}({i}, {n}, {self.STATUS})", PRIMARY
        if name == PREFETCH:  # read, kept in every level of the caches
            (target,) = args
            return f"__builtin_prefetch(&{self._buffer(target.buffer)}[{self._e(single_index(target))}], 0, 3)", PRIMARY
        lanes = dt.lanes_of(dtype)
        if name == REINTERPRET:
            return f"{self._reinterpret(args[0].dtype, dtype, lanes)}({self._e(args[0])})", PRIMARY
        elem = dt.element_of(dt.compute_dtype(dtype))
        if name in VECTOR_MATH.get(elem, ()):  # the same code for vectors and scalars (c_vmath)
            return f"{vector_math(self.lib, name, elem, lanes)}({', '.join(self._e(a) for a in args)})", PRIMARY
        return super()._call(name, args, dtype)

    def _vector_call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        """A math intrinsic on a vector, lane by lane (libm has no vector functions)."""
        lanes, elem = dt.lanes_of(dtype), dt.element_of(dt.compute_dtype(dtype))
        t = self.lib.vec(elem, lanes)
        params = ", ".join(f"{t} {x}" for x in "xy"[: len(args)])
        lane_expr, _ = self._math(name, elem, [f"{x}[l]" for x in "xy"[: len(args)]])
        helper = self.lib.lanewise(f"ember_{name}_{t}", t, params, lanes, lane_expr)
        return f"{helper}({', '.join(self._e(a) for a in args)})", PRIMARY

    def _reinterpret(self, src: str, dst: str, lanes: int) -> str:
        """The helper that reads the bits of a value of `src` (as stored) as a value of `dst`."""
        src, dst = dt.element_of(src), dt.element_of(dst)
        name = f"ember_reinterpret_{src}_{dst}"
        if lanes > 1:
            lane = f"{self._reinterpret(src, dst, 1)}(x[l])"
            return self.lib.lanewise(f"{name}_x{lanes}", self.lib.value_vec(dst, lanes),
                                     f"{self.lib.value_vec(src, lanes)} x", lanes, lane)
        ctype = self.SCALAR_TYPES
        stored = "(_Float16)x" if src == "float16" else self._to_memory(src, 1, "x")
        loaded, _ = STORAGE[dst].load(self.lib, "d")
        return self.lib._helper(name, lambda: (
            f"static inline {ctype[dt.compute_dtype(dst)]} {name}({ctype[dt.compute_dtype(src)]} x) {{\n"
            f"  {ctype[src]} s = {stored};\n  {ctype[dst]} d;\n  __builtin_memcpy(&d, &s, sizeof d);\n"
            f"  return {loaded};\n}}"
        ))

    def _atomic(self, name: str, args: tuple[PrimExpr, ...]) -> str:
        """An atomic read-modify-write (GCC's __atomic builtins, sequentially consistent: a spin
        lock of atomic_cas and atomic_xchg orders the memory accesses between them)."""
        target = args[0]
        if not isinstance(target, BufferLoad) or any(dt.lanes_of(a.dtype) > 1 for a in args):
            raise LowerError(f"{name} takes the element it updates as a scalar load")
        elem = target.buffer.dtype
        helper = self.lib._helper(f"ember_{name}_{elem}", lambda: _atomic_helper(name, elem, self.SCALAR_TYPES[elem]))
        address = f"&{self._buffer(target.buffer)}[{self._e(single_index(target))}]"
        return f"{helper}({', '.join([address, *(self._e(a) for a in args[1:])])})"

    def _print(self, text: str, args: tuple[PrimExpr, ...]) -> str:
        """The base's printf, flushed."""
        return f"({super()._print(text, args)}, fflush(stdout))"

    def _integer_pow(self, elem: str, args: list[str]) -> tuple[str, int]:
        """`T ember_ipow_T(T x, T y)`: x^y by squaring, wrapping as unsigned products do; a
        negative y gives 0, but 1 for x = 1 and +-1 for x = -1 (torch's integer pow)."""
        name, t = f"ember_ipow_{elem}", self.SCALAR_TYPES[elem]
        negative = ("" if elem.startswith("uint")
                    else "  if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;\n")
        helper = self.lib._helper(name, lambda: (
            f"static inline {t} {name}({t} x, {t} y) {{\n{negative}"
            "  uint64_t r = 1, b = (uint64_t)x;\n"
            "  for (uint64_t e = (uint64_t)y; e; e >>= 1, b *= b) if (e & 1) r *= b;\n"
            f"  return ({t})r;\n}}"
        ))
        return f"{helper}({', '.join(args)})", PRIMARY

    def _load(self, buf: Buffer, index: PrimExpr) -> tuple[str, int]:
        lanes = dt.lanes_of(index.dtype)
        name = self._buffer(buf)
        if buf in self._registers:
            code, row = self._register(buf, index), STORAGE[buf.dtype]
            if whole_register(index, self._registers[buf]):  # registers hold elements as in memory
                return row.widen(self.lib, lanes, code), PRIMARY
            return row.load(self.lib, code) if lanes == 1 else (code, PRIMARY)  # a gather widens its lanes
        if lanes == 1:
            return STORAGE[buf.dtype].load(self.lib, f"{name}[{self._e(index)}]")
        if _contiguous(index):
            return f"{self.lib.load(buf.dtype, lanes)}({name} + {self._e(index.base, ADD + 1)})", PRIMARY
        return f"{self.lib.gather(buf.dtype, lanes)}({name}, {self._index_vector(index)})", PRIMARY

    # -- types of values ------------------------------------------------------------------------
    def _index_vector(self, index: PrimExpr) -> str:
        """A vector index as int64 lanes, what gathers and scatters take."""
        if dt.element_of(index.dtype) == "int64":
            return self._e(index)
        return f"__builtin_convertvector({self._e(index)}, {self.lib.vec('int64', dt.lanes_of(index.dtype))})"

    def _scalar(self, e: PrimExpr, elem: str) -> str:
        """A scalar operand of a vector operation of lanes `elem` (GCC wants the same type)."""
        if dt.element_of(e.dtype) == elem:
            return self._e(e)
        return f"({self.SCALAR_TYPES[elem]}){self._e(e, UNARY)}"

    def _lane_type(self, e: PrimExpr) -> tuple[str, int]:
        """The element type of e's vector lanes in C, and their width in bits."""
        if dt.is_bool(e.dtype):
            bits = self._mask_bits(e)
            return f"int{bits}", bits
        elem = dt.element_of(dt.compute_dtype(e.dtype))
        return elem, dt.bits(elem)

    def _value(self, e: PrimExpr, bits: int) -> str:
        """e as an operand of a vector select whose lanes are `bits` wide."""
        return self._mask(e, bits) if dt.is_bool(e.dtype) else self._e(e)

    def _mask(self, e: PrimExpr, bits: int, prec: int = 0) -> str:
        """A boolean vector as a mask of `bits`-wide lanes."""
        have = self._mask_bits(e)
        if have == bits:
            return self._e(e, prec)
        return f"__builtin_convertvector({self._e(e)}, {self.lib.mask(bits, dt.lanes_of(e.dtype))})"

    def _mask_bits(self, e: PrimExpr) -> int:
        """The lane width of the mask a boolean vector expression is rendered as."""
        match e:
            case Binary(op, a, _, _) if op in COMPARE_OPS and not dt.is_bool(a.dtype):
                return dt.bits(dt.compute_dtype(a.dtype))
            case Binary(_, a, _, _) | Not(a, _) | Select(_, a, _, _):
                return self._mask_bits(a)
            case Cast(_, v):
                return self._mask_bits(v) if dt.is_bool(v.dtype) else dt.bits(dt.compute_dtype(v.dtype))
            case BufferLoad():
                return 8
        return 32  # Broadcast and Const: see CPrelude.broadcast


_ATOMIC_FETCH = {"atomic_add": "add", "atomic_and": "and", "atomic_or": "or", "atomic_xor": "xor"}
_ATOMIC_UPDATE = {"atomic_add": "o + v", "atomic_max": "o > v ? o : v", "atomic_min": "o < v ? o : v"}


def _atomic_helper(name: str, elem: str, ctype: str) -> str:
    """The C helper of an atomic intrinsic on elements of `elem`: it returns the old value."""
    head = f"static inline {ctype} ember_{name}_{elem}({ctype}* p, "
    seq_cst = "__ATOMIC_SEQ_CST"
    if name == "atomic_cas":
        return (f"{head}{ctype} c, {ctype} v) {{\n  __atomic_compare_exchange(p, &c, &v, 0, {seq_cst}, {seq_cst});"
                f"\n  return c;\n}}")
    if name == "atomic_xchg":
        return f"{head}{ctype} v) {{\n  {ctype} r;\n  __atomic_exchange(p, &v, &r, {seq_cst});\n  return r;\n}}"
    if name in _ATOMIC_FETCH and dt.is_int(elem) or name in ("atomic_and", "atomic_or", "atomic_xor"):
        return f"{head}{ctype} v) {{\n  return __atomic_fetch_{_ATOMIC_FETCH[name]}(p, v, {seq_cst});\n}}"
    return (f"{head}{ctype} v) {{\n  {ctype} o, n;\n  __atomic_load(p, &o, __ATOMIC_RELAXED);\n"
            f"  do {{ n = {_ATOMIC_UPDATE[name]}; }} while (!__atomic_compare_exchange(p, &o, &n, 1, {seq_cst}, "
            f"__ATOMIC_RELAXED));\n  return o;\n}}")


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _contiguous(index: PrimExpr) -> bool:
    return isinstance(index, Ramp) and as_int(index.stride) == 1


def _number(e: PrimExpr) -> bool:
    """e is a float constant other than NaN, or the broadcast of one."""
    if isinstance(e, Broadcast):
        e = e.value
    return isinstance(e, Const) and not math.isnan(float(e.value))
