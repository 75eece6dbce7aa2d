"""C expressions: the first layer of the C renderer (`CExprRenderer`, under `c_buffers` and
`c.CRenderer`), what a kernel's values are in C, apart from where its buffers live.

Scalars are plain C, computed in their own type (narrow integers wrap after each operation, like
numpy; float16 is stored as `_Float16` and computed as float; c_storage says how each type is held
and crosses between memory and arithmetic). Vector expressions use GCC vector extensions and the
prelude's helpers (c_prelude). Integer `//` and `%` follow numpy: x // 0 == x % 0 == 0 and
MIN // -1 == MIN (wraps), computed branch-free, so no division ever traps; in checked mode a
division by zero also stores 1 in the kernel's status word (ember.codegen.c). Math intrinsics are
libm calls (lane by lane in a vector), except float32's (and float16's) exp, log, tanh, erf,
sigmoid, pow, expm1 and log1p: C vector code of `c_vmath`, which scalars run too, so that a
value does not depend on whether it was computed in a vector or in a loop's scalar tail.
Floating-point expressions may be contracted to FMA by the compiler (GCC's default), so results
can differ from numpy's in the last bit. Atomics are GCC's `__atomic` builtins.
"""

from __future__ import annotations

import math

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
    BufferLoad,
    Call,
    Cast,
    Const,
    Not,
    PrimExpr,
    Ramp,
    Select,
)
from . import c_floordiv, c_runtime, c_x86
from .c_prelude import CPrelude
from .c_storage import STORAGE
from .c_vmath import VECTOR_MATH, vector_math
from .common import single_index
from .cstyle import ADD, EQ, PRIMARY, UNARY, CStyleRenderer


class CExprRenderer(CStyleRenderer):
    """The C-style base's expression hooks filled with C's: GCC vector extensions, the prelude's
    helpers, c_vmath's math and GCC's atomics."""

    TARGET = "C"
    SCALAR_TYPES = {elem: row.held for elem, row in STORAGE.items()}  # as held in memory (c_storage)
    # ember's helpers, OpenMP's names, C's reserved `_X`, and vector type names ("float32x8")
    RESERVED_PREFIXES = ("ember_", "omp_", "_", *(f"{d}x" for d in SCALAR_TYPES))

    STATUS = "ember_status"  # a kernel's last parameter (CRenderer.takes_status), `int64_t* ember_status`

    def __init__(self, checked: bool = False, align: int = Target.align):
        self.checked = checked
        self.align = align  # every buffer's alignment, the target's (ember.target.Target.align)
        self.lib = CPrelude(self.SCALAR_TYPES, align)

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
            return f"{c_x86.minmax_const(self.lib, e.op, elem, lanes)}({self._e(x)}, {self._e(c)})", PRIMARY
        code, p = self._binary_code(e)
        if elem in dt.SUBBYTE_INTS:  # computed in a byte, wrapped to the width after each operation
            return f"{self.lib.wrap(elem, dt.lanes_of(e.dtype))}({code})", PRIMARY
        return code, p

    def _minmax(self, op: str, elem: str, lanes: int) -> str:
        return self.lib.minmax(op, elem, lanes)

    def _wrapping(self, cop: str, elem: str, lanes: int, a: PrimExpr, b: PrimExpr) -> str:
        if lanes == 1:
            return super()._wrapping(cop, elem, lanes, a, b)
        unsigned = f"u{elem}"  # a vector operand cast to the unsigned vector, a scalar one (GCC broadcasts it) to uint

        def operand(x: PrimExpr) -> str:
            to = self.lib.vec(unsigned, lanes) if dt.lanes_of(x.dtype) > 1 else self.SCALAR_TYPES[unsigned]
            return f"({to}){self._e(x, UNARY)}"
        return f"({self.lib.vec(elem, lanes)})({operand(a)} {cop} {operand(b)})"

    def _floordiv(self, op: str, elem: str, lanes: int, a: PrimExpr, b: PrimExpr) -> str:
        checked = self.checked and dt.is_int(elem)
        status = f", {self.STATUS}" if checked else ""
        return f"{c_floordiv.floordiv(self.lib, op, elem, lanes, checked)}({self._e(a)}, {self._e(b)}{status})"

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
            return f"{c_x86.rint_int32(self.lib, lanes)}({self._e(v.args[0])})", PRIMARY
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
            code = f"{c_x86.widen_int32(self.lib, src, lanes)}({code})"
            if dst == "int32":
                return code, PRIMARY
        elif self.lib.value_vec(src, lanes) == target and src != "bool":
            return self._expr(v)
        return f"__builtin_convertvector({code}, {target})", PRIMARY

    def _call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        if name == INDEX:
            i, n = (self._e(a) for a in args)
            return f"{c_runtime.index(self.lib)}({i}, {n}, {self.STATUS})", PRIMARY
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

    def _to_memory(self, dtype: str, lanes: int, code: str) -> str:
        """A computed value as its type is held (c_storage): rounded (float16 vectors, bfloat16,
        the narrow floats) or its low bits (the sub-byte integers)."""
        row = STORAGE[dtype]
        return row.narrow(self.lib, lanes, code) if lanes > 1 else row.store(self.lib, code)

    # -- types of values ------------------------------------------------------------------------
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




def _number(e: PrimExpr) -> bool:
    """e is a float constant other than NaN, or the broadcast of one."""
    if isinstance(e, Broadcast):
        e = e.value
    return isinstance(e, Const) and not math.isnan(float(e.value))
