"""Tile kernels (ember.triton) on the GPU: their CUDA C and their launch.

A tile kernel's loop-IR function (ember.triton.compiler.cuda's Emitter: programs bound to
blockIdx.x, block statements to threadIdx.x) takes its scalar arguments as one-element buffers
and its grid's sizes as int64 sizes, as the CPU's launcher does. On the GPU the scalars are
passed by value: the function is rendered as a `__device__` body, and the kernel is a wrapper
taking each scalar by value and passing the body its address (inlined, the address is the
value). Its scratch takes its scopes (ember.cuda.scopes) and barriers (ember.cuda.sync) as any
GPU kernel's, and the block's shared memory is checked against what a block of the target's GPU
may opt in to (`GPU.shared_opt_in`: 227 KiB on sm_90, 163 KiB on sm_80).

`TileLauncher` launches the flattened grid as blocks of the kernel's threads through the driver
API, on the stream it is given. The launch stays asynchronous unless the kernel has checks (the
debug mode, `tl.device_assert`): then its spans and status word go to the GPU, and the launch
waits to read the status back. Which GPU and stream, and that every argument is there, is the
caller's (ember.backends.cuda).
"""

from __future__ import annotations

import ctypes
import functools
import operator
import re
import threading

import numpy as np

from ..errors import ArgumentTypeError, ScheduleError
from ..target import GPU
from ..tir import dtype as dt
from ..tir.expr import Var, as_int
from ..tir.stmt import PrimFunc, Stmt
from . import driver as cuda_driver
from .codegen import CUDARenderer
from .driver import INT64, POINTER, Module, Params, check
from .kernel import prepare
from .launch_shape import threads_per_block
from .limits import MAX_GRID
from .nvrtc import compile_cuda
from .streams import torch_stream

SCALARS = "tile_scalars"  # the function's attribute: the names of its scalar parameters
MULTIPLES = "tile_multiples"  # those of them the specialization says are multiples of 16 (assumed so)
SHARED = "ember_shared"  # the kernel's dynamic shared memory, which its shared blocks are carved from
_LAUNCH = re.compile(r"/\* block (\d+)x(\d+)x(\d+), dynamic shared memory (\d+) bytes \*/")
_CTYPES = {"bool": ctypes.c_bool, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
           "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
           "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class TileRenderer(CUDARenderer):
    """A tile kernel as a `__device__` body and a `__global__` wrapper taking scalars by value;
    its shared blocks are carved, 32-byte aligned (a swizzled tile: on a 128-byte line, ember.cuda.swizzle),
    from dynamic shared memory (a tile kernel's blocks outgrow the 48 KiB of static shared memory: a
    64x128 float32 accumulator is 32 KiB), each scope's blocks freed at its end; the unit says how
    many bytes the launch asks for, at most what a block of `gpu` may opt in to."""

    def __init__(self, gpu: GPU):
        super().__init__(gpu)
        self.gpu = gpu

    def _begin_kernel(self, func: PrimFunc) -> None:
        super()._begin_kernel(func)
        self._shared_top = self._shared_bytes = 0
        self._shared_align = 32
        self._shared_names: list[str] = []

    def _allocate(self, buf, body: Stmt, depth: int, out: list[str]) -> None:
        if buf.scope != "shared":
            super()._allocate(buf, body, depth, out)
            return
        align = self._alignment.get(buf.name, 32)  # (a swizzled tile's line: ember.cuda.swizzle)
        pad, base = "  " * depth, -(-self._shared_top // align) * align
        ctype = self.SCALAR_TYPES[buf.dtype]
        size = functools.reduce(operator.mul, [as_int(d) for d in buf.shape], 1) * dt.bits(buf.dtype) // 8
        self._shared_align = max(self._shared_align, align)
        top, self._shared_top = self._shared_top, base + -(-size // 32) * 32
        self._shared_bytes = max(self._shared_bytes, self._shared_top)
        self._shared_names.append(buf.name)
        out.append(f"{pad}{{")
        out.append(f"{pad}  {ctype}* __restrict__ {self._name(buf)} = reinterpret_cast<{ctype}*>({SHARED} + {base});")
        self._buffers.add(buf)
        self._stmt(body, depth + 1, out)
        self._buffers.discard(buf)
        out.append(f"{pad}}}")
        self._shared_top = top

    def _prologue(self, func: PrimFunc) -> list[str]:
        if not self._shared_bytes:
            return []
        return [f"  extern __shared__ __align__({self._shared_align}) unsigned char {SHARED}[];"]

    def _signature(self, func: PrimFunc, params: list[str]) -> str:
        scalars = set(dict(func.attrs).get(SCALARS, ()))
        multiples = set(dict(func.attrs).get(MULTIPLES, ()))
        symbol = self.symbol(func)
        outer, inner, assumed = [], [], []
        for b, text in zip(func.params, params):
            if b.name in scalars:
                value = self._name(Var(f"{b.name}_value", b.dtype))
                outer.append(f"{self.SCALAR_TYPES[b.dtype]} {value}")
                inner.append(f"&{value}")
                if b.name in multiples:
                    assumed.append(f"  __builtin_assume(({value} & 15) == 0);\n")
            else:
                outer.append(text)
                inner.append(self._name(b))
        outer += params[len(func.params):]
        inner += [self._name(v) for v in func.size_vars]
        self._wrapper = (f'extern "C" __global__ void __launch_bounds__({threads_per_block(self._dims)}) '
                         f"{symbol}({', '.join(outer)}) {{\n{''.join(assumed)}  {symbol}_body({', '.join(inner)});\n}}")
        return f"static __device__ __forceinline__ void {symbol}_body({', '.join(params)})"

    def _index_type(self, var) -> str:
        """int: a tile kernel's loops count threads, a block's elements, the grid's programs
        (fewer than 2^31) and its own ranges (int32 in Triton)."""
        return "int" if var.dtype in ("int64", "int32") else self.SCALAR_TYPES[var.dtype]

    def _atomic(self, name: str, args) -> str:
        """Triton's atomics are acquire-release at the GPU's scope (its default `sem`), CUDA's are
        relaxed: a fence before (what this block wrote is seen first: the release of a lock) and
        after (what it reads next is not older: the acquire)."""
        fenced = self._helper("ember_fenced", "template <typename T> static __device__ __forceinline__ T "
                                              "ember_fenced(T v) { __threadfence(); return v; }")
        return f"{fenced}((__threadfence(), {super()._atomic(name, args)}))"

    def render_kernel(self, func: PrimFunc) -> str:
        text = super().render_kernel(func)
        if self._shared_bytes > self.gpu.shared_opt_in:
            raise ScheduleError(f"kernel {func.name} keeps {self._shared_bytes} bytes of blocks in shared memory "
                                f"({', '.join(self._shared_names)}): past the {self.gpu.shared_opt_in} bytes a block "
                                f"may have on {self.gpu.arch}; use smaller blocks")
        block = "x".join(str(self._dims.get(f"threadIdx.{a}", 1)) for a in "xyz")
        return f"/* block {block}, dynamic shared memory {self._shared_bytes} bytes */\n{text}\n\n{self._wrapper}"


def render_tile(func: PrimFunc, gpu: GPU) -> str:
    """The CUDA C unit of a lowered tile kernel for the target's `gpu` (the module doc)."""
    return TileRenderer(gpu).render_unit(prepare(func))


class TileLauncher:
    """A tile kernel compiled for `arch` (NVRTC); loaded on the GPU at its first launch. Its
    parameters are packed once per thread (driver.Params); a launch writes the addresses, scalars
    and grid into them."""

    def __init__(self, source: str, name: str, arch: str):
        self.source, self.name, self.arch = source, name, arch
        self.binary = compile_cuda(source, arch)
        *block, shared = (int(x) for x in _LAUNCH.search(source).groups())
        self.block, self.shared = tuple(block), shared
        self.symbol = TileRenderer.symbol_of(name)
        self._module = None
        self._local = threading.local()  # this thread's packed parameters
        self._types = None  # each parameter's ctypes type (fixed by the first launch: a specialization's)

    def __call__(self, pointers: list[int], scalars: list[tuple[object, str]], spans: list[int], sites: int,
                 grid: tuple[int, int, int], ordinal: int, stream: int) -> int:
        """Launch over `grid` on GPU `ordinal` (pointers: the tensors' device addresses; scalars:
        (value, dtype)); the status word (0, or the number of the failed check) when the kernel
        has checks, else 0 without waiting."""
        self.typed(len(pointers), [d for _, d in scalars])
        values = [*pointers, *(v for v, _ in scalars)]
        if not sites:
            self.direct(values, grid, stream, ordinal)
            return 0
        cu = cuda_driver.driver()
        spans_array = np.array(spans or [0], dtype=np.int64)
        memory = check(cu.cuMemAlloc(spans_array.nbytes + 8), "cuMemAlloc")
        try:
            check(cu.cuMemsetD8(memory, 0, 8), "cuMemsetD8")
            check(cu.cuMemcpyHtoD(int(memory) + 8, spans_array.ctypes.data, spans_array.nbytes), "cuMemcpyHtoD")
            self.direct(values, grid, stream, ordinal, status=int(memory))
            check(cu.cuStreamSynchronize(cu.CUstream(stream)), f"kernel {self.name}")
            status = np.zeros(1, dtype=np.int64)
            check(cu.cuMemcpyDtoH(status.ctypes.data, memory, 8), "cuMemcpyDtoH")
        finally:
            cu.cuMemFree(memory)
        return int(status[0])

    def typed(self, tensors: int, scalar_dtypes: list[str]) -> TileLauncher:
        """The launcher, its parameters' ctypes types set (a specialization's: a pointer per tensor,
        its scalars', the checks' two pointers, the grid's sizes)."""
        if self._types is None:
            self._types = [*[POINTER] * tensors, *(_CTYPES[d] for d in scalar_dtypes), POINTER, POINTER,
                           INT64, INT64, INT64]
        return self

    def direct(self, values: list, grid: tuple[int, int, int], stream: int | None, ordinal: int = 0,
               torch: bool = False, status: int = 0) -> None:
        """Launch on `values` (the tensors' addresses, then the scalars) over `grid` in `stream`
        (None: torch's current stream of the GPU when `torch`, else the default one); `status`:
        the device address of the status word, the spans after it (0: the kernel has no checks).
        Its parameters' types are set (`typed`)."""
        blocks = grid[0] * grid[1] * grid[2]
        if not blocks:
            return
        if blocks > MAX_GRID["blockIdx.x"]:
            raise ArgumentTypeError(f"kernel {self.name}: a grid of {grid} is {blocks} programs, more than the "
                                    f"2^31 - 1 blocks of a launch")
        if stream is None:
            stream = torch_stream(ordinal) if torch else 0
        dev = cuda_driver.device(ordinal)
        dev.activate()
        if self._module is None:
            self._module = Module(self.binary, self.symbol, dev)
            self._module.opt_in_shared(self.shared)
        params = Params.mine(self._local, self._types)
        address = params.write([*values, status + 8 if status else 0, status, *grid])
        self._module.launch((blocks, 1, 1), self.block, address, int(stream), self.shared)
