"""A whole model on the loop-IR interpreter (target "python"): slow, exact, no compiler.

The compiler makes the same kernels, memory plan and call program (ember.program) as for C
(ember.compiler), and this module runs them: `InterpretedEntry` runs the program as the C entry
function (ember.codegen.entry) does, called with the very arguments the C entry takes (the
addresses of the inputs, outputs, workspace, offsets, weights and sizes), so `InterpretedModel`
is a CompiledModel in every other respect: the same input checks, symbol binding, workspace
layout and outputs. Each kernel runs as ember.codegen.python renders it, on NumPy arrays over
those addresses. A wrong model result can so be placed: the interpreter is the definition of the
loop IR, the C code its translation.

Control flow runs as the C entry runs it (ember.codegen.entry): the program holds `Branch` and
`Loop` statements around their launches, the loop's iteration number and condition live in
ctypes buffers that `local` references point at, and its slices move each iteration.

A kernel's index out of range (the interpreter's IndexOutOfRange) stops the call as the C entry's
status does: the entry returns INTERRUPTED - 1 - k, k the index of that call, and keeps the index
and the axis size for the calling thread, so the model raises the same IndexOutOfRangeError.

An interpreted model has no library: it cannot be saved or profiled (compile it for "c").
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ..codegen.c import kernel_symbol
from ..codegen.entry import INTERRUPTED
from ..codegen.python import IndexOutOfRange
from ..errors import ConfigError
from ..program import Branch, Copy, Launch, Loop, Program, Ref, numel
from ..tir.stmt import PrimFunc
from .model import CompiledModel
from .module import PythonKernel


class InterpretedEntry:
    """ember_model_run in Python (see the module doc): returns 0, or INTERRUPTED - 1 - k when
    launch k read an index out of range (`index_error()`: that index and its axis size). `funcs`
    holds the lowered kernels by name; `run_call(launch, arrays, sizes)` runs one launch on flat
    arrays over the arguments' bytes (ember.debug.bisect_kernels wraps it)."""

    def __init__(self, program: Program, load: Callable[[PrimFunc], PythonKernel] = PythonKernel):
        """`load(func)`: the kernel that runs func (default: the interpreter's; the CUDA target's
        simulation gives ember.cuda.simt's, GPU semantics)."""
        loaded = {f.name: load(f) for f in program.kernels}
        self.source = "\n\n".join(k.source for k in loaded.values())
        self.funcs = {f.name: f for f in program.kernels}
        self.kernels = {name: k.pyfunc for name, k in loaded.items()}
        self.program = program
        self.run_call = self.interpret
        self.order = program.launches()  # as the C entry numbers them (ember.codegen.entry)
        self._failed = threading.local()

    def interpret(self, call: Launch, arrays: Sequence[np.ndarray], sizes: Sequence[int]) -> None:
        """Run one call's kernel on the interpreter."""
        with np.errstate(all="ignore"):  # wrap-around and overflow are semantics, not errors
            self.kernels[call.kernel](*arrays, *sizes)

    def __call__(self, inputs: int, outputs: int, workspace: int, offsets: int, weights: int, sizes: int,
                 num_threads: int) -> int:
        pointers = {"input": _array_at(inputs, ctypes.c_void_p), "output": _array_at(outputs, ctypes.c_void_p),
                    "weight": _array_at(weights, ctypes.c_void_p)}
        offset, size = _array_at(offsets, ctypes.c_int64), _array_at(sizes, ctypes.c_int64)

        local: dict[int, int] = {}  # local reference -> address

        def address(ref: Ref) -> int:
            if ref.kind == "local":
                return local[ref.index]
            return workspace + offset[ref.index] if ref.kind == "workspace" else pointers[ref.kind][ref.index]

        def byte(ref: Ref) -> int:
            return ctypes.c_uint8.from_address(address(ref)).value

        def run(stmts) -> None:
            for st in stmts:
                match st:
                    case Launch():
                        arrays = [_view(address(a.ref), numel(a.dims, size), np.dtype(a.dtype)) for a in st.args]
                        try:
                            self.run_call(st, arrays, [int(size[r.index]) for r in st.sizes])
                        except IndexOutOfRange as e:
                            e.call = st
                            raise
                    case Copy():
                        ctypes.memmove(address(st.dst), address(st.src), numel(st.dims, size) * st.itemsize)
                    case Branch():
                        run(st.then if byte(st.cond) else st.other)
                    case Loop():
                        i, cond = ctypes.c_int64(0), ctypes.c_uint8(byte(st.cond_in))
                        trips = ctypes.c_int64.from_address(address(st.trips)).value
                        local[st.iteration], local[st.cond] = ctypes.addressof(i), ctypes.addressof(cond)
                        run(st.init)
                        for v in st.carried:
                            local[v.current], local[v.new] = address(v.output), address(v.next)
                        while i.value < trips and cond.value:
                            for sl in st.slices:
                                n = size[sl.length.index] if isinstance(sl.length, Ref) else sl.length
                                at = n - 1 - i.value if sl.reverse else i.value
                                local[sl.local] = address(sl.base) + at * numel(sl.dims, size) * sl.itemsize
                            run(st.body)
                            cond.value = byte(st.cond_out)
                            for v in st.carried:
                                local[v.current], local[v.new] = local[v.new], local[v.current]
                            i.value += 1
                        for v in st.carried:
                            if local[v.current] != address(v.output):
                                ctypes.memmove(address(v.output), local[v.current], numel(v.dims, size) * v.itemsize)

        try:
            run(self.program.body)
        except IndexOutOfRange as e:
            self._failed.index = e.args
            return INTERRUPTED - 1 - next(k for k, c in enumerate(self.order) if c is e.call)
        return 0

    def index_error(self) -> tuple[int, int]:
        """The index out of range, and its axis size, of this thread's latest failed call."""
        return self._failed.index



class InterpretedModel(CompiledModel):
    """A CompiledModel whose entry function is an InterpretedEntry (target "python")."""

    def _open(self, entry: InterpretedEntry):
        self.library = self.library_path = self._library = None
        return entry

    def _call_symbols(self) -> list[str]:
        return [kernel_symbol(call.kernel) for call in self._entry.order]

    def _index_error(self) -> tuple[int, int]:
        return self._entry.index_error()

    def save(self, path):
        raise ConfigError(f"model '{self.name}' runs on the interpreter (target 'python') and has no library to save; "
                          f"compile it with target='c' to save it")

    def profile(self, *inputs, repeat: int = 10):
        raise ConfigError(f"model '{self.name}' runs on the interpreter (target 'python'), which is not profiled; "
                          f"compile it with target='c' to profile its kernels")


def _array_at(address: int, ctype) -> ctypes.Array:
    return ctypes.cast(address, ctypes.POINTER(ctype))


def _view(address: int, numel: int, dtype: np.dtype) -> np.ndarray:
    """The flat array of `numel` elements at `address` (writable: kernels write their outputs)."""
    if numel == 0:
        return np.empty(0, dtype)
    return np.frombuffer((ctypes.c_char * (numel * dtype.itemsize)).from_address(address), dtype)
