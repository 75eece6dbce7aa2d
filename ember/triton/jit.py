"""`@triton.jit`: a kernel written in the tile language, launched as `kernel[grid](*args, **meta)`.

A JITFunction keeps the function, its source and its parameters (which are `tl.constexpr`). A
launch binds the arguments to the parameters (defaults applied; Triton's launch options such as
num_warps and num_stages are accepted and set aside: they do not matter on the CPU), resolves the
grid (a tuple of up to three ints, or a function of the bound arguments that returns one), and
runs the kernel: in the NumPy interpreter when EMBER_INTERPRET (or TRITON_INTERPRET) is set, else
compiled (ember.triton.compiler).
"""

from __future__ import annotations

import inspect
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from .. import config
from ..errors import ArgumentTypeError, TileError
from .language.dtypes import constexpr

# keyword arguments of a launch that are options of Triton's GPU compilation, not parameters
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid",
                  "extern_libs", "debug", "stream", "warmup", "enable_warp_specialization", "num_buffers_warp_spec",
                  "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer")


def interpret() -> bool:
    """Whether kernels run in the interpreter (EMBER_INTERPRET, or Triton's TRITON_INTERPRET)."""
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in config.TRUE:
        return True
    return config.get("interpret")


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


class KernelInterface:
    """`kernel[grid]` gives a launcher: `kernel[grid](*args, **kwargs)` runs the kernel."""

    def run(self, *args, grid, **kwargs):
        raise NotImplementedError

    def __getitem__(self, grid) -> Callable:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)


class JITFunction(KernelInterface):
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
        return f"JITFunction({self.fn.__module__}:{self.fn.__qualname__})"

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

    def run(self, *args, grid, **kwargs):
        bound, options = self.bind(args, kwargs)
        grid = self.grid_of(grid, bound)
        if interpret():
            from .interpreter import launch
        else:
            from .compiler import launch
        return launch(self, grid, bound, options)

    def compile(self, *args, **kwargs):
        """The compiled specialization of these arguments, run nowhere; its `asm` is Triton's
        dict of the kernel's code: {"tir": the loop IR, "c": the C}."""
        from .compiler import prepare

        kwargs.pop("grid", None)
        bound, options = self.bind(args, kwargs)
        return prepare(self, bound, options)[0]

    def ir(self, *args, **kwargs) -> str:
        """The lowered loop IR of the kernel for these arguments (`kernel.ir(x, y, n, BLOCK=64)`)."""
        return self.compile(*args, **kwargs).asm["tir"]

    def source(self, *args, **kwargs) -> str:
        """The C of the kernel for these arguments."""
        return self.compile(*args, **kwargs).asm["c"]

    def __call__(self, *args, **kwargs):
        """A call from inside another kernel (a nested @jit function): in the interpreter it runs
        the function; the compiler inlines it. A direct call from Python is a mistake."""
        from .language.core import _active

        if getattr(_active, "impl", None) is None:
            raise TileError(f"{self.__name__} is a @triton.jit kernel: launch it as {self.__name__}[grid](...)")
        return self.fn(*args, **kwargs)


def jit(fn=None, *, version=None, repr=None, launch_metadata=None, do_not_specialize=(),
        do_not_specialize_on_alignment=(), debug=None, noinline=False):
    """`@triton.jit` or `@triton.jit(do_not_specialize=[...], debug=True)`."""
    def decorate(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline)

    return decorate(fn) if fn is not None else decorate
