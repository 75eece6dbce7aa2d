"""What one block of a kernel may use on the GPU it is built for, and the check of a kernel
against it: threads per block (and per index), shared memory per block, local memory per
thread, registers.

The limits are the target's GPU facts (ember.target.GPU: the device's driver attributes where
the machine has a GPU, else its architecture's row of ember.target.ARCHS): `limits_for(arch, gpu)`
gives the target's `gpu` when it is of `arch`, else the device's when the machine has a GPU of
that architecture, else the architecture's. A kernel's static shared arrays may take
STATIC_SHARED (48 KiB) on every GPU; a kernel whose shared arrays are dynamic (ember.cuda.launch_shape.
DYNAMIC) may have the bytes a block opts in to (`GPU.shared_opt_in`: 227 KiB on sm_90, 163 KiB on
sm_80, 99 KiB on sm_86 and sm_89). Each check is a ScheduleError naming the limit, the kernel and
the architecture. Registers are not checked: the kernel's `__launch_bounds__` makes
the compiler fit a block's registers in the GPU's (spilling to local memory if it must); they are
known once NVRTC has compiled the kernel (`CUDAKernel.registers`, what the tuner's features read):
`cubin_registers` reads them from the cubin's .nv.info sections (EIATTR_REGCOUNT; a unit holds
one kernel); a PTX build has none yet (the driver compiles it at load).
"""

from __future__ import annotations

import struct

import numpy as np

from ..errors import DeviceError, ScheduleError
from ..target import GPU, LOCAL_PER_THREAD, sm
from ..tir import dtype as dt
from ..tir.expr import as_int
from ..tir.functor import visit_stmt
from ..tir.stmt import BLOCK_TAGS, Allocate, PrimFunc
from . import fragments
from .launch_shape import dynamic_shared, threads_per_block

MAX_GRID = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}
MAX_BLOCK = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}


def limits_for(arch: str, gpu: GPU | None = None) -> GPU:
    """The facts a kernel built for `arch` is checked against (see the module doc)."""
    from .driver import device

    if gpu is not None and gpu.arch == sm(arch):
        return gpu
    try:
        dev = device()
    except DeviceError:
        return GPU.of(arch)
    return device_gpu(dev) if dev.arch == sm(arch) else GPU.of(arch)


def device_gpu(dev) -> GPU:
    """A device's facts (ember.cuda.driver.Device: its driver attributes) as a Target holds them."""
    return GPU(dev.multiprocessors, dev.shared_per_block, dev.threads_per_block, dev.shared_per_block_optin,
               dev.registers_per_block, dev.arch)


def shared_bytes(func: PrimFunc) -> tuple[int, list[str]]:
    """The bytes of shared memory a kernel declares, and the names of its shared buffers."""
    return _declared(func, lambda scope: scope == "shared")


def local_bytes(func: PrimFunc) -> tuple[int, list[str]]:
    """The bytes of the arrays each thread of a kernel declares (local memory, or registers where
    they fit and are indexed by constants), and their names."""
    return _declared(func, lambda scope: scope not in ("shared", fragments.SCOPE))


def _declared(func: PrimFunc, in_scope) -> tuple[int, list[str]]:
    """The bytes and names of the buffers the kernel allocates in the scopes `in_scope` accepts."""
    found: list = []
    visit_stmt(func.body, lambda s: found.append(s.buffer) if isinstance(s, Allocate)
               and in_scope(s.buffer.scope) else None)
    total = sum(int(np.prod([as_int(d) for d in b.shape])) * dt.bits(b.dtype) // 8 for b in found)
    return total, [b.name for b in found]


def check_limits(func: PrimFunc, dims: dict[str, int], limits: GPU) -> None:
    """A ScheduleError naming the limit a kernel's launch, shared or local memory is past (the
    driver would refuse its launch)."""
    threads = threads_per_block(dims)
    if threads > limits.threads_per_block:
        raise ScheduleError(f"kernel {func.name} binds {threads} threads per block "
                            f"({', '.join(f'{t}={n}' for t, n in dims.items() if t not in BLOCK_TAGS)}): "
                            f"past the limit of {limits.threads_per_block} threads per block ({limits.arch})")
    for tag, n in dims.items():
        limit = MAX_GRID.get(tag) or MAX_BLOCK[tag]
        if n > limit:
            raise ScheduleError(f"kernel {func.name} binds {n} to {tag}: past the limit of {limit} for {tag}")
    total, names = shared_bytes(func)
    if dynamic_shared(func):
        if total > limits.shared_opt_in:
            raise ScheduleError(f"kernel {func.name} keeps {total} bytes in shared memory ({', '.join(names)}): past "
                                f"the limit of {limits.shared_opt_in} bytes of dynamic shared memory a "
                                f"block may opt in to ({limits.arch})")
    elif total > limits.shared_per_block:
        raise ScheduleError(f"kernel {func.name} declares {total} bytes of shared memory ({', '.join(names)}): "
                            f"past the limit of {limits.shared_per_block} bytes of static shared memory per "
                            f"block ({limits.arch})")
    total, names = local_bytes(func)
    if total > LOCAL_PER_THREAD:
        raise ScheduleError(f"kernel {func.name} declares {total} bytes of arrays per thread ({', '.join(names)}): "
                            f"past the limit of {LOCAL_PER_THREAD} bytes of local memory per thread "
                            f"({limits.arch}); a stage computed whole in every thread rather than at its thread?")


EIATTR_REGCOUNT = 0x2F


def cubin_registers(cubin: bytes) -> int | None:
    """The registers a thread of the cubin's kernel takes (EIATTR_REGCOUNT in its .nv.info
    sections), or None where the binary is not an ELF cubin (PTX) or does not say."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # 64-bit ELF only
        return None
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + k * shentsize) for k in range(shnum)]
    names_at = sections[shstrndx][4]

    def name(off: int) -> bytes:
        return cubin[names_at + off:cubin.index(b"\0", names_at + off)]

    for sh_name, _, _, _, offset, size in sections:
        if name(sh_name).startswith(b".nv.info"):
            at, end = offset, offset + size
            while at + 4 <= end:
                fmt, attr = cubin[at], cubin[at + 1]
                if fmt == 0x04:  # EIFMT_SVAL: a 16-bit size, then the value
                    (length,) = struct.unpack_from("<H", cubin, at + 2)
                    if attr == EIATTR_REGCOUNT:
                        return struct.unpack_from("<II", cubin, at + 4)[1]  # (symbol index, count)
                    at += 4 + length
                else:  # EIFMT_NVAL, BVAL, HVAL: two bytes, then two bytes of value or none
                    at += 4 if fmt in (0x02, 0x03) else 2
    return None
