"""A @jit function as the compiler and the interpreter read it: the function, its source and
its parameters (which are `tl.constexpr`, and the types scalar ones are declared with: `n:
tl.int32`), and how a launch's arguments bind to them: a value its declared type cannot hold (a
float for an int) is refused as Triton's launcher refuses it, and a grid past CUDA's limits
(GRID_LIMITS) too; and the target a launch compiles for (`launch_target`): the launch's `target=`
option, else the kernel's own (`@jit(target=...)`), else "cuda" when an argument is a GPU tensor,
else "c".

jit.py makes it launchable (`kernel[grid](...)`); the compiler and the interpreter import this
module, not jit.py, which imports them.
"""

from __future__ import annotations

import inspect
import numbers
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentTypeError
from ..target import Target, as_target
from .args import on_device
from .language import dtypes as tld
from .language.dtypes import constexpr, unwrap

# keyword arguments of a launch that are options of its compilation (Triton's GPU ones, and
# ember's `target`), not parameters
LAUNCH_OPTIONS = ("target", "num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                  "launch_cooperative_grid", "extern_libs", "debug", "stream", "warmup", "enable_warp_specialization",
                  "num_buffers_warp_spec", "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer")
# the most programs along each grid axis: CUDA's limits, which Triton's launches have (a larger grid
# would run for days on the CPU, and one past 2**63 programs in all would overflow the flat index)
GRID_LIMITS = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class Param:
    name: str
    index: int
    is_constexpr: bool
    default: object = inspect.Parameter.empty
    do_not_specialize: bool = False
    declared: tld.dtype | None = None  # a scalar parameter's declared type (`n: tl.int32`)


# Triton's short names of the types a scalar parameter may be declared with (`n: "i32"`)
_SHORT = {"i1": "int1", **{f"{p}{w}": f"{n}{w}" for p, n in (("i", "int"), ("u", "uint")) for w in (8, 16, 32, 64)},
          "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}


def _declared(annotation) -> tld.dtype | None:
    """The type an annotation declares (`tl.int32`, "tl.int32", "i32"), or None: as in Triton,
    any other annotation (`int`, `torch.Tensor`) declares nothing."""
    if isinstance(annotation, tld.dtype) and not annotation.is_pointer:
        return annotation
    if isinstance(annotation, str):
        name = annotation.replace(" ", "").split(".")[-1]
        return tld.DTYPES.get(_SHORT.get(name, name))
    return None


def _check_declared(kernel: str, p: Param, value) -> None:
    """A value for a parameter declared `p.declared`, as Triton's launcher converts it: an int
    type takes an integer in its range (a float is refused, not truncated), a float type a number."""
    value = unwrap(value)
    d = p.declared
    if d.is_floating():
        ok = isinstance(value, numbers.Real)
    elif isinstance(value, numbers.Integral):
        info = (0, 1) if d.is_bool() else (np.iinfo(d.numpy).min, np.iinfo(d.numpy).max)
        ok = info[0] <= int(value) <= info[1]
    else:
        ok = False
    if not ok:
        what = f"{type(value).__name__} {value!r}" if np.isscalar(value) else f"a {type(value).__name__}"
        raise ArgumentTypeError(f"kernel {kernel}: parameter '{p.name}' is declared {d.name}, got {what}")


def _is_constexpr(annotation) -> bool:
    if annotation is constexpr:
        return True
    return isinstance(annotation, str) and annotation.replace(" ", "").split(".")[-1] == "constexpr"


class KernelFunction:
    def __init__(self, fn: Callable, *, do_not_specialize=(), debug: bool | None = None, noinline: bool = False,
                 target: str | Target | None = None):
        if not inspect.isfunction(fn):
            raise ArgumentTypeError(f"@triton.jit decorates a function, not {type(fn).__name__}")
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__globals__ = fn.__globals__
        self.debug = debug
        self.noinline = noinline
        self.target = None if target is None else as_target(target)  # the kernel's own (a bad one fails here)
        try:
            self.src = textwrap.dedent(inspect.getsource(fn))
        except OSError as e:
            raise ArgumentTypeError(f"@triton.jit needs the source of {fn.__qualname__}: {e}") from None
        self.starting_line_number = inspect.getsourcelines(fn)[1]
        self.file = inspect.getsourcefile(fn)
        self.signature = inspect.signature(fn)
        names = list(self.signature.parameters)
        skip = {names[d] if isinstance(d, int) else d for d in do_not_specialize}
        self.params = tuple(Param(p.name, i, _is_constexpr(p.annotation), p.default, p.name in skip,
                                  _declared(p.annotation))
                            for i, p in enumerate(self.signature.parameters.values()))
        self.arg_names = [p.name for p in self.params]
        self.constexprs = [p.index for p in self.params if p.is_constexpr]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fn.__module__}:{self.fn.__qualname__})"

    def bind(self, args: tuple, kwargs: dict) -> tuple[dict, dict]:
        """(the parameters' values by name, in order; the launch options given)."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTIONS and k not in self.arg_names}
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentTypeError(f"kernel {self.__name__}{self.signature}: {e}") from None
        bound.apply_defaults()
        for p in self.params:
            if p.declared is not None:
                _check_declared(self.__name__, p, bound.arguments[p.name])
        return dict(bound.arguments), options

    def launch_target(self, options: dict, values=()) -> Target:
        """The target a launch with these options and argument values compiles for: its
        `target=`, else the kernel's own, else "cuda" when an argument is in a GPU's memory (a
        torch CUDA tensor, CuPy), else "c"."""
        target = options.get("target")
        if target is None and self.target is None and any(on_device(v) for v in values):
            target = "cuda"
        return as_target(target if target is not None else self.target or "c")

    def grid_of(self, grid, bound: dict | None) -> tuple[int, int, int]:
        """The launch's grid as three sizes, checked; `grid` a function of the bound arguments
        (`bound`) or a tuple."""
        if callable(grid):
            grid = grid(dict(bound))
        if type(grid) is tuple and len(grid) == 1 and type(grid[0]) is int and 0 <= grid[0] <= GRID_LIMITS[0]:
            return grid[0], 1, 1  # (the common grid: checked at once)
        if isinstance(grid, int):
            grid = (grid,)
        if not isinstance(grid, tuple | list) or not 1 <= len(grid) <= 3:
            raise ArgumentTypeError(f"kernel {self.__name__}: a grid is a tuple of 1 to 3 ints (or a function of "
                                    f"the meta-parameters returning one), got {grid!r}")
        sizes = []
        for axis, g in enumerate(grid):
            g = unwrap(g)
            if not isinstance(g, int) or isinstance(g, bool) or g < 0:
                raise ArgumentTypeError(f"kernel {self.__name__}: grid sizes are ints >= 0, got {grid!r}")
            if g > GRID_LIMITS[axis]:
                raise ArgumentTypeError(f"kernel {self.__name__}: grid {tuple(grid)!r} has {g} programs along axis "
                                        f"{axis}, more than the {GRID_LIMITS[axis]} CUDA and Triton allow")
            sizes.append(g)
        return (*sizes, *[1] * (3 - len(sizes)))
