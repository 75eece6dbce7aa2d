"""The loop-IR interpreter (target "python"): a lowered `PrimFunc` becomes Python over NumPy.

`codegen_python(func)` writes `def NAME(A, B, C, n):` taking flat 1-D arrays (views of the
caller's arrays) then the int sizes; `load_python` compiles it. The function runs the loop IR
with NumPy's semantics, which makes it the definition of what the IR means (slow and exact: the
oracle that tells lowering bugs from code generation bugs):

- scalars are NumPy scalars of their dtype, so float32 rounds as float32 and narrow integers
  wrap; int64 index arithmetic stays in Python ints; `//` and `%` floor with numpy's rules (an
  integer division by zero gives 0, MIN // -1 wraps to MIN, as in the C code);
  float16, bfloat16 and the narrow floats are computed as float32 (a load converts, a store
  rounds), the sub-byte integers in int8 or uint8 (a store wraps, and so does every operation);
  a store of a load of a type held as its bits copies the element, as the C code does;
- vectors are arrays: Ramp is an arange, Broadcast a `np.full`, a contiguous (stride-1) vector
  access a slice and any other a fancy index; Select on vectors is `np.where`;
- an index the INDEX intrinsic checks raises IndexOutOfRange when outside its axis;
- math intrinsics are NumPy ufuncs (`round` is rint, half to even; erf is `math.erf` per element);
- every loop kind runs as a plain serial loop (a kernel bound to GPU blocks and threads runs
  thread by thread with GPU semantics instead: ember.cuda.simt renders it on this renderer);
  an Allocate is an `np.empty`;
- a CallRoutine calls the routine's NumPy twin (ember.codegen.routines) on the flat arrays; a
  tensorized call (ember.tir.schedule.tensorize) runs its intrinsic's description instead.

Run it under `np.errstate(all="ignore")`: wrap-around and float overflow are semantics here, not
errors.
"""

from __future__ import annotations

import builtins
import keyword
import linecache
import math
from collections.abc import Callable

import numpy as np

from ..errors import LowerError
from ..tir import dtype as dt
from ..tir.expr import (
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
    Var,
    as_int,
)
from ..tir.lower import lower
from ..tir.power import power
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
from ..tir.tensor_intrin import TensorIntrin, get_intrin
from .common import Namer, not_lowered, safe_name, single_index
from .routines import PYTHON_ROUTINES

# dtype -> the name of its NumPy scalar type in the generated code's namespace.
TYPES = {
    "bool": "bool_", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16", "int32": "i32", "uint32": "u32",
    "int64": "i64", "uint64": "u64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int4": "i4", "uint4": "u4", "int2": "i2", "uint2": "u2", "float4_e2m1fn": "f4e2m1fn",
    **{d: "f8" + d.removeprefix("float8_") for d in dt.MINIFLOATS if d.startswith("float8_")},
}
_NARROW = (*dt.HALF_DTYPES, *dt.MINIFLOATS, *dt.SUBBYTE_INTS)  # computed in a wider type

FUNCS = {
    "exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "tanh": "np.tanh", "erf": "_erf",
    "pow": "_pow", "fabs": "np.fabs", "abs": "np.abs", "floor": "np.floor", "ceil": "np.ceil",
    "round": "np.rint", "sin": "np.sin", "cos": "np.cos", "exp2": "np.exp2", "log2": "np.log2",
    "log1p": "np.log1p", "expm1": "np.expm1", "trunc": "np.trunc", "asin": "np.arcsin", "acos": "np.arccos",
    "atan": "np.arctan", "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh", "fmod": "np.fmod",
}
EXPRS = {"rsqrt": "(1 / np.sqrt({0}))", "sigmoid": "(1 / (1 + np.exp(-{0})))"}
OPS = {"&&": "and", "||": "or"}  # on scalars; vectors use & and |


def _erf(x):
    """math.erf, elementwise, in the dtype of x (NumPy has no erf without SciPy)."""
    if isinstance(x, np.ndarray):
        return np.vectorize(math.erf, otypes=[x.dtype])(x)
    return x.dtype.type(math.erf(x))


def _floordiv(a, b):
    """Integer `//`: numpy's, which is C's (x // 0 == 0, MIN // -1 == MIN); Python ints (int64
    index arithmetic) would raise on 0."""
    if isinstance(a, int) and isinstance(b, int):
        return 0 if b == 0 else a // b
    return a // b


def _index(i, n):
    """The INDEX intrinsic: i wrapped from the end when negative; out of range, IndexOutOfRange."""
    i, n = int(i), int(n)
    w = i + n if i < 0 else i
    if not 0 <= w < n:
        raise IndexOutOfRange(i, n)
    return w


class IndexOutOfRange(Exception):
    """An INDEX intrinsic's index out of its axis in an interpreted kernel: (index, size). The
    interpreted entry reports it as the C entry does (ember.runtime.interpreted)."""


def _astype(x, t):
    """A scalar converted as arrays are (NumPy refuses int4(8.0); astype wraps, as C does)."""
    return np.asarray(x).astype(t)


def _reinterpret(x, src, dst, compute):
    """The bits of x (computed values of type src) as values of dst, computed as `compute`."""
    out = np.asarray(x).astype(src).view(dst).astype(compute)
    return out if out.ndim else compute(out)


def _floormod(a, b):
    """Integer `%`, as `_floordiv` (x % 0 == 0)."""
    if isinstance(a, int) and isinstance(b, int):
        return 0 if b == 0 else a % b
    return a % b


def _scalar_types() -> dict[str, type]:
    """The NumPy scalar type of each dtype by its name in TYPES (bfloat16 only where ml_dtypes is
    installed: without it no bfloat16 array can reach a kernel)."""
    types = {}
    for d, name in TYPES.items():
        try:
            types[name] = dt.to_numpy(d).type
        except dt.DTypeError:
            continue
    return types


_DESCRIPTIONS: dict[TensorIntrin, Callable] = {}


def run_tensor_intrin(params: dict, reads, writes, scalars) -> None:
    """A tensorized call (ember.tir.schedule.tensorize), interpreted: the intrinsic's description
    runs on copies of its inputs, viewed from the (array, offset) pairs with the strides that
    follow the C call's scalars; its role says what becomes of the outputs (body: the result,
    reset: zero, update: += the result). An intrinsic with an `emulate` twin runs that instead."""
    it = get_intrin(params["intrin"])
    if it.emulate is not None:
        n = params["c_scalars"]
        it.emulate(params["role"], reads, writes, [int(x) for x in scalars[:n]], [int(x) for x in scalars[n:]])
        return
    if it not in _DESCRIPTIONS:
        desc = lower(it.desc)
        _DESCRIPTIONS[it] = load_python(codegen_python(desc), desc)
    strides = [int(x) for x in scalars[params["c_scalars"]:]]
    views = []
    for buf, (arr, offset) in zip(it.desc.params, [*reads, *writes]):
        shape = [int(as_int(d)) for d in buf.shape]
        step, strides = strides[:len(shape)], strides[len(shape):]
        views.append(np.lib.stride_tricks.as_strided(arr[int(offset):], shape, [s * arr.itemsize for s in step]))
    ins, outs = views[:it.n_inputs], views[it.n_inputs:]
    results = [np.empty(v.shape, v.dtype) for v in outs]
    if params["role"] != "reset":
        _DESCRIPTIONS[it](*(np.ascontiguousarray(v).reshape(-1) for v in ins), *(r.reshape(-1) for r in results))
    for view, result in zip(outs, results):
        match params["role"]:
            case "body":
                view[...] = result
            case "reset":
                view[...] = 0
            case _:
                view[...] = view + result


_ATOMIC_UPDATES = {
    "atomic_add": lambda old, v: old + v, "atomic_max": np.maximum, "atomic_min": np.minimum,
    "atomic_and": lambda old, v: old & v, "atomic_or": lambda old, v: old | v, "atomic_xor": lambda old, v: old ^ v,
    "atomic_xchg": lambda old, v: v, "atomic_cas": lambda old, cmp, v: v if old == cmp else old,
}


def _atomic(name, array, index, *values):
    """An atomic read-modify-write of array[index] (one thread runs at a time here): the old value."""
    old = array[index]
    array[index] = _ATOMIC_UPDATES[name](old, *values)
    return old


NAMESPACE = {"np": np, "_erf": _erf, "_atomic": _atomic, "_pow": power, "_floordiv": _floordiv, "_floormod": _floormod,
             "_astype": _astype, "_reinterpret": _reinterpret, "_index": _index,
             "_routines": PYTHON_ROUTINES, "_intrin": run_tensor_intrin} | _scalar_types()
RESERVED = frozenset([*keyword.kwlist, *keyword.softkwlist, *dir(builtins), *NAMESPACE])


def symbol(func: PrimFunc) -> str:
    """The Python name of a kernel's function."""
    return safe_name(func.name, RESERVED, ("_",))


def codegen_python(func: PrimFunc) -> str:
    return PythonRenderer(func).render()


def load_python(source: str, func: PrimFunc) -> Callable:
    """Compile the source from `codegen_python(func)` and return its function. Tracebacks show
    the generated lines (the source is registered with linecache)."""
    filename = f"<ember-python {func.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(NAMESPACE)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[symbol(func)]


class PythonRenderer:
    def __init__(self, func: PrimFunc):
        self.func = func
        self._name = Namer(RESERVED, ("_",))
        self._vars: set[Var] = set(func.size_vars)
        self._buffers: set[Buffer] = set(func.params)

    def render(self) -> str:
        f = self.func
        params = [self._name(b) for b in f.params] + [self._name(v) for v in f.size_vars]
        doc = ", ".join(f"{b.name}: {b.dtype}[{', '.join(str(d) for d in b.shape)}]" for b in f.params)
        lines = [f"def {symbol(f)}({', '.join(params)}):", f'    """{f.name}({doc})"""']
        self._stmt(f.body, 1, lines)
        return "\n".join(lines) + "\n"

    def _stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        match s:
            case SeqStmt(stmts):
                for x in stmts:
                    self._stmt(x, depth, out)
                if not stmts:
                    out.append(f"{pad}pass")
            case For(v, mn, ext, _, body):
                bounds = self._e(ext) if as_int(mn) == 0 else f"{self._e(mn)}, {self._e(mn + ext)}"
                self._vars.add(v)
                out.append(f"{pad}for {self._name(v)} in range({bounds}):")
                self._stmt(body, depth + 1, out)
                self._vars.discard(v)
            case BufferStore(buf, BufferLoad(src, _, _) as value, _) if src.dtype == buf.dtype in _NARROW:
                out.append(f"{pad}{self._access(buf, single_index(s))} = {self._access(src, single_index(value))}")
            case BufferStore(buf, value, _):
                out.append(f"{pad}{self._access(buf, single_index(s))} = {self._e(value)}")
            case IfThenElse(cond, then_case, else_case):
                out.append(f"{pad}if {self._e(cond)}:")
                self._stmt(then_case, depth + 1, out)
                if else_case is not None:
                    out.append(f"{pad}else:")
                    self._stmt(else_case, depth + 1, out)
            case While(cond, body):
                out.append(f"{pad}while {self._e(cond)}:")
                self._stmt(body, depth + 1, out)
            case Evaluate(Call(name)) if name == PREFETCH:  # a cache hint: nothing to do here
                out.append(f"{pad}pass")
            case Evaluate(value):
                out.append(f"{pad}{self._e(value)}")
            case CallRoutine(routine, params, reads, writes, scalars):
                fn = "_intrin" if "intrin" in dict(params) else f"_routines[{routine!r}]"
                if fn != "_intrin" and routine not in PYTHON_ROUTINES:
                    raise LowerError(f"the interpreter has no routine {routine!r}")
                reads_, writes_ = ([f"({self._access_base(p.buffer)}, {self._e(p.offset)})" for p in ps]
                                   for ps in (reads, writes))
                out.append(f"{pad}{fn}({dict(params)!r}, [{', '.join(reads_)}], "
                           f"[{', '.join(writes_)}], [{', '.join(self._e(x) for x in scalars)}])")
            case Allocate(buf, body):
                size = " * ".join(self._e(d) for d in buf.shape) or "1"
                out.append(f"{pad}{self._name(buf)} = np.empty({size}, dtype={TYPES[buf.dtype]})")
                self._buffers.add(buf)
                self._stmt(body, depth, out)
                self._buffers.discard(buf)
            case _:
                raise not_lowered(s)

    def _access_base(self, buf: Buffer) -> str:
        """The array of buf (a parameter or allocated around its use)."""
        if buf not in self._buffers:
            raise LowerError(f"buffer {buf.name} is used but is neither a parameter of the kernel nor "
                             f"allocated around its use")
        return self._name(buf)

    def _access(self, buf: Buffer, index: PrimExpr) -> str:
        """`A[i]`, `A[b:b + 8]` for a stride-1 ramp, or `A[idx]` with an index array."""
        name = self._access_base(buf)
        if isinstance(index, Ramp) and as_int(index.stride) == 1:
            base = self._e(index.base)
            return f"{name}[{base}:{base} + {index.lanes}]"
        return f"{name}[{self._e(index)}]"

    def _e(self, e: PrimExpr) -> str:
        vector = dt.lanes_of(e.dtype) > 1
        match e:
            case Var():
                if e not in self._vars:
                    raise LowerError(f"variable {e.name} is used outside the loop that defines it, or is "
                                     f"neither a loop variable nor a size of a parameter")
                return self._name(e)
            case Const(value, dtype) if vector:
                return f"np.full({dt.lanes_of(dtype)}, {self._const(value, dt.element_of(dtype))}, " \
                       f"dtype={TYPES[dt.element_of(dt.compute_dtype(dtype))]})"
            case Const(value, dtype):
                return self._const(value, dtype)
            case Binary(("min" | "max") as op, a, b, dtype):
                fn = f"np.{op}imum" if vector or dt.is_float(dtype) else op
                return f"{fn}({self._e(a)}, {self._e(b)})"
            case Binary(("//" | "%") as op, a, b, dtype) if dt.is_int(dtype):
                return f"{'_floordiv' if op == '//' else '_floormod'}({self._e(a)}, {self._e(b)})"
            case Binary(op, a, b, dtype) if dt.element_of(dtype) in dt.SUBBYTE_INTS:  # wraps to the width
                t = TYPES[dt.element_of(dtype)]
                code = self._e(Binary(op, a, b, dt.compute_dtype(dtype)))
                c = TYPES[dt.element_of(dt.compute_dtype(dtype))]
                return f"{code}.astype({t}).astype({c})" if vector else f"{c}(_astype({code}, {t}))"
            case Binary(op, a, b, _):
                py = {"&&": "&", "||": "|"}.get(op, op) if vector else OPS.get(op, op)
                return f"({self._e(a)} {py} {self._e(b)})"
            case Not(a, _):
                return f"(~{self._e(a)})" if vector else f"(not {self._e(a)})"
            case Select(c, t, f, _) if dt.lanes_of(c.dtype) > 1:
                return f"np.where({self._e(c)}, {self._e(t)}, {self._e(f)})"
            case Select(c, t, f, _):
                return f"({self._e(t)} if {self._e(c)} else {self._e(f)})"
            case Cast(dtype, v):
                return self._cast(dt.element_of(dtype), v, vector)
            case Call(name, (x,), dtype) if name == REINTERPRET:
                src, dst = (dt.element_of(d) for d in (x.dtype, dtype))
                return f"_reinterpret({self._e(x)}, {TYPES[src]}, {TYPES[dst]}, {TYPES[dt.compute_dtype(dst)]})"
            case Call(name, (i, n), _) if name == INDEX:
                return f"_index({self._e(i)}, {self._e(n)})"
            case Call(name, (BufferLoad(buf, _, _) as target, *values), _) if name in _ATOMIC_UPDATES:
                return (f"_atomic({name!r}, {self._access_base(buf)}, {self._e(single_index(target))}"
                        f"{''.join(', ' + self._e(v) for v in values)})")
            case Call(name, args, _):
                if name in EXPRS:
                    return EXPRS[name].format(self._e(args[0]))
                return f"{FUNCS[name]}({', '.join(self._e(a) for a in args)})"
            case BufferLoad(buf, _, _):
                code = self._access(buf, single_index(e))
                if buf.dtype in _NARROW:
                    t = TYPES[dt.element_of(dt.compute_dtype(buf.dtype))]
                    return f"{code}.astype({t})" if vector else f"{t}({code})"
                return code
            case Ramp(base, stride, lanes, dtype):
                arange = f"np.arange({lanes}, dtype={TYPES[dt.element_of(dtype)]})"
                return f"({self._e(base)} + {self._e(stride)} * {arange})"
            case Broadcast(v, lanes, dtype):
                elem = dt.element_of(dt.compute_dtype(dtype))
                return f"np.full({lanes}, {self._e(v)}, dtype={TYPES[elem]})"
        raise TypeError(f"unknown expression node {type(e).__name__}")

    def _const(self, value, dtype: str) -> str:
        if dtype == "bool":
            return repr(bool(value))
        if dtype == "int64":
            return repr(value) if value >= 0 else f"({value})"
        if dt.is_float(dtype):
            if dtype in _NARROW:
                value = float(np.asarray(value, "float64").astype(dt.to_numpy(dtype)))
            text = repr(float(value))
            return f"{TYPES[dt.compute_dtype(dtype)]}({text if math.isfinite(value) else repr(text)})"
        return f"{TYPES[dt.compute_dtype(dtype)]}({value})"

    def _cast(self, dst: str, v: PrimExpr, vector: bool) -> str:
        src = dt.element_of(v.dtype)
        x = self._e(v)
        if dst in _NARROW:  # round or wrap to dst, compute on in float32 or a byte
            t, c = TYPES[dst], TYPES[dt.compute_dtype(dst)]
            return f"{x}.astype({t}).astype({c})" if vector else f"{c}(_astype({x}, {t}))"
        if dt.compute_dtype(src) == dt.compute_dtype(dst):
            return x
        if vector:
            return f"{x}.astype({TYPES[dst]})"
        if src == "int64" and dt.is_int(dst):  # a Python int: through int64, so it wraps
            return f"{TYPES[dst]}(i64({x}))"
        return f"{TYPES[dst]}({x})"
