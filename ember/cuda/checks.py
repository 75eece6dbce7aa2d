"""Checks a GPU kernel makes as it runs, reported after its launch: every index read from a
tensor (the loop IR's INDEX intrinsic: gather, embedding, scatters), always, as C's ember_index
does; and in debug mode (EMBER_DEBUG, or the build option debug=True) every access to a global
buffer against that buffer's size, as the tile language's debug mode does.

A check that fails records the first failure in the unit's `__device__ ember_status[4]` (what
failed, the index, the size, which parameter) and the access goes to element 0, so the kernel
runs on without faulting. A kernel with checks makes its call synchronous: after the launch (a
model's kernels: after the model's call, a replayed CUDA graph's too) the host reads the status,
clears it, and raises an IndexOutOfRangeError naming the kernel (an
index read from a tensor) or a DeviceError naming the kernel, the buffer, the index and its
size (an access out of bounds).
"""

from __future__ import annotations

import ctypes

from ..errors import DeviceError, IndexOutOfRangeError

STATUS = "ember_status"
INDEX_FAILED, OUT_OF_BOUNDS = 2, 3

SOURCE = f"""__device__ unsigned long long {STATUS}[4];
static __device__ __noinline__ int64_t ember_check_failed(unsigned long long code, int64_t i, int64_t n,
                                                          int64_t what) {{
  if (atomicCAS(&{STATUS}[0], 0ull, code) == 0ull) {{
    {STATUS}[1] = (unsigned long long)i;
    {STATUS}[2] = (unsigned long long)n;
    {STATUS}[3] = (unsigned long long)what;
  }}
  return 0;
}}
static __device__ __forceinline__ int64_t ember_index(int64_t i, int64_t n) {{
  const int64_t w = i < 0 ? i + n : i;
  return (uint64_t)w < (uint64_t)n ? w : ember_check_failed({INDEX_FAILED}ull, i, n, -1);
}}
static __device__ __forceinline__ int64_t ember_in_bounds(int64_t i, int64_t n, int64_t what) {{
  return (uint64_t)i < (uint64_t)n ? i : ember_check_failed({OUT_OF_BOUNDS}ull, i, n, what);
}}"""


def raise_failure(kernel: str, params: list[str], status) -> None:
    """The error a kernel's status (four int64: what, index, size, parameter) says, if any."""
    what, index, size, param = (int(x) for x in status)
    if what == INDEX_FAILED:
        raise IndexOutOfRangeError(f"kernel {kernel}: index {index} is out of range for an axis of size {size} "
                                   f"(valid: {-size} to {size - 1})", index, size)
    if what == OUT_OF_BOUNDS:
        raise DeviceError(f"kernel {kernel} accessed {params[param]}[{index}], outside its {size} elements "
                          f"(debug mode's bounds check)")


def check_status(module, kernel: str, params: list[str], stream) -> None:
    """After a launch: wait for it, read and clear the status, raise what it says."""
    from .driver import check, driver

    cu = driver()
    check(cu.cuStreamSynchronize(stream), f"kernel {kernel}")
    address, _ = check(cu.cuModuleGetGlobal(module.module, STATUS.encode()), "cuModuleGetGlobal")
    status = (ctypes.c_int64 * 4)()
    check(cu.cuMemcpyDtoH(ctypes.addressof(status), address, ctypes.sizeof(status)), "cuMemcpyDtoH")
    if status[0]:
        check(cu.cuMemsetD8(address, 0, ctypes.sizeof(status)), "cuMemsetD8")
        raise_failure(kernel, params, list(status))
