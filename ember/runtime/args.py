"""Checking the arguments of a kernel call against its parameters, and binding its sizes.

`Signature(func).bind(arrays)` is the one place that does it, for every kind of kernel. In order:
the number of arguments; that each is a numpy.ndarray of its parameter's dtype, C-contiguous and
of its rank; that arrays the kernel writes are writable and overlap no other argument (kernels
take `restrict` pointers); then shapes. Each size variable is bound from the first dimension that
determines it (`n`, `n + 1`, `n - 1`, `2 * n`), then every dimension is evaluated and compared with
the array's. `bind` returns the sizes in `func.size_vars` order, what a kernel takes after its
pointers. Every failure raises ArgumentTypeError or ShapeError naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..codegen.common import written_buffers
from ..errors import ArgumentTypeError, ShapeError
from ..tir import dtype as dt
from ..tir.expr import Binary, Cast, Const, PrimExpr, Var
from ..tir.stmt import PrimFunc

_INT_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max,
}


class Signature:
    """What a kernel expects of its arguments, prepared once per kernel."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.names = [b.name for b in func.params]
        self.dtypes = [dt.to_numpy(b.dtype) for b in func.params]
        self.shapes = [b.shape for b in func.params]
        written = written_buffers(func)
        self.written = [b in written for b in func.params]
        self.size_vars = func.size_vars
        # (argument, dimension, variable, size -> value of the variable or None)
        self._solvers = [(i, k, *s) for i, shape in enumerate(self.shapes)
                         for k, d in enumerate(shape) if (s := _solver(d)) is not None]

    def bind(self, arrays: Sequence) -> list[int]:
        """Check `arrays` (see the module doc) and return the kernel's size arguments."""
        if len(arrays) != len(self.names):
            raise ArgumentTypeError(f"{self.func.name} takes {len(self.names)} arguments "
                                    f"({', '.join(self.names)}), got {len(arrays)}")
        for i, a in enumerate(arrays):
            self._check_array(i, a)
        self._check_writes(arrays)
        env = self._bind_sizes(arrays)
        for i, a in enumerate(arrays):
            for k, d in enumerate(self.shapes[i]):
                want = evaluate(d, env)
                if a.shape[k] != want:
                    how = "" if isinstance(d, Const) else f" ({d} with {_show(env)})"
                    raise ShapeError(
                        f"argument '{self.names[i]}' dimension {k}: expected {want}{how}, got {a.shape[k]} "
                        f"(shape {a.shape}, expected {_shape_str(self.shapes[i])})"
                    )
        return [env[v] for v in self.size_vars]

    def _check_array(self, i: int, a) -> None:
        name = self.names[i]
        if not isinstance(a, np.ndarray):
            raise ArgumentTypeError(
                f"argument {i + 1} ('{name}') must be a numpy.ndarray, got {type(a).__name__}")
        if a.dtype != self.dtypes[i]:
            raise ArgumentTypeError(f"argument '{name}' has dtype {a.dtype}, expected {self.dtypes[i]}")
        if not a.flags.c_contiguous:
            raise ArgumentTypeError(f"argument '{name}' is not C-contiguous (row-major); "
                                    f"pass np.ascontiguousarray({name})")
        if a.ndim != len(self.shapes[i]):
            raise ShapeError(f"argument '{name}' has {a.ndim} dimensions, expected {len(self.shapes[i])} "
                             f"(shape {_shape_str(self.shapes[i])})")

    def _check_writes(self, arrays: Sequence[np.ndarray]) -> None:
        for i, a in enumerate(arrays):
            if not self.written[i]:
                continue
            if not a.flags.writeable:
                raise ArgumentTypeError(
                    f"argument '{self.names[i]}' is read-only, but {self.func.name} writes it")
            for j, b in enumerate(arrays):
                if j != i and np.may_share_memory(a, b):
                    raise ArgumentTypeError(
                        f"arguments '{self.names[i]}' and '{self.names[j]}' share memory, but "
                        f"{self.func.name} writes '{self.names[i]}' and assumes its arguments do not "
                        f"overlap; pass a copy"
                    )

    def _bind_sizes(self, arrays: Sequence[np.ndarray]) -> dict[Var, int]:
        env: dict[Var, int] = {}
        source: dict[Var, tuple[int, int]] = {}
        for i, k, var, solve in self._solvers:
            got = arrays[i].shape[k]
            value = solve(got)
            where = f"argument '{self.names[i]}' (dimension {k})"
            if value is None or value < 0:
                raise ShapeError(f"{where} has size {got}, which gives no valid size {var.name} "
                                 f"for {self.shapes[i][k]}")
            if var not in env:
                env[var], source[var] = value, (i, k)
            elif env[var] != value:
                i0, k0 = source[var]
                raise ShapeError(f"size {var.name} is {env[var]} from argument '{self.names[i0]}' "
                                 f"(dimension {k0}) but {value} from {where}")
        for v in self.size_vars:
            if v not in env:
                raise ShapeError(f"cannot infer size {v.name} of {self.func.name}: no parameter has a "
                                 f"dimension {v.name}, {v.name} + c, {v.name} - c or c * {v.name}")
        return env


def _solver(d: PrimExpr) -> tuple[Var, Callable[[int], int | None]] | None:
    """The variable a dimension determines, and how to get it from the size of the dimension."""
    match d:
        case Var():
            return d, lambda n: n
        case Binary("+", Var() as v, Const(int(c))) | Binary("+", Const(int(c)), Var() as v):
            return v, lambda n: n - c
        case Binary("-", Var() as v, Const(int(c))):
            return v, lambda n: n + c
        case Binary("*", Var() as v, Const(int(c))) | Binary("*", Const(int(c)), Var() as v) if c > 0:
            return v, lambda n: n // c if n % c == 0 else None
    return None


def evaluate(e: PrimExpr, env: dict[Var, int]) -> int:
    """The int value of a shape expression with its variables bound by `env`."""
    match e:
        case Const(value):
            return int(value)
        case Var():
            return env[e]
        case Binary(op, a, b) if op in _INT_OPS:
            return _INT_OPS[op](evaluate(a, env), evaluate(b, env))
        case Cast(_, v):
            return evaluate(v, env)
    raise ShapeError(f"cannot evaluate the shape expression {e}")


def _shape_str(shape) -> str:
    return f"({', '.join(str(d) for d in shape)}{',' if len(shape) == 1 else ''})"


def _show(env: dict[Var, int]) -> str:
    return ", ".join(f"{v.name}={n}" for v, n in env.items())
