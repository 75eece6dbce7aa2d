"""Where a C kernel's buffers live and how they are read and written: the second layer of the C
renderer (`CBufferRenderer`, over `c_expr` and under `c.CRenderer`).

An allocation's "local" scratch of constant size up to 64 KiB is an aligned stack array, and so is
any buffer of constant size up to 1 KiB (a row's statistics inside a parallel loop: a heap
allocation per row and statistic otherwise); anything else `aligned_alloc`/`free` around its
body. A local buffer that registers.register_lanes promotes is a set of vector variables, one per
vector of it. Contiguous vector accesses are whole-vector loads and stores, others gathers and
scatters; a type held as its bits (c_storage) is copied as its bits, so data movement keeps every
code.
"""

from __future__ import annotations

import functools
import operator

from ..errors import LowerError
from ..tir import dtype as dt
from ..tir.expr import Broadcast, Buffer, BufferLoad, PrimExpr, Ramp, as_int
from ..tir.schedule.cache import DEVICE_SCOPES
from ..tir.stmt import PrimFunc, Stmt
from . import c_runtime
from .c_expr import CExprRenderer
from .c_storage import HELD_AS_BITS, STORAGE
from .common import single_index
from .cstyle import ADD, PRIMARY
from .registers import register_gather, register_lanes, whole_register


class CBufferRenderer(CExprRenderer):
    """The C-style base's hooks of allocation, loads and stores filled with C's: stack, heap and
    register scratch, vector loads, stores, gathers and scatters."""

    STACK_LIMIT = 64 * 1024  # bytes; larger local scratch goes to the heap
    SMALL_LIMIT = 1024  # bytes; a buffer of any scope up to this size goes on the stack

    def _begin_kernel(self, func: PrimFunc) -> None:
        super()._begin_kernel(func)
        self._registers: dict[Buffer, int] = {}  # promoted local buffers -> their vector width

    def _allocate(self, buf: Buffer, body: Stmt, depth: int, out: list[str]) -> None:
        if buf.scope in DEVICE_SCOPES:
            raise LowerError(f"{buf.name} is staged in {buf.scope}, an accelerator's memory: build the kernel "
                             f"for that accelerator (ember.build(..., target=<its ember.accel description>))")
        pad, inner = "  " * depth, "  " * (depth + 1)
        name, ctype = self._name(buf), self.SCALAR_TYPES[buf.dtype]
        dims = [as_int(d) for d in buf.shape]
        count = None if None in dims else functools.reduce(operator.mul, dims, 1)
        nbytes = None if count is None else count * dt.bits(buf.dtype) // 8
        on_stack = nbytes is not None and nbytes <= (self.STACK_LIMIT if buf.scope == "local" else self.SMALL_LIMIT)
        width = register_lanes(buf, body)
        out.append(f"{pad}{{")
        if width is not None:
            vtype = self.lib.vec(dt.element_of(buf.dtype), width)  # float16: half lanes, as in memory
            regs = ", ".join(f"{name}_{k}" for k in range(count // width))
            out.append(f"{inner}{vtype} {regs};  /* {name}: in registers */")
            self._registers[buf] = width
            on_stack = True
        elif on_stack:
            out.append(f"{inner}{ctype} {name}[{max(count, 1)}] __attribute__((aligned({self.align})));")
        else:
            size = self._e(functools.reduce(operator.mul, buf.shape)) if buf.shape else "1"
            out.append(f"{inner}{ctype}* restrict {name} = ({ctype}*)aligned_alloc({self.align}, "
                       f"{c_runtime.padded_bytes(self.lib)}({size}, sizeof({ctype})));")
        self._buffers.add(buf)
        self._stmt(body, depth + 1, out)
        self._buffers.discard(buf)
        if not on_stack:
            out.append(f"{inner}free({name});")
        out.append(f"{pad}}}")

    def _register(self, buf: Buffer, index: PrimExpr) -> str:
        width = self._registers[buf]
        name = self._buffer(buf)
        if whole_register(index, width):
            return f"{name}_{as_int(index.base) // width}"
        if isinstance(index, Ramp):  # lanes of several registers (registers.register_gather)
            return self._register_gather(name, buf.dtype, width, register_gather(index))
        return f"{name}_{as_int(index) // width}[{as_int(index) % width}]"

    def _register_gather(self, name: str, dtype: str, width: int, offsets: list[int]) -> str:
        """A vector of the register elements at `offsets`. The same lane of several registers is
        a column of their tile transposed (CPrelude.column: the C compiler shares the shuffles
        of the transpose between the columns); anything else is composed lane by lane."""
        regs = [o // width for o in offsets]
        lanes = 1 << (len(offsets) - 1).bit_length()  # columns of 3, 5..7 lanes live in vectors of 4, 8
        elem = dt.element_of(dtype)
        if len({o % width for o in offsets}) == 1 and lanes <= width and dt.compute_dtype(elem) == elem \
                and elem != "bool":
            regs += [regs[-1]] * (lanes - len(regs))
            args = ", ".join(f"{name}_{r}" for r in regs)
            return f"{self.lib.column(elem, width, lanes)}({offsets[0] % width}, {args})"
        lanes_text = ", ".join(self._register_lane(elem, f"{name}_{o // width}[{o % width}]") for o in offsets)
        return f"({self.lib.value_vec(dtype, len(offsets))}){{{lanes_text}}}"

    def _register_lane(self, elem: str, lane: str) -> str:
        """A lane of a register as computed: types held as their bits are widened."""
        return STORAGE[elem].lane(self.lib, lane) if elem in HELD_AS_BITS else f"({lane})"

    def _store(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str:
        lanes = dt.lanes_of(index.dtype)
        if buf in self._registers:
            if lanes > 1 and dt.lanes_of(value.dtype) == 1:
                value = Broadcast(value, lanes, dt.with_lanes(value.dtype, lanes))
            return f"{self._register(buf, index)} = {self._to_memory(buf.dtype, lanes, self._e(value))}"
        copy = self._copy(buf, index, value)
        if copy is not None:
            return copy
        if lanes == 1:
            code = self._to_memory(buf.dtype, 1, self._e(value))
            return f"{self._buffer(buf)}[{self._e(index)}] = {code}"
        if dt.lanes_of(value.dtype) == 1:
            value = Broadcast(value, lanes, dt.with_lanes(value.dtype, lanes))
        v = self._mask(value, 8) if buf.dtype == "bool" else self._e(value)
        if _contiguous(index):
            address = f"{self._buffer(buf)} + {self._e(index.base, ADD + 1)}"
            return f"{self.lib.store(buf.dtype, lanes)}({address}, {v})"
        return f"{self.lib.scatter(buf.dtype, lanes)}({self._buffer(buf)}, {self._index_vector(index)}, {v})"

    def _copy(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str | None:
        """A store of a type held as its bits whose value is a load of the same type, as a copy of
        the bits (data movement keeps every code, as NumPy's does, NaN payloads included), or
        None. Vectors move as vectors of the bits: contiguous ones whole, others lane by lane."""
        if buf.dtype not in HELD_AS_BITS or not isinstance(value, BufferLoad) or value.buffer.dtype != buf.dtype \
                or value.buffer in self._registers:
            return None
        src, lanes = single_index(value), dt.lanes_of(index.dtype)
        if lanes == 1 and dt.lanes_of(src.dtype) == 1:
            return f"{self._buffer(buf)}[{self._e(index)}] = {self._buffer(value.buffer)}[{self._e(src)}]"
        if lanes == 1 or dt.lanes_of(src.dtype) != lanes:
            return None
        whole = _power_of_two(lanes)
        if whole and _contiguous(src):
            u = self.lib.unaligned_vec(buf.dtype, lanes)
            bits = f"*(const {u}*)({self._buffer(value.buffer)} + {self._e(src.base, ADD + 1)})"
        else:
            bits = f"{self.lib.gather_bits(buf.dtype, lanes)}({self._buffer(value.buffer)}, {self._index_vector(src)})"
        if whole and _contiguous(index):
            u = self.lib.unaligned_vec(buf.dtype, lanes)
            return f"*({u}*)({self._buffer(buf)} + {self._e(index.base, ADD + 1)}) = {bits}"
        return f"{self.lib.scatter_bits(buf.dtype, lanes)}({self._buffer(buf)}, {self._index_vector(index)}, {bits})"

    def _load(self, buf: Buffer, index: PrimExpr) -> tuple[str, int]:
        lanes = dt.lanes_of(index.dtype)
        name = self._buffer(buf)
        if buf in self._registers:
            code, row = self._register(buf, index), STORAGE[buf.dtype]
            if whole_register(index, self._registers[buf]):  # registers hold elements as in memory
                return row.widen(self.lib, lanes, code), PRIMARY
            return row.load(self.lib, code) if lanes == 1 else (code, PRIMARY)  # a gather widens its lanes
        if lanes == 1:
            return STORAGE[buf.dtype].load(self.lib, f"{name}[{self._e(index)}]")
        if _contiguous(index):
            return f"{self.lib.load(buf.dtype, lanes)}({name} + {self._e(index.base, ADD + 1)})", PRIMARY
        return f"{self.lib.gather(buf.dtype, lanes)}({name}, {self._index_vector(index)})", PRIMARY

    def _index_vector(self, index: PrimExpr) -> str:
        """A vector index as int64 lanes, what gathers and scatters take."""
        if dt.element_of(index.dtype) == "int64":
            return self._e(index)
        return f"__builtin_convertvector({self._e(index)}, {self.lib.vec('int64', dt.lanes_of(index.dtype))})"


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _contiguous(index: PrimExpr) -> bool:
    return isinstance(index, Ramp) and as_int(index.stride) == 1
