"""A CUDA kernel's wide accesses in CUDA C, as ember.cuda.vectors finds them: a 4-lane loop as
16-byte loads and one 16-byte store, a 2-lane pair store as one half2/bfloat162/float2 store, and
a pipelined loop's copies from global to shared memory as `cp.async` (16 bytes, or one 4-byte
element: a transposed panel's), zero-filled where a padded tile's condition fails.
"""

from __future__ import annotations

from ..codegen.common import single_index
from ..tir.expr import Buffer, BufferLoad, PrimExpr, Ramp, Var, const
from ..tir.expr_functor import substitute
from ..tir.stmt import BufferStore, For
from .vectors import PAIRS, VECTOR_TYPES, zero_filled


class VectorRendering:
    """The CUDA renderer's wide accesses (a part of ember.cuda.codegen.CUDARenderer)."""

    def _word_copy(self, store: BufferStore):
        """(its index, the load, the load's index, the condition it is read on or None) where
        `store`, in a pipelined loop's copies, copies one 4-byte element from global to shared
        memory, as it is or zero where a condition fails (a padded tile's: `zero_filled`): a
        cp.async of 4 bytes; not in debug mode, whose accesses are checked. Else None."""
        cond, load = zero_filled(store.value)
        if (self.debug or not self.async_copies or store.buffer.scope != "shared" or not isinstance(load, BufferLoad)
                or load.buffer.scope != "global" or load.buffer.dtype != store.buffer.dtype
                or store.buffer.dtype not in VECTOR_TYPES):  # (their elements are 4 bytes)
            return None
        index, load_index = single_index(store), single_index(load)
        return None if isinstance(index, Ramp) or isinstance(load_index, Ramp) else (index, load, load_index, cond)

    def _async_copy(self, store, base, load, load_base, cond, depth: int, out: list[str], size: int = 16) -> None:
        """`size` bytes (16, or 4: one element) from global to shared memory that the thread does
        not wait for (cp.async, sm_80 and later; ember.cuda.pipeline), zeros where `cond` fails
        (then nothing is read: cp.async's source size 0); landed at the wait of its group."""
        pad = "  " * depth
        cache = "cg" if size == 16 else "ca"  # (.cg, past L1, takes 16 bytes only)
        source = "" if cond is None else f", \"r\"(({self._e(cond)}) ? {size} : 0)"
        out.append(f"{pad}asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {size}"
                   f"{'' if cond is None else ', %2'};\\n\" :: "
                   f"\"r\"((unsigned)__cvta_generic_to_shared(&{self._buffer(store.buffer)}[{self._e(base)}])), "
                   f"\"l\"(&{self._buffer(load.buffer)}[{self._e(load_base)}]){source} : \"memory\");")
        if size == 16:
            self.vector_buffers |= {store.buffer, load.buffer}

    def _vector_for(self, s: For, plan, depth: int, out: list[str]) -> None:
        """A 4-lane loop as 16-byte loads, the lanes' values, one 16-byte store (ember.cuda.vectors)."""
        pad, v = "  " * depth, s.loop_var
        out.append(f"{pad}{{")
        self._vars.add(v)
        self._nonnegative_vars.add(v)
        loads: dict[tuple[Buffer, str], str] = {}
        for load, base in plan.loads:
            key = (load.buffer, self._e(load.indices[0]))
            if key not in loads:
                vtype = VECTOR_TYPES[load.buffer.dtype]
                name = loads[key] = self._name(Var(f"{load.buffer.name}_v", load.buffer.dtype))
                out.append(f"{pad}  const {vtype} {name} = *reinterpret_cast<const {vtype}*>"
                           f"(&{self._buffer(load.buffer)}[{self._e(base)}]);")
        store = plan.store
        if plan.base is not None:
            vtype = VECTOR_TYPES[store.buffer.dtype]
            result = self._name(Var(f"{store.buffer.name}_v", store.buffer.dtype))
            out.append(f"{pad}  {vtype} {result};")
        self._vector_loads = loads
        for lane, field in enumerate("xyzw"):
            self._lane = lane
            out.append(f"{pad}  {{")
            out.append(f"{pad}    const {self._index_type(v)} {self._name(v)} = {lane};")
            if plan.base is None:
                out.append(f"{pad}    {self._store(store.buffer, store.indices[0], store.value)};")
            else:
                out.append(f"{pad}    {result}.{field} = {self._e(store.value)};")
            out.append(f"{pad}  }}")
        self._vector_loads, self._lane = {}, None
        self._vars.discard(v)
        self._nonnegative_vars.discard(v)
        if plan.base is not None:
            out.append(f"{pad}  *reinterpret_cast<{vtype}*>(&{self._buffer(store.buffer)}[{self._e(plan.base)}]) "
                       f"= {result};")
        out.append(f"{pad}}}")
        self.vector_buffers |= plan.buffers

    def _pair_for(self, s: For, base: PrimExpr, depth: int, out: list[str]) -> None:
        """A 2-lane loop storing two adjacent elements as one store of both (ember.cuda.vectors'
        pair_store), made of each lane's element."""
        pad, v, store = "  " * depth, s.loop_var, s.body
        vtype, make = PAIRS[store.buffer.dtype]
        values = [self._stored(store.buffer, substitute(store.value, {v: const(lane, v.dtype)})) for lane in range(2)]
        out.append(f"{pad}*reinterpret_cast<{vtype}*>(&{self._buffer(store.buffer)}[{self._e(base)}]) = "
                   f"{make}({', '.join(values)});")
        self.vector_buffers.add(store.buffer)
