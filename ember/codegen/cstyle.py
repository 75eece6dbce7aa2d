"""The C-style renderer: what C, CUDA and every C-like target share when they render lowered
loop-IR functions.

`CStyleRenderer` holds the language in class-level tables (scalar type names, operators and their
precedence, math functions, reserved words) and the walk over statements and expressions; a
target subclasses it and fills the hooks where languages differ: how a loop of each kind is
written (`_loop_open`: an OpenMP pragma in C, a thread index in CUDA), how a scope allocates
(`_allocate`: stack or heap in C, `__shared__` or registers in CUDA), the kernel's head
(`_signature`), vector operations, atomics, barriers and the launcher. Scalar code renders here as
plain C, which CUDA C shares; a hook a target does not fill is a LowerError that names the target,
so a node the target cannot run is refused when its kernel is rendered, never miscompiled.
(tinygrad's `renderer/cstyle.py` is the model: Clang, CUDA, Metal and OpenCL are a few overridden
entries each.)

Integer `//` and `%` follow numpy (x // 0 == x % 0 == 0), through the target's `_floordiv`
helper, except where both sides are provably nonnegative (`_nonnegative`): there C's `/` and `%`
are numpy's, and the compiler can hoist them.
"""

from __future__ import annotations

import numpy as np

from ..errors import LowerError
from ..tir import dtype as dt
from ..tir.expr import (
    ATOMIC_FUNCS,
    BITWISE_OPS,
    COMPARE_OPS,
    LOGIC_OPS,
    PRINT,
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
from ..tir.expr_functor import any_node
from ..tir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, Stmt, While
from .common import Namer, not_lowered, safe_name, single_index, written_buffers

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
C_WORDS = _C_WORDS_TEXT.split()
LIBM = C_WORDS[C_WORDS.index("acos"):]
WRAPPING_OPS, WRAPPING_INTS = ("+", "-", "*"), ("int32", "int64")  # computed as unsigned where they read tensors


class CStyleRenderer:
    """Renders lowered functions in a C-like language (see the module doc). One instance renders
    one translation unit; `TARGET` names the language in errors."""

    TARGET = "C-style"
    SCALAR_TYPES = {
        "bool": "bool", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
        "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "float32": "float",
        "float64": "double",
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
    RESERVED = frozenset(C_WORDS) | {f + s for f in LIBM for s in ("f", "l")}
    RESERVED_PREFIXES = ("ember_", "_")

    @classmethod
    def symbol(cls, func: PrimFunc) -> str:
        """The name of a kernel in the target language (its name, made a valid identifier that
        clashes with nothing)."""
        return cls.symbol_of(func.name)

    @classmethod
    def symbol_of(cls, name: str) -> str:
        """The target-language name of the kernel called `name`."""
        return safe_name(name, cls.RESERVED, cls.RESERVED_PREFIXES)

    # -- kernels ----------------------------------------------------------------------------
    def render_kernel(self, func: PrimFunc) -> str:
        self._name = Namer(self.RESERVED, self.RESERVED_PREFIXES)
        self._vars: set[Var] = set(func.size_vars)
        self._nonnegative_vars: set[Var] = set(func.size_vars)
        self._buffers: set[Buffer] = set(func.params)
        self._begin_kernel(func)
        written = written_buffers(func)
        params = [self._param(b, b in written) for b in func.params] \
            + [f"int64_t {self._name(v)}" for v in func.size_vars] + self._extra_params()
        doc = ", ".join(f"{b.name}: {b.dtype}[{', '.join(str(d) for d in b.shape)}]" for b in func.params)
        lines = [f"/* {func.name}({doc}) */", f"{self._signature(func, params)} {{"]
        body: list[str] = []
        self._stmt(func.body, 1, body)
        lines += self._prologue(func)
        lines += body
        lines.append("}")
        return "\n".join(lines)

    def _begin_kernel(self, func: PrimFunc) -> None:
        """Per-kernel state of the target, set before the walk."""

    def _param(self, buf: Buffer, written: bool) -> str:
        return f"{'' if written else 'const '}{self.SCALAR_TYPES[buf.dtype]}* restrict {self._name(buf)}"

    def _extra_params(self) -> list[str]:
        """Parameters after the sizes (C's checked mode: its status word)."""
        return []

    def _signature(self, func: PrimFunc, params: list[str]) -> str:
        return f"void {self.symbol(func)}({', '.join(params)})"

    def _prologue(self, func: PrimFunc) -> list[str]:
        """Lines at the top of the kernel's body, written after the walk (which may decide them)."""
        return []

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
                out.append(f"{pad}{self._evaluate(value)};")
            case Allocate(buf, body):
                self._allocate(buf, body, depth, out)
            case _:
                self._other_stmt(s, depth, out)

    def _evaluate(self, value: PrimExpr) -> str:
        return f"(void){self._e(value, UNARY)}"

    def _other_stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        """A statement the walk does not know (C: a routine's call)."""
        raise not_lowered(s)

    def _for(self, s: For, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        restore = self._loop_open(s, pad, out)
        v = self._name(s.loop_var)
        end = s.extent if as_int(s.min) == 0 else s.min + s.extent
        first = self._e(s.min)  # before the loop variable is in scope
        self._vars.add(s.loop_var)
        if self._nonnegative(s.min):
            self._nonnegative_vars.add(s.loop_var)
        out.append(f"{pad}for ({self._index_type(s.loop_var)} {v} = {first}; {v} < "
                   f"{self._e(end, REL + 1)}; ++{v}) {{")
        self._stmt(s.body, depth + 1, out)
        out.append(f"{pad}}}")
        self._vars.discard(s.loop_var)
        self._nonnegative_vars.discard(s.loop_var)
        self._loop_close(restore)

    def _index_type(self, var: Var) -> str:
        """The type a loop variable is declared with."""
        return self.SCALAR_TYPES[var.dtype]

    def _loop_open(self, s: For, pad: str, out: list[str]):
        """Write what precedes a loop of s's kind (a pragma); returns what `_loop_close` restores."""
        if s.kind not in ("serial", "unrolled"):
            raise LowerError(f"{self.TARGET} has no {s.kind} loops (loop {s.loop_var.name})")
        return None

    def _loop_close(self, restore) -> None:
        """Undo what `_loop_open` set for the loop's body."""

    def _allocate(self, buf: Buffer, body: Stmt, depth: int, out: list[str]) -> None:
        raise LowerError(f"{self.TARGET} cannot allocate buffer {buf.name} (scope {buf.scope!r})")

    def _buffer(self, buf: Buffer) -> str:
        if buf not in self._buffers:
            raise LowerError(f"buffer {buf.name} is used but is neither a parameter of the kernel nor "
                             f"allocated around its use")
        return self._name(buf)

    def _store(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str:
        if dt.lanes_of(index.dtype) > 1:
            raise self._no_vectors()
        return f"{self._buffer(buf)}[{self._e(index)}] = {self._e(value)}"

    def _no_vectors(self) -> LowerError:
        return LowerError(f"{self.TARGET} renders no vector expressions; lower for it without vectorizing")

    # -- expressions -------------------------------------------------------------------------
    def _e(self, e: PrimExpr, prec: int = 0) -> str:
        """The text of e, parenthesized if it binds looser than `prec`."""
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
            case Select():
                return self._vector_select(e)
            case Cast(dtype, v):
                return self._cast(dtype, v)
            case Call(name, args, dtype):
                return self._call(name, args, dtype)
            case BufferLoad(buf, _, _):
                return self._load(buf, single_index(e))
            case Ramp():
                return self._ramp(e)
            case Broadcast():
                return self._broadcast(e)
        raise TypeError(f"unknown expression node {type(e).__name__}")

    def _vector_select(self, e: Select) -> tuple[str, int]:
        raise self._no_vectors()

    def _ramp(self, e: Ramp) -> tuple[str, int]:
        raise self._no_vectors()

    def _broadcast(self, e: Broadcast) -> tuple[str, int]:
        raise self._no_vectors()

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
        return self._binary_code(e)

    def _binary_code(self, e: Binary) -> tuple[str, int]:
        op, a, b = e.op, e.a, e.b
        lanes = dt.lanes_of(a.dtype)
        elem = dt.element_of(dt.compute_dtype(a.dtype))
        if op in ("min", "max"):
            return f"{self._minmax(op, elem, lanes)}({self._e(a)}, {self._e(b)})", PRIMARY
        if op in ("//", "%") and not (lanes == 1 and dt.is_int(elem) and _positive_const(b)
                                      and (elem.startswith("uint") or self._nonnegative(a))):
            return self._floordiv(op, elem, lanes, a, b), PRIMARY
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
        if op in WRAPPING_OPS and elem in WRAPPING_INTS and any_node(e, _is_load):
            return self._wrapping(cop, elem, lanes, a, b), UNARY
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

    def _wrapping(self, cop: str, elem: str, lanes: int, a: PrimExpr, b: PrimExpr) -> str:
        """`a cop b` of signed ints computed in their unsigned type and converted back: values
        read from tensors wrap as two's complement (docs/operators.md), where C's signed overflow is
        undefined and compilers fold `x + c > x` to `c > 0`. (Index arithmetic, which reads no
        tensor, keeps C's signed operators: taken not to wrap, it is what compilers optimize.)"""
        if lanes > 1:
            raise self._no_vectors()
        unsigned = self.SCALAR_TYPES[f"u{elem}"]
        return f"({self.SCALAR_TYPES[elem]})(({unsigned}){self._e(a, UNARY)} {cop} ({unsigned}){self._e(b, UNARY)})"

    def _minmax(self, op: str, elem: str, lanes: int) -> str:
        """The function computing `op` ("min" or "max") of two values of `elem`."""
        raise LowerError(f"{self.TARGET} has no {op} of {elem}")

    def _floordiv(self, op: str, elem: str, lanes: int, a: PrimExpr, b: PrimExpr) -> str:
        """numpy's `a // b` or `a % b` (op), 0 for a zero divisor."""
        raise LowerError(f"{self.TARGET} has no floor division of {elem}")

    def _mask(self, e: PrimExpr, bits: int, prec: int = 0) -> str:
        raise self._no_vectors()

    def _mask_bits(self, e: PrimExpr) -> int:
        raise self._no_vectors()

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
        if dt.lanes_of(dtype) > 1:
            raise self._no_vectors()
        if dt.compute_dtype(v.dtype) == dt.compute_dtype(dtype):
            return self._expr(v)
        return f"({self.SCALAR_TYPES[dtype]}){self._e(v, UNARY)}", UNARY

    def _call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        if name in ATOMIC_FUNCS:
            return self._atomic(name, args), PRIMARY
        if name.startswith(PRINT + " "):
            return self._print(name[len(PRINT) + 1:], args), PRIMARY
        elem = dt.element_of(dt.compute_dtype(dtype))
        if dt.lanes_of(dtype) == 1:
            if name not in self.MATH_FUNCS and name not in self.MATH_EXPRS:
                raise LowerError(f"{self.TARGET} has no intrinsic {name!r}")
            return self._math(name, elem, [self._e(a, UNARY if name in self.MATH_EXPRS else 0) for a in args])
        return self._vector_call(name, args, dtype)

    def _vector_call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        raise self._no_vectors()

    def _atomic(self, name: str, args: tuple[PrimExpr, ...]) -> str:
        raise LowerError(f"{self.TARGET} has no {name}")

    def _print(self, text: str, args: tuple[PrimExpr, ...]) -> str:
        """printf of text then the arguments (floats as %f, integers as %lld), one line."""
        fmt = " ".join("%f" if dt.is_float(a.dtype) else "%lld" for a in args)
        values = "".join(f", ({'double' if dt.is_float(a.dtype) else 'long long'}){self._e(a, UNARY)}" for a in args)
        literal = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("\n", "\\n")
        return f'printf("{literal}{fmt}\\n"{values})'

    def _integer_pow(self, elem: str, args: list[str]) -> tuple[str, int]:
        """x^y of integers as ember.tir.power defines it: a loop, which a target provides as a helper."""
        raise LowerError(f"{self.TARGET} has no integer pow ({elem})")

    def _math(self, name: str, elem: str, args: list[str]) -> tuple[str, int]:
        """A scalar math call of type `elem` on argument texts."""
        if dt.is_int(elem):  # only abs and pow keep integer arguments
            if name == "pow":
                return self._integer_pow(elem, args)
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
        if dt.lanes_of(index.dtype) > 1:
            raise self._no_vectors()
        return f"{self._buffer(buf)}[{self._e(index)}]", PRIMARY


def _positive_const(e: PrimExpr) -> bool:
    return isinstance(e, Const) and e.value > 0


def _is_load(e: PrimExpr) -> bool:
    return isinstance(e, BufferLoad)
