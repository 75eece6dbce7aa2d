"""A @jit function as the compiler and the interpreter read it: the function, its source and
its parameters (which are `tl.constexpr`), and how a launch's arguments bind to them.

jit.py makes it launchable (`kernel[grid](...)`); the compiler and the interpreter import this
module, not jit.py, which imports them.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ArgumentTypeError
from .language.dtypes import constexpr

# keyword arguments of a launch that are options of Triton's GPU compilation, not parameters
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid",
                  "extern_libs", "debug", "stream", "warmup", "enable_warp_specialization", "num_buffers_warp_spec",
                  "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer")


@dataclass(frozen=True)
class Param:
    name: str
    index: int
    is_constexpr: bool
    default: object = inspect.Parameter.empty
    do_not_specialize: bool = False


def _is_constexpr(annotation) -> bool:
    if annotation is constexpr:
        return True
    return isinstance(annotation, str) and annotation.replace(" ", "").split(".")[-1] == "constexpr"


class KernelFunction:
    def __init__(self, fn: Callable, *, do_not_specialize=(), debug: bool | None = None, noinline: bool = False):
        if not inspect.isfunction(fn):
            raise ArgumentTypeError(f"@triton.jit decorates a function, not {type(fn).__name__}")
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__globals__ = fn.__globals__
        self.debug = debug
        self.noinline = noinline
        try:
            self.src = textwrap.dedent(inspect.getsource(fn))
        except OSError as e:
            raise ArgumentTypeError(f"@triton.jit needs the source of {fn.__qualname__}: {e}") from None
        self.starting_line_number = inspect.getsourcelines(fn)[1]
        self.file = inspect.getsourcefile(fn)
        self.signature = inspect.signature(fn)
        names = list(self.signature.parameters)
        skip = {names[d] if isinstance(d, int) else d for d in do_not_specialize}
        self.params = tuple(Param(p.name, i, _is_constexpr(p.annotation), p.default, p.name in skip)
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
        return dict(bound.arguments), options

    def grid_of(self, grid, bound: dict) -> tuple[int, int, int]:
        if callable(grid):
            grid = grid(dict(bound))
        if isinstance(grid, int):
            grid = (grid,)
        if not isinstance(grid, tuple | list) or not 1 <= len(grid) <= 3:
            raise ArgumentTypeError(f"kernel {self.__name__}: a grid is a tuple of 1 to 3 ints (or a function of "
                                    f"the meta-parameters returning one), got {grid!r}")
        sizes = []
        for g in grid:
            g = g.value if isinstance(g, constexpr) else g
            if not isinstance(g, int) or isinstance(g, bool) or g < 0:
                raise ArgumentTypeError(f"kernel {self.__name__}: grid sizes are ints >= 0, got {grid!r}")
            sizes.append(g)
        return (*sizes, *[1] * (3 - len(sizes)))
