"""Where a kernel's device tiles live: each memory's tiles side by side (`layout`), and a
ScheduleError when they do not fit (`check_capacity`)."""

from __future__ import annotations

from ..errors import ScheduleError
from ..tir import dtype as dt
from ..tir.expr import Buffer, as_int
from .spec import Accelerator, memory_of


def layout(accel: Accelerator, buffers) -> dict[Buffer, int]:
    """Each device buffer's first element in its memory: the buffers of one memory side by side,
    in the order given (no two of a kernel share space)."""
    used: dict[str, int] = {}
    out = {}
    for b in buffers:
        m = memory_of(b.scope)
        out[b] = used.get(m.role, 0)
        used[m.role] = out[b] + elements(b)
    return out


def check_capacity(accel: Accelerator, buffers) -> None:
    """A ScheduleError naming the memory, the tiles in it and both sizes when they do not fit."""
    for m in accel.memories:
        mine = [b for b in buffers if b.scope == m.scope]
        need = sum(elements(b) for b in mine) * dt.bits(m.dtype) // 8
        if need > m.bytes:
            tiles = ", ".join(f"{b.name} ({'x'.join(str(as_int(d)) for d in b.shape)} {b.dtype}, "
                              f"{elements(b) * dt.bits(b.dtype) // 8} bytes)" for b in mine)
            raise ScheduleError(f"{m.scope} holds {m.bytes} bytes; the tiles staged in it need {need}: {tiles}. "
                                f"Tile smaller, or compute the stage at an inner loop")


def elements(b: Buffer) -> int:
    """The elements of a device tile (its shape is constant, or a ScheduleError says why not)."""
    n = 1
    for d in b.shape:
        v = as_int(d)
        if v is None:
            raise ScheduleError(f"{b.name} in {b.scope} has a symbolic shape {b.shape}: a device memory holds "
                                f"tiles of constant size")
        n *= v
    return n
