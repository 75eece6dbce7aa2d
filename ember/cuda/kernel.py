"""One GPU kernel: lowered, checked against the GPU's limits, rendered, compiled, launched.

`build_cuda(func)` takes a lowered function whose loops are bound to blocks and threads
(`sch.bind`), gives its scratch a scope (ember.cuda.scopes), inserts its barriers
(ember.cuda.sync), checks the launch against the target's limits, renders CUDA C and compiles it
with NVRTC for the target GPU's architecture (the device's, else ember.target.DEFAULT_ARCH's, so a
machine without a GPU still compiles every kernel). The kernel it
returns takes, per buffer, a torch CUDA tensor, a CuPy array or anything with
`__cuda_array_interface__` (used in place, no copy) or a NumPy array (copied to the GPU and, when
the kernel writes it, back). It runs on `stream=` when given, else on torch's current stream
when an argument is a torch tensor, else on the default stream; NumPy arguments make the call
synchronous. The driver is first touched at the first call: no driver or no GPU is a DeviceError
then, never at import or build.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import numpy as np

from .. import config
from ..codegen.common import written_buffers
from ..errors import ArgumentTypeError, ShapeError
from ..target import GPU, Target
from ..tir.expr import as_int
from ..tir.stmt import PrimFunc
from . import driver as cuda_driver
from .checks import check_status
from .codegen import CUDARenderer
from .driver import INT64, POINTER, Module, Params, check
from .fragment_epilogue import fragment_epilogues
from .grid import Grid
from .lane_runs import lane_runs
from .launch_shape import launch_dims
from .limits import check_limits, cubin_registers, limits_for
from .nvrtc import compile_cuda
from .pipeline import pipeline
from .private import privatize
from .scopes import infer_scopes
from .streams import torch_stream
from .swizzle import swizzle_tiles
from .sync import insert_syncs


def build_cuda(func: PrimFunc, *, arch: str | None = None, ptx: bool = False, debug: bool | None = None,
               gpu: GPU | None = None) -> CUDAKernel:
    """A GPU kernel of one lowered function (see the module doc). `gpu`: the target's GPU facts
    (ember.target.GPU: what the code may use, the block limits the kernel is checked against;
    default: Target("cuda")'s, the device's, else DEFAULT_ARCH's); `arch`: the architecture to
    compile for (default: gpu's; another's facts are its own, ember.cuda.limits); `ptx`: ship
    PTX, which the driver compiles for its device at load; `debug` (default: the debug option,
    EMBER_DEBUG): every access to a parameter checked against its size as the kernel runs
    (ember.cuda.checks)."""
    func = prepare(func)
    dims = launch_dims(func)
    gpu = Target("cuda").gpu if gpu is None else gpu
    arch = gpu.arch if arch is None else arch
    gpu = limits_for(arch, gpu)
    check_limits(func, dims, gpu)
    renderer = CUDARenderer(gpu, debug=config.get("debug") if debug is None else debug)
    source = renderer.render_unit(func)
    return CUDAKernel(func, source, compile_cuda(source, arch, ptx=ptx), dims, arch,
                      aligned=renderer.vector_buffers & set(func.params), checks=renderer.checks,
                      shared=renderer.shared_bytes)


def prepare(func: PrimFunc) -> PrimFunc:
    """A lowered GPU kernel as the GPU runs it: a Tensor Core product's epilogue computed from its
    fragments where its schedule asks (ember.cuda.fragment_epilogue), its scratch given scopes (ember.cuda.scopes), a
    thread's part of a row kept in registers shrunk to that part (ember.cuda.private), its
    pipelined loops given their stages (ember.cuda.pipeline), the tiles of its swizzling Tensor Core
    calls swizzled (ember.cuda.swizzle), its barriers (ember.cuda.sync)."""
    return insert_syncs(swizzle_tiles(pipeline(lane_runs(privatize(infer_scopes(fragment_epilogues(func)))))))


class CUDAKernel:
    """A compiled GPU kernel: `f(*arrays, stream=None)`; `f.source` is its CUDA C, `f.binary` the
    cubin (or PTX), `f.grid` and `f.block` its launch, `f.registers` a thread's registers (None
    for PTX); `aligned`: the parameters it reads or writes 16 bytes at a time, whose addresses
    must be multiples of 16; `shared`: the bytes of dynamic shared memory its launch asks for
    (ember.cuda.launch_shape.DYNAMIC; past 48 KiB, the function opts in when loaded). `to_json()` and
    `restore(record, binary, source)`: what launching it needs, without its loop IR (a saved
    model's kernels, ember.cuda.artifact; `func` None)."""

    target = "cuda"

    def __init__(self, func: PrimFunc, source: str, binary: bytes, dims: dict[str, int], arch: str,
                 aligned: set = frozenset(), checks: bool = False, shared: int = 0):
        self.func, self.name, self.source, self.binary, self.arch = func, func.name, source, binary, arch
        self.shared = shared
        self.checks = checks  # it checks accesses as it runs: each call waits for it and reports
        self.aligned = frozenset(aligned)
        self.params = [b.name for b in func.params]
        self._aligned_at = [k for k, b in enumerate(func.params) if b in self.aligned]
        self.grid_of = Grid(func, dims)  # the blocks of a launch, from its sizes where they are symbolic
        self.grid = self.grid_of.static  # (None: symbolic)
        self.block = tuple(dims.get(f"threadIdx.{a}", 1) for a in "xyz")
        self.symbol = CUDARenderer.symbol(func)
        self.registers = cubin_registers(binary)
        self._module = None
        self._open()

    def _open(self) -> None:
        """What launching needs beyond the record: the size parameters' count, the per-thread
        packed parameters, the arguments' expected shapes (worked out at the first call)."""
        self._sizes = len(self.func.size_vars) if self.func is not None else 0
        self._local = threading.local()
        self._types = None  # each parameter's ctypes type (set at the first launch)
        self._want = None

    def to_json(self) -> dict:
        return {"name": self.name, "symbol": self.symbol, "arch": self.arch, "params": self.params,
                "aligned": self._aligned_at, "checks": self.checks, "block": list(self.block),
                "grid": self.grid_of.to_json(), "shared": self.shared}

    @classmethod
    def restore(cls, record: dict, binary: bytes, source: str) -> CUDAKernel:
        """The kernel `to_json` described, on its cubin (or PTX) and CUDA C."""
        k = cls.__new__(cls)
        k.func, k.name, k.source, k.binary, k.arch = None, record["name"], source, binary, record["arch"]
        k.checks, k.params, k._aligned_at = record["checks"], list(record["params"]), list(record["aligned"])
        k.shared = record.get("shared", 0)  # (a model saved before dynamic shared memory: none)
        k.aligned = frozenset(k.params[i] for i in k._aligned_at)
        k.grid_of = Grid.from_json(record["grid"])
        k.grid, k.block, k.symbol = k.grid_of.static, tuple(record["block"]), record["symbol"]
        k.registers, k._module = cubin_registers(binary), None
        k._open()
        return k

    def __repr__(self):
        return f"<CUDAKernel {self.name} grid={self.grid} block={self.block} {self.arch}>"

    def __call__(self, *arrays, stream: int | None = None) -> None:
        if len(arrays) != len(self.params):
            raise ArgumentTypeError(f"kernel {self.name} takes {len(self.params)} arrays, got {len(arrays)}")
        if self._sizes:
            names = ", ".join(v.name for v in self.func.size_vars)
            raise ArgumentTypeError(f"kernel {self.name} has symbolic sizes ({names}): a compiled model launches it "
                                    f"with the sizes it binds; build it with static shapes to call it alone")
        dev = cuda_driver.device()
        dev.activate()
        cu = cuda_driver.driver()
        wants = self._wants()
        torch = sys.modules.get("torch")
        tensor = torch.Tensor if torch is not None else ()  # (nothing is an instance of no type)
        copies, pointers, uses_torch = [], [], False
        try:
            for k, (want, a) in enumerate(zip(wants, arrays)):
                if isinstance(a, tensor) and a.is_cuda:  # (its own address, since the interface has no bfloat16)
                    _check(want, a.shape, torch_dtype_name(a.dtype), a.is_contiguous(), k, self.name)
                    pointers.append(a.data_ptr())
                    uses_torch = True
                elif isinstance(a, np.ndarray):
                    _check(want, a.shape, a.dtype.name, a.flags.c_contiguous, k, self.name)
                    ptr = check(cu.cuMemAlloc(max(a.nbytes, 1)), "cuMemAlloc")
                    copies.append((ptr, a, k))
                    check(cu.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
                    pointers.append(int(ptr))
                else:
                    pointers.append(_device_pointer(want, a, k, self.name))
            if stream is None:
                stream = torch_stream(dev.ordinal) if uses_torch else 0
            self.launch(pointers, stream)
            if copies:
                check(cu.cuStreamSynchronize(cu.CUstream(stream)), f"kernel {self.name}")
                written = written_buffers(self.func)
                for ptr, a, k in copies:
                    if self.func.params[k] in written:
                        check(cu.cuMemcpyDtoH(a.ctypes.data, ptr, a.nbytes), "cuMemcpyDtoH")
        finally:
            for ptr, _, _ in copies:
                cu.cuMemFree(ptr)

    def _wants(self) -> list[tuple[tuple[int, ...], str, str]]:
        """Per parameter (its shape, its dtype, its name): what an argument must be, worked out once."""
        if self._want is None:
            self._want = [(tuple(as_int(d) for d in b.shape), b.dtype, b.name) for b in self.func.params]
        return self._want

    def launch(self, pointers: Sequence[int], stream: int = 0, sizes: Sequence[int] = (), report: bool = True) -> None:
        """Run on the device addresses `pointers` (one per parameter, checked for the 16-byte
        alignment of `aligned`) and the size arguments `sizes` (the grid computed from them,
        ember.cuda.grid; no launch where they leave no block) in `stream`, the driver's context
        current; loaded on first use, its parameters packed once per thread (driver.Params). A
        kernel that checks accesses waits for the launch and raises what it found, or with
        `report=False` leaves that to `report` (a model reads its kernels' checks once, after
        its call)."""
        for k in self._aligned_at:
            if pointers[k] % 16:
                raise ArgumentTypeError(f"kernel {self.name}: argument {k} ({self.params[k]}) is at an address that is "
                                        f"not a multiple of 16; the kernel accesses it 16 bytes at a time (a view "
                                        f"at an offset: pass a copy)")
        if self._module is None:
            self._module = Module(self.binary, self.symbol, cuda_driver.device())
            self._module.opt_in_shared(self.shared)
        grid = self.grid or self.grid_of(sizes)
        if 0 in grid:
            return
        if self._types is None:  # (a kernel's launches pass it the same sizes: those it names)
            self._types = [*[POINTER] * len(pointers), *[INT64] * len(sizes)]
        params = Params.mine(self._local, self._types)
        self._module.launch(grid, self.block, params.write([*pointers, *sizes]), int(stream), self.shared)
        if report:
            self.report(stream)

    def report(self, stream: int) -> None:
        """What the kernel's checks found in the launches on `stream` so far (waiting for them),
        raised; nothing for a kernel without checks or not launched yet."""
        if self.checks and self._module is not None:
            check_status(self._module, self.name, self.params, cuda_driver.driver().CUstream(stream))


def _check(want: tuple[tuple[int, ...], str, str], shape, dtype: str, contiguous: bool, k: int, name: str) -> None:
    """An argument of `shape`, `dtype` (its name) and layout against parameter k's (shape, dtype, name)."""
    shape_of, dtype_of, param = want
    if shape != shape_of:  # (a tuple, or a torch.Size: one)
        raise ShapeError(f"kernel {name}: argument {k} ({param}) has shape {tuple(shape)}, expected {shape_of}")
    if dtype != dtype_of:
        raise ArgumentTypeError(f"kernel {name}: argument {k} ({param}) is {dtype}, expected {dtype_of}")
    if not contiguous:
        raise ArgumentTypeError(f"kernel {name}: argument {k} ({param}) is not contiguous (row-major)")


def _device_pointer(want: tuple[tuple[int, ...], str, str], a, k: int, name: str) -> int:
    """The device address of a GPU array given by its __cuda_array_interface__, checked against
    parameter k's (shape, dtype, name)."""
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None:
        raise ArgumentTypeError(f"kernel {name}: argument {k} ({want[2]}) is a {type(a).__name__}; a CUDA kernel "
                                f"takes GPU arrays (torch CUDA tensors, CuPy, __cuda_array_interface__) or NumPy")
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    contiguous = strides is None or tuple(strides) == tuple(
        int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
    _check(want, shape, dtype.name, contiguous, k, name)
    return int(cai["data"][0])


_TORCH_NAMES: dict = {}  # a torch dtype's name in ember ("torch.float32" -> "float32"; every call asks)


def torch_dtype_name(dtype) -> str:
    """A torch dtype's name in ember ("float32"), looked up once per dtype."""
    name = _TORCH_NAMES.get(dtype)
    if name is None:
        name = _TORCH_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name
