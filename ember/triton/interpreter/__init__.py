"""The tile language's interpreter: a kernel run in Python over NumPy, program by program.

`launch(jit_fn, grid, bound, options)` (what `kernel[grid](...)` calls under EMBER_INTERPRET=1 or
TRITON_INTERPRET=1) turns the arguments into the kernel's values: a tensor argument becomes a
scalar Pointer into its memory (offset 0 is its first element, the reach of its strides is the
span every access is checked against), an int or float a typed scalar Block (int32, int64 or
uint64 by value; float32), a constexpr parameter its plain Python value. Then it calls the
kernel's Python function once per program, x fastest, with the builtins bound to `Semantics`.
The kernel is ordinary Python here: `print` and `breakpoint()` work inside it, and an error
carries a note naming the program it happened in.

Each builtin computes a whole block at once in NumPy: values.py (blocks, pointers and Triton's
typing), constants.py (the builtins' compile-time arguments), program.py (which program runs, for
messages), memory.py (loads, stores, atomics), ops.py (the rest of the builtins). Programs run
one after another, so atomics are trivially atomic and a spin lock is always free when a program
takes it; a program that spins on a lock nobody releases (taken and never given back) would wait
forever, and is a TileError instead.
"""

from __future__ import annotations

import itertools
import traceback

import numpy as np

from ...errors import ArgumentTypeError
from ..args import scalar_dtype, tensor_arg
from ..language.core import semantics
from ..language.dtypes import constexpr, unwrap
from .ops import Semantics
from .program import PACKAGE
from .values import Block, BlockPointer, Buffer, Pointer, np_dtype

__all__ = ["Block", "BlockPointer", "Pointer", "Semantics", "launch"]


def argument(name: str, value):
    """What a kernel sees of a non-constexpr argument."""
    if value is None:
        return None
    if isinstance(value, constexpr):
        return value.value
    if isinstance(value, bool | int | float | np.number | np.bool_):
        try:
            dtype = scalar_dtype(value)
        except ArgumentTypeError as e:
            raise ArgumentTypeError(f"argument '{name}': {e}") from None
        return Block(np.asarray(value, np_dtype(dtype)), dtype)
    tensor = tensor_arg(name, value)
    lo, _ = tensor.span
    return Pointer(np.asarray(0, "int64"), Buffer(name, tensor.flat(), lo, tensor.dtype))


def launch(jit_fn, grid: tuple[int, int, int], bound: dict, options: dict) -> None:
    args = {}
    for param in jit_fn.params:
        value = bound[param.name]
        if param.is_constexpr:
            args[param.name] = unwrap(value)
        else:
            args[param.name] = argument(param.name, value)
    impl = Semantics(jit_fn.__name__, grid)
    with np.errstate(all="ignore"), semantics(impl):
        for z, y, x in itertools.product(*(range(g) for g in reversed(grid))):
            impl.start((x, y, z))
            try:
                jit_fn.fn(**args)
            except Exception as e:
                e.add_note(f"in program ({x}, {y}, {z}) of kernel {jit_fn.__name__} (interpreted){_line(e)}")
                raise


def _line(e: Exception) -> str:
    """", at <file>:<line> `<source>`" of the kernel's innermost frame in the traceback of `e`."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(PACKAGE)]
    return f", at {frames[-1].filename}:{frames[-1].lineno} `{frames[-1].line}`" if frames else ""
