"""The CUDA driver API (cuda.bindings.driver): the device, its primary context, modules, launches.

The device's primary context is the one torch and CuPy use, so memory moves between them and
ember's kernels by pointer. Nothing here runs at import: `device()` initializes the driver the
first time a kernel is loaded or called, and says why when it cannot (DeviceError: the bindings
missing, no driver, no GPU).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass

from ..errors import DeviceError
from ..target import STATIC_SHARED


def driver():
    """The cuda.bindings driver module, or a DeviceError saying how to install it (imported once:
    every launch asks for it)."""
    global _bindings
    if _bindings is None:
        try:
            from cuda.bindings import driver as module
        except ImportError as e:
            raise DeviceError(f"the CUDA driver bindings are not installed ({e}); install ember's cuda extra: "
                              "pip install 'ember[cuda]'") from e
        _bindings = module
    return _bindings


_bindings = None


def check(result, what: str):
    """The values a driver call returned after its status; a DeviceError naming the call and the
    CUDA error when it failed (CUDA_SUCCESS is 0)."""
    if type(result) is not tuple:
        result = (result,)
    if result[0]:
        cu = driver()
        _, name = cu.cuGetErrorName(result[0])
        _, text = cu.cuGetErrorString(result[0])
        raise DeviceError(f"{what} failed: {name.decode() if name else result[0]} ({text.decode() if text else ''})")
    return result[1] if len(result) == 2 else result[1:]


@dataclass(frozen=True)
class Device:
    ordinal: int
    handle: object
    context: object
    name: str
    compute_capability: tuple[int, int]
    shared_per_block: int  # bytes of static shared memory a block may use
    shared_per_block_optin: int  # bytes with the opt-in attribute (dynamic shared memory)
    threads_per_block: int
    multiprocessors: int  # (the grid that fills the GPU once: ember.target.GPU)
    registers_per_block: int

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def activate(self) -> None:
        """Make the primary context current on the calling thread."""
        check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")


@functools.cache
def device(ordinal: int = 0) -> Device:
    """GPU `ordinal` with its primary context retained, or a DeviceError saying why there is none."""
    cu = driver()
    try:
        check(cu.cuInit(0), "cuInit")
    except RuntimeError as e:  # the bindings found no libcuda.so
        raise DeviceError(f"no CUDA driver: {e} (is an NVIDIA driver installed?)") from e
    count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if count <= ordinal:
        raise DeviceError(f"no GPU {ordinal}: the CUDA driver sees {count} device(s)")
    handle = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    context = check(cu.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
    attr = cu.CUdevice_attribute

    def get(a):
        return check(cu.cuDeviceGetAttribute(a, handle), "cuDeviceGetAttribute")

    name = check(cu.cuDeviceGetName(256, handle), "cuDeviceGetName")
    dev = Device(ordinal, handle, context, name.split(b"\0")[0].decode(),
                 (get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                  get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
                 get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
                 get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                 get(attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                 get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                 get(attr.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK))
    dev.activate()
    return dev


def driver_version() -> str:
    v = check(driver().cuDriverGetVersion(), "cuDriverGetVersion")
    return f"{v // 1000}.{v % 1000 // 10}"


class Module:
    """A loaded cubin or PTX and one of its functions."""

    def __init__(self, binary: bytes, symbol: str, dev: Device):
        dev.activate()
        image = ctypes.create_string_buffer(binary, len(binary) + 1)  # PTX is read up to its NUL
        self.module = check(driver().cuModuleLoadData(ctypes.addressof(image)), f"cuModuleLoadData of kernel {symbol}")
        self.function = check(driver().cuModuleGetFunction(self.module, symbol.encode()),
                              f"cuModuleGetFunction of kernel {symbol}")
        self.symbol = symbol

    def opt_in_shared(self, shared: int) -> None:
        """Let the function's launches ask for `shared` bytes of dynamic shared memory (past
        STATIC_SHARED, 48 KiB, a function must opt in)."""
        if shared > STATIC_SHARED:
            cu = driver()
            attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self.function, attribute, shared), f"cuFuncSetAttribute of {self.symbol}")

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], params: int, stream: int = 0,
               shared: int = 0) -> None:
        """Run the function on the parameters packed at address `params` (Params.address) in
        `stream` (0: the legacy default), with `shared` bytes of dynamic shared memory. The driver
        copies the values at the launch, so the slots are free again when it returns."""
        result = driver().cuLaunchKernel(self.function, *grid, *block, shared, stream, params, 0)
        if result[0]:
            check(result, f"launching kernel {self.symbol} (grid {grid}, block {block})")


class Params:
    """A kernel's parameters packed for cuLaunchKernel once (`kernelParams`: the array of the
    addresses of a slot per value, each of its ctypes type): a launch writes its values into the
    slots and passes `address`, which allocates nothing. `Params.mine(local, types)`: the
    calling thread's own, kept in a launcher's threading.local, so that two threads launching
    one kernel never share slots."""

    def __init__(self, types):
        self.slots = [t() for t in types]
        self.array = (ctypes.c_void_p * max(1, len(self.slots)))(*[ctypes.addressof(v) for v in self.slots])
        self.address = ctypes.addressof(self.array)

    def write(self, values) -> int:
        """Put `values` (one per slot, in order) in the slots; their address."""
        for slot, v in zip(self.slots, values):
            slot.value = v
        return self.address

    @staticmethod
    def mine(local: threading.local, types) -> Params:
        params = getattr(local, "params", None)
        if params is None:
            params = local.params = Params(types)
        return params


POINTER, INT64 = ctypes.c_void_p, ctypes.c_int64
