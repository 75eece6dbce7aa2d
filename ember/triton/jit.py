"""`@triton.jit`: a kernel written in the tile language, launched as `kernel[grid](*args, **meta)`.

A JITFunction is a KernelFunction (function.py: the function, its source, its parameters and
how arguments bind to them) that can be launched: a launch binds the arguments (defaults
applied; Triton's launch options such as num_warps and num_stages are accepted and set aside:
they do not matter on the CPU), resolves the grid (a tuple of up to three ints, or a function of
the bound arguments that returns one), and runs the kernel: in the NumPy interpreter when
EMBER_INTERPRET (or TRITON_INTERPRET) is set, else compiled (ember.triton.compiler) for the
launch's target: its `target=` option (`kernel[grid](x, n, target=Target.x86("avx2"))`), else the
kernel's own (`@jit(target=...)`), else "c".
A launch of the same signature as an earlier one skips the binding and the specialization
(compiler/relaunch.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import config
from ..errors import TileError
from . import compiler, interpreter
from .compiler import relaunch
from .function import KernelFunction
from .language.core import _active


def interpret() -> bool:
    """Whether kernels run in the interpreter (EMBER_INTERPRET, or Triton's TRITON_INTERPRET)."""
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in config.TRUE:
        return True
    return config.get("interpret")


class KernelInterface:
    """`kernel[grid]` gives a launcher: `kernel[grid](*args, **kwargs)` runs the kernel."""

    def run(self, *args, grid, **kwargs):
        raise NotImplementedError

    def __getitem__(self, grid) -> Callable:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)


class JITFunction(KernelFunction, KernelInterface):
    """A @jit function, launchable: `kernel[grid](*args, **meta)`."""

    def run(self, *args, grid, **kwargs):
        done = relaunch.again(self, args, kwargs, grid)  # a launch like an earlier one: its fast path
        if done is not None:
            return done
        bound, options = self.bind(args, dict(kwargs))  # (bind takes the options out of its dict)
        grid = self.grid_of(grid, bound)
        if interpret():
            return interpreter.launch(self, grid, bound, options)
        target = self.launch_target(options, bound.values())
        compiled = compiler.launch(self, grid, bound, options, target)
        relaunch.remember(self, args, kwargs, bound, options, compiled, target)
        return compiled

    def compile(self, *args, **kwargs):
        """The compiled specialization of these arguments (and launch options: `target=`), run
        nowhere; its `asm` is Triton's dict of the kernel's code: {"tir": the loop IR, "c": the C}."""
        kwargs.pop("grid", None)
        bound, options = self.bind(args, kwargs)
        return compiler.prepare(self, bound, options, self.launch_target(options, bound.values()))[0]

    def ir(self, *args, **kwargs) -> str:
        """The lowered loop IR of the kernel for these arguments (`kernel.ir(x, y, n, BLOCK=64)`)."""
        return self.compile(*args, **kwargs).asm["tir"]

    def source(self, *args, **kwargs) -> str:
        """The C of the kernel for these arguments."""
        return self.compile(*args, **kwargs).asm["c"]

    def __call__(self, *args, **kwargs):
        """A call from inside another kernel (a nested @jit function): in the interpreter it runs
        the function; the compiler inlines it. A direct call from Python is a mistake."""
        if getattr(_active, "impl", None) is None:
            raise TileError(f"{self.__name__} is a @triton.jit kernel: launch it as {self.__name__}[grid](...)")
        return self.fn(*args, **kwargs)


def jit(fn=None, *, version=None, repr=None, launch_metadata=None, do_not_specialize=(),
        do_not_specialize_on_alignment=(), debug=None, noinline=False, target=None):
    """`@triton.jit` or `@triton.jit(do_not_specialize=[...], debug=True, target="c")` (`target`:
    what the kernel compiles for unless a launch names another; "c" when None)."""
    def decorate(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline, target=target)

    return decorate(fn) if fn is not None else decorate
