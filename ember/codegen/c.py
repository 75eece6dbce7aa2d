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
the `checked` option) gives every kernel one more parameter, `int* ember_status`, and a division
by zero stores 1 there; the results are the same.

Loops: "parallel" is an OpenMP `parallel for` (the outermost of a nest only; an inner one is
serial), "vectorized" an `omp simd` loop, "unrolled" a `GCC unroll` loop. Scalars are plain C,
computed in their own type (narrow integers wrap after each operation, like numpy; float16 is
stored as `_Float16` and computed as float). Vector expressions use GCC vector extensions.
Allocations: "local" scratch of constant size up to 64 KiB is an aligned stack array, anything
else `aligned_alloc`/`free` around its body. A `CallRoutine` calls the routine's C function (ember.codegen.routines),
written into the prelude the first time a kernel of the unit calls it.

A kernel's C (and the prelude entries it needs) is kept as long as its function object lives:
functions are immutable, and a compiler that finds a kernel lowered before (ember.lowering.LOWERED)
hands over the same object, so a model compiled again renders none of its kernels again.

`CRenderer` keeps what a C-like target may change in class-level tables (types, operators, math
functions); a CUDA renderer subclasses it and overrides a few entries. Math intrinsics are
libm calls (lane by lane in a vector), except float32's (and float16's) exp, log, tanh, erf,
sigmoid, pow, expm1 and log1p: C vector code of `c_vmath`, which scalars run too, so that a
value does not depend on whether it was computed in a vector or in a loop's scalar tail.
Floating-point expressions may be contracted to FMA by the compiler (GCC's default), so results
can differ from numpy's in the last bit.
"""

from __future__ import annotations

import functools
import operator
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from ..errors import LowerError
from ..target import ALIGN
from ..tir import dtype as dt
from ..tir.expr import (
    ATOMIC_FUNCS,
    BITWISE_OPS,
    COMPARE_OPS,
    LOGIC_OPS,
    PREFETCH,
    PRINT,
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
    Var,
    as_int,
)
from ..tir.stmt import (
    Allocate,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    While,
)
from .c_prelude import CPrelude, enter_threads
from .c_vmath import VECTOR_MATH, vector_math
from .common import Namer, not_lowered, safe_name, single_index, written_buffers
from .registers import register_gather, register_lanes, whole_register
from .routines import c_routine

# C operator precedence, higher binds tighter.
PRIMARY, UNARY, MUL, ADD, REL, EQ, BAND, BXOR, BOR, LAND, LOR, COND = 16, 14, 13, 12, 10, 9, 8, 7, 6, 5, 4, 3

# Identifiers of C and of the included headers that a kernel, buffer or variable must not take.
_C_WORDS_TEXT = """
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool true false int8_t uint8_t int16_t int32_t int64_t uint16_t uint32_t uint64_t
intptr_t uintptr_t size_t main INFINITY NAN NULL HUGE_VAL HUGE_VALF M_PI M_E EXIT_SUCCESS
EXIT_FAILURE RAND_MAX errno isnan isinf isfinite signbit fpclassify isnormal
abort abs aligned_alloc atexit atof atoi atol atoll bsearch calloc div exit free getenv labs ldiv
llabs lldiv malloc posix_memalign qsort rand random realloc srand srandom strtod strtof strtol
strtold strtoll strtoul strtoull system
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh drem erf erfc exp exp10 exp2
expm1 fabs fdim finite floor fma fmax fmin fmod frexp gamma hypot ilogb j0 j1 jn ldexp lgamma llrint
llround log log10 log1p log2 logb lrint lround modf nan nearbyint nextafter nexttoward pow pow10
remainder remquo rint round scalb scalbln scalbn significand sin sincos sinh sqrt tan tanh tgamma
trunc y0 y1 yn
"""
_C_WORDS = _C_WORDS_TEXT.split()
_LIBM = _C_WORDS[_C_WORDS.index("acos"):]
LAUNCHER_PREFIX = "ember_launch_"  # + a kernel's C name: its launcher
# the text of each rendered function, and the prelude it needs, by renderer: kept as long as the function
_RENDERED: weakref.WeakKeyDictionary[PrimFunc, dict[tuple, tuple[str, CPrelude]]] = weakref.WeakKeyDictionary()
_RENDERED_LOCK = threading.Lock()


def codegen_c(funcs: PrimFunc | Sequence[PrimFunc], *, checked: bool = False) -> str:
    """The C translation unit of one or several lowered functions, with their launchers (see the
    module doc; `checked`: see CRenderer)."""
    return CRenderer(checked).render_unit([funcs] if isinstance(funcs, PrimFunc) else list(funcs), launchers=True)


class CRenderer:
    """Renders lowered functions as C. One instance renders one translation unit."""

    SCALAR_TYPES = {
        "bool": "bool", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
        "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "float16": "_Float16",
        "bfloat16": "uint16_t", "float32": "float", "float64": "double",  # bfloat16: its bits
        # the narrow floats: their bits; the sub-byte integers: one value per byte (c_narrow)
        **dict.fromkeys((*dt.MINIFLOATS, *dt.SUBBYTE_INTS), "uint8_t"),
    }
    # IR operator -> (C operator, precedence); `//` and `%` only for unsigned ints (C's = floor's).
    BINARY_OPS = {
        "+": ("+", ADD), "-": ("-", ADD), "*": ("*", MUL), "/": ("/", MUL), "//": ("/", MUL),
        "%": ("%", MUL), "<": ("<", REL), "<=": ("<=", REL), ">": (">", REL), ">=": (">=", REL),
        "==": ("==", EQ), "!=": ("!=", EQ), "&&": ("&&", LAND), "||": ("||", LOR),
        "&": ("&", BAND), "^": ("^", BXOR), "|": ("|", BOR),
    }
    MASK_OPS = {"&&": ("&", BAND), "||": ("|", BOR)}  # logic on vector masks
    # Math intrinsic -> libm function (double); float32 appends MATH_FLOAT_SUFFIX.
    MATH_FUNCS = {
        "exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "pow": "pow",
        "fabs": "fabs", "abs": "fabs", "floor": "floor", "ceil": "ceil", "round": "rint",
        "sin": "sin", "cos": "cos", "exp2": "exp2", "log2": "log2", "log1p": "log1p",
        "expm1": "expm1", "trunc": "trunc", "asin": "asin", "acos": "acos", "atan": "atan", "asinh": "asinh",
        "acosh": "acosh", "atanh": "atanh", "fmod": "fmod",
    }
    # Intrinsics with no libm function: a template over the argument {0}, and its precedence.
    MATH_EXPRS = {
        "rsqrt": ("{one} / sqrt{f}({0})", MUL),
        "sigmoid": ("{one} / ({one} + exp{f}(-{0}))", MUL),
    }
    MATH_FLOAT_SUFFIX = "f"
    NARROW_INTS = ("int8", "uint8", "int16", "uint16")  # C computes these in int: wrap after each operation
    STACK_LIMIT = 64 * 1024  # bytes; larger local scratch goes to the heap
    ALIGN = ALIGN  # every buffer's alignment (ember.target)
    RESERVED = frozenset(_C_WORDS) | {f + s for f in _LIBM for s in ("f", "l")}
    # ember's helpers, OpenMP's names, C's reserved `_X`, and vector type names ("float32x8")
    RESERVED_PREFIXES = ("ember_", "omp_", "_", *(f"{d}x" for d in SCALAR_TYPES))

    STATUS = "ember_status"  # checked mode: the kernels' last parameter, `int* ember_status`

    def __init__(self, checked: bool = False):
        self.checked = checked
        self.lib = CPrelude(self.SCALAR_TYPES)

    @classmethod
    def symbol(cls, func: PrimFunc) -> str:
        """The C name of a kernel (its name, made a valid identifier that clashes with nothing)."""
        return cls.symbol_of(func.name)

    @classmethod
    def symbol_of(cls, name: str) -> str:
        """The C name of the kernel called `name`."""
        return safe_name(name, cls.RESERVED, cls.RESERVED_PREFIXES)

    @classmethod
    def launcher_of(cls, name: str) -> str:
        """The C name of the launcher of the kernel called `name` (see the module doc)."""
        return LAUNCHER_PREFIX + cls.symbol_of(name)

    def render_unit(self, funcs: Sequence[PrimFunc], *, launchers: bool = False) -> str:
        """The unit of these kernels, and of their launchers when `launchers` (a model's unit has
        none: its entry, appended to the unit, calls the kernels)."""
        seen: dict[str, str] = {}
        for f in funcs:
            sym = self.symbol(f)
            if sym in seen:
                raise ValueError(f"two kernels in one unit would both be called {sym!r}: "
                                 f"{seen[sym]!r} and {f.name!r}; rename one")
            seen[sym] = f.name
        kernels = [self._kept(f) for f in funcs]
        self.lib.threads()  # for the launchers, or the model's entry
        kernels += [self.render_launcher(f) for f in funcs] if launchers else []
        names = ", ".join(f.name for f in funcs)
        return "\n\n".join([f"/* Generated by ember: {names}. */", self.lib.text(), *kernels]) + "\n"

    def render_launcher(self, func: PrimFunc) -> str:
        """The kernel's launcher (see the module doc). Its names start with `ember_`, which no
        kernel's does, so none hides a kernel."""
        params = [f"void* ember_p{k}" for k in range(len(func.params))] \
            + [f"int64_t ember_s{k}" for k in range(len(func.size_vars))] + [f"int* {self.STATUS}"] * self.checked
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
        key = type(self), self.checked
        with _RENDERED_LOCK:
            kept = _RENDERED.setdefault(func, {}).get(key)
        if kept is None:
            unit, self.lib = self.lib, CPrelude(self.SCALAR_TYPES)
            try:
                kept = self.render_kernel(func), self.lib
            finally:
                self.lib = unit
            with _RENDERED_LOCK:
                _RENDERED.setdefault(func, {})[key] = kept
        self.lib.merge(kept[1])
        return kept[0]

    # -- kernels ----------------------------------------------------------------------------
    def render_kernel(self, func: PrimFunc) -> str:
        self._name = Namer(self.RESERVED, self.RESERVED_PREFIXES)
        self._vars: set[Var] = set(func.size_vars)
        self._nonnegative_vars: set[Var] = set(func.size_vars)
        self._buffers: set[Buffer] = set(func.params)
        self._registers: dict[Buffer, int] = {}  # promoted local buffers -> their vector width
        self._in_parallel = self._in_simd = False
        written = written_buffers(func)
        params = [
            f"{'' if b in written else 'const '}{self.SCALAR_TYPES[b.dtype]}* restrict {self._name(b)}"
            for b in func.params
        ] + [f"int64_t {self._name(v)}" for v in func.size_vars] + [f"int* {self.STATUS}"] * self.checked
        doc = ", ".join(f"{b.name}: {b.dtype}[{', '.join(str(d) for d in b.shape)}]" for b in func.params)
        lines = [f"/* {func.name}({doc}) */", f"void {self.symbol(func)}({', '.join(params)}) {{"]
        if self.checked:
            lines.append(f"  (void){self.STATUS};")
        self._stmt(func.body, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    def _stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        match s:
            case SeqStmt(stmts):
                for x in stmts:
                    self._stmt(x, depth, out)
            case For():
                self._for(s, depth, out)
            case BufferStore(buf, value, _):
                out.append(f"{pad}{self._store(buf, single_index(s), value)};")
            case IfThenElse(cond, then_case, else_case):
                out.append(f"{pad}if ({self._e(cond)}) {{")
                self._stmt(then_case, depth + 1, out)
                if else_case is not None:
                    out.append(f"{pad}}} else {{")
                    self._stmt(else_case, depth + 1, out)
                out.append(f"{pad}}}")
            case While(cond, body):
                out.append(f"{pad}while ({self._e(cond)}) {{")
                self._stmt(body, depth + 1, out)
                out.append(f"{pad}}}")
            case Evaluate(value):
                out.append(f"{pad}(void){self._e(value, UNARY)};")
            case Allocate(buf, body):
                self._allocate(buf, body, depth, out)
            case CallRoutine(routine, params, reads, writes, scalars):
                fn = c_routine(self.lib, routine, dict(params))
                args = [f"(const void*)({self._buffer(p.buffer)} + {self._e(p.offset, ADD)})" for p in reads]
                args += [f"(void*)({self._buffer(p.buffer)} + {self._e(p.offset, ADD)})" for p in writes]
                args += [self._e(x) for x in scalars]
                out.append(f"{pad}{fn}({', '.join(args)});")
            case _:
                raise not_lowered(s)

    def _for(self, s: For, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        saved = self._in_parallel, self._in_simd
        if s.kind == "parallel" and not (self._in_parallel or self._in_simd):
            out.append(f"{pad}#pragma omp parallel for schedule(static)")
            self._in_parallel = True
        elif s.kind == "vectorized" and not self._in_simd:
            out.append(f"{pad}#pragma omp simd")
            self._in_simd = True
        elif s.kind == "unrolled":
            n = as_int(s.extent)
            out.append(f"{pad}#pragma GCC unroll {8 if n is None else max(1, min(n, 65534))}")
        v = self._name(s.loop_var)
        end = s.extent if as_int(s.min) == 0 else s.min + s.extent
        first = self._e(s.min)  # before the loop variable is in scope
        self._vars.add(s.loop_var)
        if self._nonnegative(s.min):
            self._nonnegative_vars.add(s.loop_var)
        out.append(f"{pad}for ({self.SCALAR_TYPES[s.loop_var.dtype]} {v} = {first}; {v} < "
                   f"{self._e(end, REL + 1)}; ++{v}) {{")
        self._stmt(s.body, depth + 1, out)
        out.append(f"{pad}}}")
        self._vars.discard(s.loop_var)
        self._nonnegative_vars.discard(s.loop_var)
        self._in_parallel, self._in_simd = saved

    def _allocate(self, buf: Buffer, body: Stmt, depth: int, out: list[str]) -> None:
        pad, inner = "  " * depth, "  " * (depth + 1)
        name, ctype = self._name(buf), self.SCALAR_TYPES[buf.dtype]
        dims = [as_int(d) for d in buf.shape]
        count = None if None in dims else functools.reduce(operator.mul, dims, 1)
        small = count is not None and count * dt.bits(buf.dtype) // 8 <= self.STACK_LIMIT
        on_stack = buf.scope == "local" and small
        width = register_lanes(buf, body)
        out.append(f"{pad}{{")
        if width is not None:
            vtype = self.lib.vec(dt.element_of(buf.dtype), width)  # float16: half lanes, as in memory
            regs = ", ".join(f"{name}_{k}" for k in range(count // width))
            out.append(f"{inner}{vtype} {regs};  /* {name}: in registers */")
            self._registers[buf] = width
            on_stack = True
        elif on_stack:
            out.append(f"{inner}{ctype} {name}[{max(count, 1)}] __attribute__((aligned({self.ALIGN})));")
        else:
            size = self._e(functools.reduce(operator.mul, buf.shape)) if buf.shape else "1"
            out.append(f"{inner}{ctype}* restrict {name} = ({ctype}*)aligned_alloc({self.ALIGN}, "
                       f"{self.lib.padded_bytes()}({size}, sizeof({ctype})));")
        self._buffers.add(buf)
        self._stmt(body, depth + 1, out)
        self._buffers.discard(buf)
        if not on_stack:
            out.append(f"{inner}free({name});")
        out.append(f"{pad}}}")

    def _buffer(self, buf: Buffer) -> str:
        if buf not in self._buffers:
            raise LowerError(f"buffer {buf.name} is used but is neither a parameter of the kernel nor "
                             f"allocated around its use")
        return self._name(buf)

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
        widen = self.lib.to_float(elem) if elem in dt.BITS_FLOATS else self.lib.wrap(elem, 1) \
            if elem in dt.SUBBYTE_INTS else ""
        lanes_text = ", ".join(f"{widen}({name}_{o // width}[{o % width}])" for o in offsets)
        return f"({self.lib.value_vec(dtype, len(offsets))}){{{lanes_text}}}"

    def _store(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str:
        lanes = dt.lanes_of(index.dtype)
        if buf in self._registers:
            if lanes > 1 and dt.lanes_of(value.dtype) == 1:
                value = Broadcast(value, lanes, dt.with_lanes(value.dtype, lanes))
            code = self._e(value)
            if buf.dtype == "float16" and lanes > 1:  # computed in float, kept in half: round as a store does
                code = f"__builtin_convertvector({code}, {self.lib.vec('float16', lanes)})"
            else:
                code = self._to_memory(buf.dtype, lanes, code)
            return f"{self._register(buf, index)} = {code}"
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
        """A computed value as a type held as its bits stores it: rounded (bfloat16, the narrow
        floats) or its low bits (the sub-byte integers)."""
        if dtype in dt.BITS_FLOATS:
            return f"{self.lib.narrow(dtype, lanes) if lanes > 1 else self.lib.from_float(dtype)}({code})"
        if dtype in dt.SUBBYTE_INTS:
            return f"{self.lib.truncate(dtype, lanes)}({code})"
        return code

    def _copy(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str | None:
        """A store of a type held as its bits whose value is a load of the same type, as a copy of
        the bits (data movement keeps every code, as NumPy's does, NaN payloads included), or
        None. Vectors move as vectors of the bits: contiguous ones whole, others lane by lane."""
        held_as_bits = buf.dtype in dt.BITS_FLOATS or buf.dtype in dt.SUBBYTE_INTS
        if not held_as_bits or not isinstance(value, BufferLoad) or value.buffer.dtype != buf.dtype \
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
    def _e(self, e: PrimExpr, prec: int = 0) -> str:
        """The C text of e, parenthesized if it binds looser than `prec`."""
        code, p = self._expr(e)
        return f"({code})" if p < prec else code

    def _expr(self, e: PrimExpr) -> tuple[str, int]:
        lanes = dt.lanes_of(e.dtype)
        match e:
            case Var():
                if e not in self._vars:
                    raise LowerError(f"variable {e.name} is used outside the loop that defines it, or is "
                                     f"neither a loop variable nor a size of a parameter")
                return self._name(e), PRIMARY
            case Const(value, dtype) if lanes > 1:
                return self._expr(Broadcast(Const(value, dt.element_of(dtype)), lanes, dtype))
            case Const(value, dtype):
                return self._const(value, dtype)
            case Binary():
                return self._binary(e)
            case Not(a, _):
                return f"{'~' if lanes > 1 else '!'}{self._e(a, UNARY)}", UNARY
            case Select(c, t, f, _) if dt.lanes_of(c.dtype) == 1:
                return f"{self._e(c, LOR)} ? {self._e(t)} : {self._e(f, COND)}", COND
            case Select(c, t, f, _):
                elem, bits = self._lane_type(e)
                args = f"{self._mask(c, bits)}, {self._value(t, bits)}, {self._value(f, bits)}"
                return f"{self.lib.select(elem, lanes)}({args})", PRIMARY
            case Cast(dtype, v):
                return self._cast(dtype, v)
            case Call(name, args, dtype):
                return self._call(name, args, dtype)
            case BufferLoad(buf, _, _):
                return self._load(buf, single_index(e))
            case Ramp(base, stride, _, dtype):
                elem = dt.element_of(dtype)
                args = f"{self._scalar(base, elem)}, {self._scalar(stride, elem)}"
                return f"{self.lib.ramp(elem, lanes)}({args})", PRIMARY
            case Broadcast(v, _, dtype):
                elem = dt.element_of(dt.compute_dtype(dtype))
                return f"{self.lib.broadcast(elem, lanes)}({self._e(v)})", PRIMARY
        raise TypeError(f"unknown expression node {type(e).__name__}")

    def _const(self, value, dtype: str) -> tuple[str, int]:
        if dtype == "bool":
            return ("true" if value else "false"), PRIMARY
        if dt.is_int(dtype):
            if dtype in ("int32", "int64") and value == np.iinfo(dtype).min:
                return f"{dtype.upper()}_MIN", PRIMARY
            # int64 literals go without a suffix: C widens them to the other operand (see _binary)
            ctype = self.SCALAR_TYPES[dt.compute_dtype(dtype)]
            code = str(value) if dtype in ("int32", "int64") else f"({ctype}){value}"
            if dtype in ("uint32", "uint64"):  # past INT64_MAX a literal needs the suffix
                code += "ULL"
        elif dt.element_of(dtype) in dt.MINIFLOATS:  # the float nearest the stored value (NaN: e8m0 has no 0)
            exact = float(np.asarray(value, "float64").astype(dt.to_numpy(dtype)))
            if np.isnan(exact) or np.isinf(exact):
                return self._const(exact, "float32")
            code = repr(exact) + self.MATH_FLOAT_SUFFIX
        elif np.isnan(value):
            return "NAN", PRIMARY
        elif np.isinf(value):
            code = "INFINITY" if value > 0 else "-INFINITY"
        elif dtype == "float64":
            code = repr(float(value))
        else:  # float32, and float16 and bfloat16 computed as float: the float nearest the stored value
            exact = np.float32(value) if dtype == "float32" else np.asarray(value, "float64").astype(dt.to_numpy(dtype))
            code = repr(float(exact)) + self.MATH_FLOAT_SUFFIX
        return code, (UNARY if code.startswith(("-", "(")) else PRIMARY)

    def _binary(self, e: Binary) -> tuple[str, int]:
        code, p = self._binary_code(e)
        elem = dt.element_of(e.dtype)
        if elem in dt.SUBBYTE_INTS:  # computed in a byte, wrapped to the width after each operation
            return f"{self.lib.wrap(elem, dt.lanes_of(e.dtype))}({code})", PRIMARY
        return code, p

    def _binary_code(self, e: Binary) -> tuple[str, int]:
        op, a, b = e.op, e.a, e.b
        lanes = dt.lanes_of(a.dtype)
        elem = dt.element_of(dt.compute_dtype(a.dtype))
        if op in ("min", "max"):
            return f"{self.lib.minmax(op, elem, lanes)}({self._e(a)}, {self._e(b)})", PRIMARY
        if op in ("//", "%") and not (lanes == 1 and dt.is_int(elem) and _positive_const(b)
                                      and (elem.startswith("uint") or self._nonnegative(a))):
            checked = self.checked and dt.is_int(elem)
            status = f", {self.STATUS}" if checked else ""
            return f"{self.lib.floordiv(op, elem, lanes, checked)}({self._e(a)}, {self._e(b)}{status})", PRIMARY
        # Operands bind at least as tight as C requires, and are parenthesized where GCC would
        # suggest it: comparisons inside comparisons or bitwise operators, && inside ||.
        if op in COMPARE_OPS:
            left = right = ADD
        elif op in LOGIC_OPS:
            left = right = ADD if lanes > 1 else EQ
        if lanes > 1 and elem == "bool":  # masks: the same width on both sides
            cop, p = self.MASK_OPS.get(op) or self.BINARY_OPS[op]
            return f"{self._e(a, left)} {cop} {self._mask(b, self._mask_bits(a), right)}", p
        cop, p = self.BINARY_OPS[op]
        if op in BITWISE_OPS:  # operands parenthesized as GCC suggests (`a + b & c`)
            left = right = UNARY
        elif op not in COMPARE_OPS + LOGIC_OPS:
            left, right = p, p + 1
        code_a = self._e(a, left)
        if isinstance(a, Const) and isinstance(b, Const) and a.dtype == "int64":
            code_a = f"(int64_t){code_a}"  # two int literals: C would compute in int
        code = f"{code_a} {cop} {self._e(b, right)}"
        if lanes == 1 and elem in self.NARROW_INTS and op not in COMPARE_OPS + LOGIC_OPS:
            return f"({self.SCALAR_TYPES[elem]})({code})", UNARY
        return code, p

    def _nonnegative(self, e: PrimExpr) -> bool:
        """Whether e is provably >= 0: built from constants >= 0, sizes and loop variables (loops
        start at 0 or more) by +, *, //, %, min, max. On such operands, with a positive divisor, C's
        `/` and `%` are numpy's floor division, and the compiler can hoist them out of loops (the
        floor helpers' branches keep GCC from hoisting index arithmetic of fused loops)."""
        match e:
            case Const(value, _):
                return value >= 0
            case Var():
                return e in self._nonnegative_vars
            case Binary(op, a, b, _) if op in ("+", "*", "//", "%", "min", "max"):
                return self._nonnegative(a) and self._nonnegative(b)
        return False

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
        elif self.lib.value_vec(src, lanes) == target and src != "bool":
            return self._expr(v)
        return f"__builtin_convertvector({code}, {target})", PRIMARY

    def _call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        if name in ATOMIC_FUNCS:
            return self._atomic(name, args), PRIMARY
        if name.startswith(PRINT + " "):
            return self._print(name[len(PRINT) + 1:], args), PRIMARY
        if name == PREFETCH:  # read, kept in every level of the caches
            (target,) = args
            return f"__builtin_prefetch(&{self._buffer(target.buffer)}[{self._e(single_index(target))}], 0, 3)", PRIMARY
        lanes = dt.lanes_of(dtype)
        if name == REINTERPRET:
            return f"{self._reinterpret(args[0].dtype, dtype, lanes)}({self._e(args[0])})", PRIMARY
        elem = dt.element_of(dt.compute_dtype(dtype))
        if name in VECTOR_MATH.get(elem, ()):  # the same code for vectors and scalars (c_vmath)
            return f"{vector_math(self.lib, name, elem, lanes)}({', '.join(self._e(a) for a in args)})", PRIMARY
        if lanes == 1:
            return self._math(name, elem, [self._e(a, UNARY if name in self.MATH_EXPRS else 0) for a in args])
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
        loaded = "(float)d" if dst == "float16" else self.lib._from_memory(dst, "d") if dst != "bool" else "d"
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
        """printf of text then the arguments (floats as %f, integers as %lld), one line, flushed."""
        fmt = " ".join("%f" if dt.is_float(a.dtype) else "%lld" for a in args)
        values = "".join(f", ({'double' if dt.is_float(a.dtype) else 'long long'}){self._e(a, UNARY)}" for a in args)
        literal = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("\n", "\\n")
        return f'(printf("{literal}{fmt}\\n"{values}), fflush(stdout))'

    def _math(self, name: str, elem: str, args: list[str]) -> tuple[str, int]:
        """A scalar math call of type `elem` on argument texts."""
        if dt.is_int(elem):  # only abs keeps integer arguments
            if elem.startswith("uint"):
                return args[0], UNARY
            fn = "llabs" if elem == "int64" else "abs"
            code = f"{fn}({args[0]})"
            if elem in self.NARROW_INTS:
                return f"({self.SCALAR_TYPES[elem]}){code}", UNARY
            return code, PRIMARY
        f = self.MATH_FLOAT_SUFFIX if elem == "float32" else ""
        if name in self.MATH_EXPRS:
            template, prec = self.MATH_EXPRS[name]
            return template.format(*args, f=f, one=self._const(1.0, elem)[0]), prec
        return f"{self.MATH_FUNCS[name]}{f}({', '.join(args)})", PRIMARY

    def _load(self, buf: Buffer, index: PrimExpr) -> tuple[str, int]:
        lanes = dt.lanes_of(index.dtype)
        name = self._buffer(buf)
        if buf in self._registers:
            code = self._register(buf, index)
            if buf.dtype == "float16" and whole_register(index, self._registers[buf]):
                return f"__builtin_convertvector({code}, {self.lib.value_vec('float16', lanes)})", PRIMARY
            if buf.dtype == "float16" and lanes == 1:
                return f"(float){code}", UNARY
            if buf.dtype in dt.BITS_FLOATS and whole_register(index, self._registers[buf]):
                return f"{self.lib.widen(buf.dtype, lanes)}({code})", PRIMARY
            if buf.dtype in dt.BITS_FLOATS and lanes == 1:
                return f"{self.lib.to_float(buf.dtype)}({code})", PRIMARY
            if buf.dtype in dt.SUBBYTE_INTS and whole_register(index, self._registers[buf]):
                return f"{self.lib.wrap(buf.dtype, lanes)}(({self.lib.value_vec(buf.dtype, lanes)}){code})", PRIMARY
            if buf.dtype in dt.SUBBYTE_INTS and lanes == 1:
                return f"{self.lib.wrap(buf.dtype, 1)}({code})", PRIMARY
            return code, PRIMARY
        if lanes == 1 and buf.dtype in dt.BITS_FLOATS:
            return f"{self.lib.to_float(buf.dtype)}({name}[{self._e(index)}])", PRIMARY
        if lanes == 1 and buf.dtype in dt.SUBBYTE_INTS:
            return f"{self.lib.wrap(buf.dtype, 1)}({name}[{self._e(index)}])", PRIMARY
        if lanes == 1:
            return (f"(float){name}[{self._e(index)}]", UNARY) if buf.dtype == "float16" else (
                f"{name}[{self._e(index)}]", PRIMARY)
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


def _positive_const(e: PrimExpr) -> bool:
    return isinstance(e, Const) and e.value > 0


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _contiguous(index: PrimExpr) -> bool:
    return isinstance(index, Ramp) and as_int(index.stride) == 1
