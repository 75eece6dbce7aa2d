"""The builtins that touch memory: load and store (through pointers or block pointers), and
the atomics.

Every access is checked: the active lanes' element offsets must lie in the argument's reachable
span, or the access is a TileError naming the argument, the offset, the program and the kernel's
line (nothing is read or written then). Atomics apply lane by lane and return the old values, as
in Triton; programs run one at a time, so they are atomic, and a program spinning on a lock that
no other program can release is an error instead of a hang.
"""

from __future__ import annotations

import numpy as np

from ...errors import TileError
from ..language import dtypes as tld
from ..language.dtypes import unwrap
from .constants import int_of, shape_of
from .program import Program
from .values import Block, BlockPointer, Pointer, as_block

SPIN_LIMIT = 10_000  # failed atomic_cas in a row on one address that make a deadlock


class Memory(Program):
    """Loads, stores, block pointers and atomics, checked against the arguments' spans."""

    def _access(self, pointer: Pointer, mask, op: str) -> tuple[np.ndarray, np.ndarray]:
        """(the flat indices, the active lanes) of an access through `pointer`, checked."""
        if not isinstance(pointer, Pointer):
            raise TileError(f"{self._where()}: tl.{op} needs a pointer (a tensor argument plus offsets), "
                            f"got {pointer!r}")
        offsets = pointer.value
        if mask is None:
            active = np.ones(offsets.shape, bool)
        else:
            mask = as_block(mask, f"tl.{op} mask")
            try:
                active = np.broadcast_to(mask.value.astype(bool), offsets.shape)
            except ValueError:
                raise TileError(f"{self._where()}: the mask of shape {list(mask.shape)} does not broadcast to the "
                                f"pointers' shape {list(offsets.shape)}") from None
        buf = pointer.buffer
        index = offsets - buf.lo
        bad = active & ((index < 0) | (index >= buf.flat.shape[0]))
        if bad.any():
            lane = np.unravel_index(int(np.flatnonzero(bad)[0]), offsets.shape) if offsets.ndim else ()
            raise TileError(f"{self._where()}: tl.{op} out of bounds of argument '{buf.name}': element offset "
                            f"{int(offsets[lane])} (at index {tuple(int(i) for i in lane)} of the block) is outside "
                            f"the argument's elements [{buf.lo}, {buf.hi}); mask the access (mask=...)")
        return np.where(active, index, 0), active

    def _writable(self, pointer: Pointer, op: str):
        if not pointer.buffer.flat.flags.writeable:
            raise TileError(f"{self._where()}: tl.{op} into argument '{pointer.buffer.name}', which is read-only")

    def load(self, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
             eviction_policy="", volatile=False):
        if isinstance(pointer, BlockPointer):
            if mask is not None or other is not None:
                raise TileError(f"{self._where()}: a block pointer's load takes boundary_check and padding_option, "
                                f"not mask and other")
            pointer, mask, other = self._block_access(pointer, boundary_check, unwrap(padding_option))
        index, active = self._access(pointer, mask, "load")
        buf = pointer.buffer
        value = buf.flat[index]
        if not active.all():
            fill = 0 if other is None else as_block(other, "tl.load other").cast(buf.dtype).value
            value = np.where(active, value, fill).astype(buf.flat.dtype)
        return Block(np.asarray(value), buf.dtype)

    def store(self, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
        if isinstance(pointer, BlockPointer):
            if mask is not None:
                raise TileError(f"{self._where()}: a block pointer's store takes boundary_check, not mask")
            pointer, mask, _ = self._block_access(pointer, boundary_check, "")
        index, active = self._access(pointer, mask, "store")
        self._writable(pointer, "store")
        value = self._values(pointer, value, "store")
        pointer.buffer.flat[index[active]] = value[active]

    def _values(self, pointer: Pointer, value, op: str) -> np.ndarray:
        value = as_block(value, f"tl.{op} value").cast(pointer.buffer.dtype)
        try:
            return np.broadcast_to(value.value, pointer.value.shape)
        except ValueError:
            raise TileError(f"{self._where()}: tl.{op}: values of shape {list(value.shape)} do not broadcast to the "
                            f"pointers' shape {list(pointer.shape)}") from None

    def _block_access(self, bp: BlockPointer, boundary_check, padding: str):
        pointers, index = bp.pointers()
        checks = unwrap(boundary_check)
        checks = (checks,) if isinstance(checks, int) else tuple(unwrap(c) for c in checks or ())
        mask = None
        for d in checks:
            if not 0 <= d < len(bp.shape):
                raise TileError(f"{self._where()}: boundary_check names dimension {d} of a "
                                f"{len(bp.shape)}-dimensional block pointer")
            inside = (index[d] >= 0) & (index[d] < bp.shape[d])
            mask = inside if mask is None else mask & inside
        if padding not in ("", "zero", "nan"):
            raise TileError(f"{self._where()}: padding_option is 'zero' or 'nan', got {padding!r}")
        if padding == "nan" and not bp.dtype.element_ty.is_floating():
            raise TileError(f"{self._where()}: padding 'nan' needs a floating-point tensor")
        mask = None if mask is None else Block(np.broadcast_to(mask, bp.block_shape), tld.int1)
        return pointers, mask, (float("nan") if padding == "nan" else None)

    def make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        if not isinstance(base, Pointer) or base.value.ndim:
            raise TileError(f"{self._where()}: make_block_ptr needs a scalar pointer as its base")
        block_shape = shape_of(block_shape, "make_block_ptr block_shape")
        shape, strides, offsets, order = (tuple(int_of(v, f"make_block_ptr {what}") for v in unwrap(vs))
                                          for what, vs in (("shape", shape), ("strides", strides),
                                                           ("offsets", offsets), ("order", order)))
        if not len(shape) == len(strides) == len(offsets) == len(block_shape):
            raise TileError(f"{self._where()}: make_block_ptr: shape, strides, offsets and block_shape need the "
                            f"same length")
        return BlockPointer(base, shape, strides, offsets, block_shape, order)

    def advance(self, base, offsets):
        if not isinstance(base, BlockPointer):
            raise TileError(f"{self._where()}: tl.advance needs a block pointer (tl.make_block_ptr)")
        deltas = tuple(int_of(o, "tl.advance offset") for o in unwrap(offsets))
        if len(deltas) != len(base.offsets):
            raise TileError(f"{self._where()}: tl.advance needs {len(base.offsets)} offsets, got {len(deltas)}")
        return base.advanced(deltas)

    def _atomic(self, op: str, pointer, val, mask, update, cmp=None):
        """Apply `update(old, new[, cmp])` element by element; the old values come back, as in Triton.
        Programs run one at a time, so every atomic is atomic."""
        index, active = self._access(pointer, mask, op)
        self._writable(pointer, op)
        lanes = np.flatnonzero(active)
        at = index.reshape(-1)[lanes]
        new = self._values(pointer, val, op).reshape(-1)[lanes]
        extra = () if cmp is None else (self._values(pointer, cmp, op).reshape(-1)[lanes],)
        flat = pointer.buffer.flat
        before = flat[at].copy()
        if np.unique(at).size == at.size:  # no two lanes on one element: all at once
            flat[at] = update(before, new, *extra)
        else:  # lane by lane, each seeing the writes of the ones before
            for k, i in enumerate(at):
                before[k] = flat[i]
                flat[i] = update(before[k], new[k], *(e[k] for e in extra))
        old = np.zeros(pointer.value.shape, flat.dtype)
        old.reshape(-1)[lanes] = before
        return Block(old, pointer.buffer.dtype)

    def atomic_add(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_add", pointer, val, mask, np.add)

    def atomic_max(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_max", pointer, val, mask, np.maximum)

    def atomic_min(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_min", pointer, val, mask, np.minimum)

    def atomic_and(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_and", pointer, val, mask, np.bitwise_and)

    def atomic_or(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_or", pointer, val, mask, np.bitwise_or)

    def atomic_xor(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_xor", pointer, val, mask, np.bitwise_xor)

    def atomic_xchg(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_xchg", pointer, val, mask, lambda old, new: new)

    def atomic_cas(self, pointer, cmp, val, sem=None, scope=None):
        old = self._atomic("atomic_cas", pointer, val, None, lambda old, new, c: np.where(old == c, new, old),
                           cmp=cmp)
        self._check_spin(pointer, old, cmp)
        return old

    def _check_spin(self, pointer: Pointer, old: Block, cmp) -> None:
        """A program spinning on a lock that no other program can release (programs run one at a
        time here, so one that waits waits forever) is an error, not a hang: SPIN_LIMIT failures
        in a row of one atomic_cas on one address."""
        if (old.value == as_block(cmp).cast(old.dtype).value).any():
            self.failed_cas = (None, 0)
            return
        address = (pointer.buffer.name, pointer.value.tobytes())
        count = self.failed_cas[1] + 1 if self.failed_cas[0] == address else 1
        self.failed_cas = (address, count)
        if count >= SPIN_LIMIT:
            raise TileError(f"{self._where()}: tl.atomic_cas on argument '{pointer.buffer.name}' failed {count} times "
                            f"in a row: in the interpreter programs run one at a time, so no other program can "
                            f"release what this one waits for (a lock taken and never released, or a program "
                            f"waiting for a later one)")

