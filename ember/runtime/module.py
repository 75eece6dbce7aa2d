"""Callable kernels: a lowered `PrimFunc` built for a target, called on NumPy arrays.

`build_c(func)` generates C, builds (or finds in the cache) its shared library and loads it with
ctypes, by its content (ember.runtime.library); `build_c_module(funcs)` puts several kernels in
one library; `build_python(func)` runs the loop-IR interpreter instead. A `Kernel` is called with
one array per parameter, in order; outputs are written in place. Every call first checks its
arguments (`runtime.args`); `prepare` checks once and returns a launcher without checks, which is
what `bench` times.

Threads: a C kernel is called through its launcher (ember.codegen.c), which runs it on the
kernel's `num_threads` OpenMP threads (0: the calling thread's setting) and gives the calling
thread its own setting back when it returns, as a model's call does: building or calling a
kernel never changes the thread count of the caller (torch.set_num_threads sets the same one).
In a child of fork, calls from the thread that forked run on one OpenMP thread (ember.runtime.fork;
a launcher from `prepare` asks the thread it is prepared on).

Options read: num_threads (the `num_threads` keyword's default; `config.threads` holds it, and
OMP_NUM_THREADS, to what the machine can run), checked (a kernel takes a status flag and raises
ZeroDivisionError after a call that divided an integer by zero), and through `build_library`:
cc, cflags, cache_dir, keep_source.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence

import numpy as np

from .. import config
from ..codegen.c import codegen_c, launcher_symbol, takes_status
from ..codegen.python import IndexOutOfRange, codegen_python, load_python
from ..errors import IndexOutOfRangeError
from ..target import Target
from ..tir.stmt import PrimFunc
from . import fork
from .args import Signature
from .bench import BenchResult, bench
from .build import build_library
from .library import open_library


class Kernel:
    """A built kernel: `func` (the lowered function), `name`, and the generated `source`."""

    target = ""

    def __init__(self, func: PrimFunc, source: str):
        self.func = func
        self.name = func.name
        self.source = source
        self.signature = Signature(func)

    def __call__(self, *arrays: np.ndarray) -> None:
        self.prepare(*arrays)()

    def prepare(self, *arrays: np.ndarray) -> Callable[[], None]:
        """Check the arguments once; return a function that runs the kernel on them."""
        return self._launcher(arrays, self.signature.bind(arrays))

    def bench(self, *arrays: np.ndarray, **options) -> BenchResult:
        """Time the kernel on these arrays (options: those of `runtime.bench.bench`)."""
        return bench(self, *arrays, **options)

    def _launcher(self, arrays: Sequence[np.ndarray], sizes: list[int]) -> Callable[[], None]:
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


class CKernel(Kernel):
    """A kernel compiled to native code; `library` is the loaded shared library, `num_threads`
    the OpenMP threads of each call (0: the calling thread's setting)."""

    target = "c"
    num_threads = config.ThreadCount()

    def __init__(self, func: PrimFunc, source: str, library: ctypes.CDLL, checked: bool = False,
                 num_threads: int = 0):
        super().__init__(func, source)
        self.library = library  # keeps the library loaded as long as the kernel lives
        self.checked = checked
        self.status = takes_status(func, checked=checked)  # (checked, or it checks indices)
        self.num_threads = num_threads
        self._cfunc = getattr(library, launcher_symbol(func.name))
        self._cfunc.argtypes = [ctypes.c_void_p] * len(func.params) + [ctypes.c_int64] * len(func.size_vars) \
            + [ctypes.c_void_p] * self.status + [ctypes.c_int]
        self._cfunc.restype = None

    def __call__(self, *arrays: np.ndarray) -> None:
        launch = self.prepare(*arrays)
        launch()
        if launch.status[0] == 2:
            raise _index_error(self.name, *launch.status[1:])
        if launch.status[0]:
            raise ZeroDivisionError(f"kernel {self.name}: integer division or modulo by zero (built with "
                                    f"checked=True; unchecked, x // 0 and x % 0 give 0, as in numpy)")

    @property
    def path(self) -> str:
        """The shared library on disk (its content-addressed copy in the cache folder)."""
        return self.library._name

    def _launcher(self, arrays, sizes):
        status = np.zeros(3, np.int64)  # this launcher's own (ember.codegen.entry), so concurrent calls stay apart
        launch = functools.partial(self._cfunc, *[a.ctypes.data for a in arrays], *sizes,
                                   *[status.ctypes.data] * self.status, fork.threads(self._num_threads))
        launch.arrays = tuple(arrays)  # the pointers stay valid as long as the launcher lives
        launch.status = status
        return launch


class PythonKernel(Kernel):
    """A kernel run by the loop-IR interpreter (NumPy): slow, exact, needs no compiler."""

    target = "python"

    def __init__(self, func: PrimFunc, source: str | None = None, pyfunc: Callable | None = None):
        """`source` and `pyfunc`: another rendering of func and what runs it (default: codegen_python's)."""
        source = codegen_python(func) if source is None else source
        super().__init__(func, source)
        self.pyfunc = load_python(source, func) if pyfunc is None else pyfunc  # on flat arrays, then sizes

    def _launcher(self, arrays, sizes):
        pyfunc, args = self.pyfunc, [a.reshape(-1) for a in arrays] + sizes

        def run():
            with np.errstate(all="ignore"):  # wrap-around and overflow are semantics, not errors
                try:
                    pyfunc(*args)
                except IndexOutOfRange as e:
                    raise _index_error(self.name, *e.args) from None

        return run


def _index_error(kernel: str, index: int, size: int) -> IndexOutOfRangeError:
    return IndexOutOfRangeError(f"kernel {kernel}: index {index} is out of range for an axis of size {size} "
                                f"(valid: {-size} to {size - 1})", int(index), int(size))


def build_c(func: PrimFunc, *, cc: str | None = None, cflags: str | Sequence[str] | None = None,
            checked: bool | None = None, num_threads: int | None = None, align: int = Target.align) -> CKernel:
    """Compile one lowered function to a native kernel."""
    return build_c_module([func], cc=cc, cflags=cflags, checked=checked, num_threads=num_threads,
                          align=align)[func.name]


def build_c_module(funcs: Sequence[PrimFunc], *, cc: str | None = None, cflags: str | Sequence[str] | None = None,
                   checked: bool | None = None, num_threads: int | None = None,
                   align: int = Target.align) -> dict[str, CKernel]:
    """Compile several lowered functions into one library; their kernels by function name.
    `checked` (default: the option): a call that divides an integer by zero raises
    ZeroDivisionError (the kernel gives the same results). `num_threads` (default: the option;
    0: the calling thread's setting): the OpenMP threads of each call. `align`: the target's
    alignment of the kernels' own buffers (ember.target)."""
    checked = config.get("checked") if checked is None else bool(checked)
    num_threads = config.threads(num_threads)  # checked before anything is compiled
    source = codegen_c(funcs, checked=checked, align=align)
    library = open_library(build_library(source, cc=cc, cflags=cflags)).handle
    return {f.name: CKernel(f, source, library, checked, num_threads) for f in funcs}


def build_python(func: PrimFunc) -> PythonKernel:
    """The loop-IR interpreter's kernel for a lowered function."""
    return PythonKernel(func)
