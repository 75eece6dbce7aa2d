"""CUDA C code generation: the C-style renderer with CUDA's loops, scopes, barriers and atomics.

One kernel per unit, `extern "C"` (its symbol is its name) and `__global__`; buffers are
`__restrict__` pointers to global memory, sizes int64. What differs from C:

- a loop bound to a GPU index (`sch.bind`) is not a loop: its variable is that index
  (`int64_t i_1 = threadIdx.x;`), guarded where its extent is less than the launch's dimension;
  the launch's grid and block are the largest extent bound to each index (`launch_dims`), and
  `__launch_bounds__` gives the compiler the block's thread count, and the blocks a
  multiprocessor must hold where a loop asks for them (MIN_BLOCKS: the compiler then fits a
  thread's registers in the register file's share of each); a block index of symbolic
  extent is the launch's grid, computed per call from the kernel's sizes (ember.cuda.grid);
- a "shared" allocation is a `__shared__` array (one per block), a "local" one an array of the
  thread (registers when its indices are constant after unrolling); both need a constant size,
  and intermediates get one of the two first (ember.cuda.scopes); in a kernel with a loop
  annotated DYNAMIC (its shared tiles past the 48 KiB a block may declare statically), the
  shared arrays are carved from dynamic shared memory instead (each at an offset aligned as its
  array would be, freed at its scope's end), whose bytes the launch asks for (`shared_bytes`);
- `__syncthreads()` is the barrier the sync pass inserts (`ember.cuda.sync`); a pipelined loop's
  copies of 16 bytes into shared memory are `cp.async` on sm_80 and later, with their
  commit and wait (ember.cuda.pipeline), and so are its copies of one 4-byte element (a
  transposed panel's, copied an element a thread), either also where it copies `cond ? x : 0`
  (a padded tile's: the source size 0 where cond fails, zeros written and nothing read);
- a loop at block scope that folds a shared array of partials into every thread's register (a
  cross-thread reduction's second phase) is a strided fold per lane and five `__shfl_xor_sync`
  steps (ember.cuda.warp);
- serial and unrolled loops are C loops (`#pragma unroll` for unrolled ones); a vectorized loop of
  4 lanes whose store is contiguous and 16-byte aligned is one `float4`/`int4` store, its
  contiguous aligned loads one vector load each, its lanes computed one by one; where only
  loads are so, they are vector loads and the stores stay per lane (ember.cuda.vectors); other
  vectorized loops are unrolled loops of scalars; parallel loops are refused;
- loop variables are int where every buffer has fewer than 2^31 elements (`_index_type`);
- math is CUDA's libm (`expf`, `tanhf`, ...), never the fast-math intrinsics (`__expf`);
- an index read from a tensor (INDEX) is checked, and in debug mode every access to a parameter
  (ember.cuda.checks), its vectorized loops then left per lane; `reinterpret` reads the bits
  through a union;
- atomics are CUDA's (`atomicAdd`, ...);
- float16 and bfloat16 are `__half` and `__nv_bfloat16` (their headers included where used), an
  element loaded as the float it holds and a stored float rounded, so kernels compute them in fp32; a
  tensorized call (ember.tir.schedule.tensorize) is its intrinsic's CUDA source, once in the
  unit, and a call of it; a "wmma.accumulator" buffer is an array of Tensor Core fragments
  (ember.cuda.fragments).

NVRTC compiles without the C standard headers, so the unit starts with the few definitions the
kernels use (fixed-width integers, INFINITY, NAN, INT64_MIN).
"""

from __future__ import annotations

import functools
import math
import operator

from ..codegen.c_floordiv import scalar_floordiv
from ..codegen.common import single_index
from ..codegen.cstyle import ADD, PRIMARY, CStyleRenderer
from ..codegen.routines import tensor_intrin_args
from ..errors import LowerError
from ..target import GPU
from ..tir import dtype as dt
from ..tir.expr import (
    INDEX,
    REINTERPRET,
    Buffer,
    BufferLoad,
    Call,
    Cast,
    PrimExpr,
    Ramp,
    Var,
    as_int,
    binary,
    const,
)
from ..tir.expr_functor import substitute
from ..tir.functor import collect, visit_stmt
from ..tir.stmt import (
    BLOCK_TAGS,
    SYNC,
    THREAD_BINDING,
    Allocate,
    BufferStore,
    CallRoutine,
    For,
    IfThenElse,
    PrimFunc,
    Stmt,
    While,
)
from ..tir.tensor_intrin import get_intrin
from . import checks, fragments
from .grid import guarded_tags
from .pipeline import ASYNC, COMMIT, WAIT
from .swizzle import ALIGN
from .vectors import PAIRS, VECTOR_TYPES, async_copy, copy_loop, pair_store, vector_loop, zero_filled
from .warp import WARP, WarpReduction, warp_reduction

PRELUDE = """\
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-9223372036854775807LL - 1)
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)"""

_CUDA_WORDS = """
threadIdx blockIdx blockDim gridDim warpSize __syncthreads atomicAdd atomicMax atomicMin atomicAnd
atomicOr atomicXor atomicExch atomicCAS new delete class template this namespace using operator
private public protected virtual friend typename explicit nullptr throw try catch
"""


def launch_dims(func: PrimFunc) -> dict[str, int]:
    """The launch's extent along each GPU index ("blockIdx.x": 64, "threadIdx.x": 256): the
    largest extent of a loop bound to it (absent indices are 1). A loop over blocks whose extent
    is not a constant (a tile kernel's grid) takes the grid the launch gives: it is not counted."""
    dims: dict[str, int] = {}

    def visit(s):
        if isinstance(s, For) and s.kind == THREAD_BINDING and as_int(s.extent) is not None:
            dims[s.thread_tag] = max(dims.get(s.thread_tag, 1), as_int(s.extent))

    visit_stmt(func.body, visit)
    return dims


DYNAMIC = "pragma_dynamic_shared"  # a loop's annotation: the kernel's shared arrays in dynamic shared memory
DYNAMIC_SHARED = "ember_dynamic_shared"  # the kernel's dynamic shared memory


MIN_BLOCKS = "pragma_min_blocks"  # a loop's annotation: the blocks a multiprocessor must hold at once


def min_blocks(func: PrimFunc) -> int | None:
    """The blocks a multiprocessor must hold (`__launch_bounds__`' second number) that a loop of
    the kernel asks for (MIN_BLOCKS), the most where several do; None where none does."""
    loops = collect(func.body, lambda s: isinstance(s, For) and s.annotation(MIN_BLOCKS))
    return max((s.annotation(MIN_BLOCKS) for s in loops), default=None)


def dynamic_shared(func: PrimFunc) -> bool:
    """Whether the kernel asks for its shared arrays in dynamic shared memory (DYNAMIC)."""
    return bool(collect(func.body, lambda s: isinstance(s, For) and s.annotation(DYNAMIC)))


def threads_per_block(dims: dict[str, int]) -> int:
    return functools.reduce(operator.mul, (n for tag, n in dims.items() if tag not in BLOCK_TAGS), 1)


# what a tensorized call's intrinsic needs of the GPU (ember.target.CAPABILITIES): by the start of its
# name (mma.sync's steps, wmma's calls), and by its operands' type in it
INTRINSIC_NEEDS = {"start": (("mma_warp_", "mma"), ("wmma_", "wmma")),
                   "part": (("_bf16", "bfloat16"), ("_tf32", "tf32"))}
# half-precision element types: the float they hold, and a float rounded into one
WIDEN = {"float16": "__half2float", "bfloat16": "__bfloat162float"}
NARROW = {"float16": "__float2half_rn", "bfloat16": "__float2bfloat16_rn"}
ZERO = {"float16": "__ushort_as_half((unsigned short)0)", "bfloat16": "__ushort_as_bfloat16((unsigned short)0)"}


class CUDARenderer(CStyleRenderer):
    """Renders one lowered, GPU-bound function as a CUDA C unit (see the module doc)."""

    TARGET = "CUDA"
    SCALAR_TYPES = CStyleRenderer.SCALAR_TYPES | {"float16": "__half", "bfloat16": "__nv_bfloat16"}
    HEADERS = {"float16": "#include <cuda_fp16.h>", "bfloat16": "#include <cuda_bf16.h>"}
    RESERVED = CStyleRenderer.RESERVED | frozenset(_CUDA_WORDS.split())
    ATOMICS = {
        "atomic_add": "atomicAdd", "atomic_max": "atomicMax", "atomic_min": "atomicMin", "atomic_and": "atomicAnd",
        "atomic_or": "atomicOr", "atomic_xor": "atomicXor", "atomic_xchg": "atomicExch", "atomic_cas": "atomicCAS",
    }

    def __init__(self, gpu: GPU, debug: bool = False):
        """`gpu`: the target's GPU facts (ember.target.GPU), which say what the code may use."""
        super().__init__()
        self.debug = debug
        self.gpu = gpu
        self.async_copies = gpu.has("cp_async")
        self._async_loops = 0  # the asynchronous copies' loops (ember.cuda.pipeline) the renderer is in

    def render_unit(self, func: PrimFunc) -> str:
        """The unit's CUDA C; after it, `vector_buffers` holds the parameters accessed 16 bytes at
        a time (their addresses must be 16-byte aligned) and `checks` whether the kernel checks
        accesses as it runs (ember.cuda.checks: an INDEX, or any global access in debug mode)."""
        self._helpers: dict[str, str] = {}
        self._headers: set[str] = set()
        self.checks = False
        self._vector_loads: dict[tuple[Buffer, str], str] = {}  # (buffer, index text): the lane's value
        self._lane: int | None = None
        self._warp_lane: Var | None = None  # the loop variable bound to threadIdx.x around the statement
        self._thread_loops = self._branches = 0  # around the statement being rendered
        self.vector_buffers: set[Buffer] = set()
        kernel = self.render_kernel(func)
        allocated: list = []
        visit_stmt(func.body, lambda s: allocated.append(s.buffer) if isinstance(s, Allocate) else None)
        headers = sorted({self.HEADERS[b.dtype] for b in (*func.params, *allocated) if b.dtype in self.HEADERS}
                         | self._headers)
        return "\n\n".join([f"/* Generated by ember: {func.name}. */", PRELUDE, *headers, *self._helpers.values(),
                            kernel]) + "\n"

    def _begin_kernel(self, func: PrimFunc) -> None:
        self._dims = launch_dims(func)
        self._guarded = guarded_tags(func)  # block indices of symbolic extents that not every block covers
        self._params = list(func.params)
        allocated: list = []
        visit_stmt(func.body, lambda s: allocated.append(s.buffer) if isinstance(s, Allocate) else None)
        counts = [None if None in (dims := [as_int(d) for d in b.shape]) else functools.reduce(operator.mul, dims, 1)
                  for b in (*func.params, *allocated)]
        self._int32_indices = all(c is not None and c < 2**31 for c in counts)
        fragments.check_warps(func.body, self._dims, func.name)
        self._call_buffers = {p.buffer for c in collect(func.body, lambda s: isinstance(s, CallRoutine))
                              for p in c.reads + c.writes}
        self._alignment = dict(func.attr(ALIGN, ()))  # swizzled tiles' (ember.cuda.swizzle)
        self._dynamic = dynamic_shared(func)
        self.shared_bytes = self._shared_top = 0  # dynamic shared memory: the launch's bytes, the carving's top
        self._shared_align = 16
        for b in func.params:
            if b.dtype not in self.SCALAR_TYPES:
                raise LowerError(f"CUDA kernels take no {b.dtype} buffers yet ({b.name})")

    def _param(self, buf: Buffer, written: bool) -> str:
        return f"{'' if written else 'const '}{self.SCALAR_TYPES[buf.dtype]}* __restrict__ {self._name(buf)}"

    def _signature(self, func: PrimFunc, params: list[str]) -> str:
        bounds = [threads_per_block(self._dims), min_blocks(func)]
        return (f'extern "C" __global__ void __launch_bounds__({", ".join(str(n) for n in bounds if n)}) '
                f"{self.symbol(func)}({', '.join(params)})")

    def _stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        if self._async_loops and isinstance(s, BufferStore) and (copy := self._word_copy(s)) is not None:
            self._async_copy(s, *copy, depth, out, size=4)
            return
        branch = isinstance(s, IfThenElse | While)
        self._branches += branch
        super()._stmt(s, depth, out)
        self._branches -= branch

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

    def _for(self, s: For, depth: int, out: list[str]) -> None:
        asynchronous = bool(s.annotation(ASYNC))
        self._async_loops += asynchronous
        self._loop(s, depth, out)
        self._async_loops -= asynchronous

    def _loop(self, s: For, depth: int, out: list[str]) -> None:
        if self.debug and s.kind == "vectorized":  # every access checked, one lane at a time
            super()._for(s, depth, out)
            return
        if s.kind == "vectorized" and s.annotation(ASYNC) and self.async_copies:
            if (copy := async_copy(s)) is not None:
                self._async_copy(*copy, depth, out)
                return
            if isinstance(s.body, BufferStore) and self._word_copy(s.body) is not None:
                super()._for(s, depth, out)  # lane by lane, each lane's copy a cp.async of 4 bytes
                return
        if s.kind == "vectorized" and (plan := vector_loop(s)) is not None:
            self._vector_for(s, plan, depth, out)
            return
        if s.kind == "vectorized" and (base := pair_store(s)) is not None:
            self._pair_for(s, base, depth, out)
            return
        if s.kind == "vectorized" and (copy := copy_loop(s)) is not None:
            store, base, load, load_base = copy
            out.append(f"{'  ' * depth}*reinterpret_cast<uint4*>(&{self._buffer(store.buffer)}[{self._e(base)}]) = "
                       f"*reinterpret_cast<const uint4*>(&{self._buffer(load.buffer)}[{self._e(load_base)}]);")
            self.vector_buffers |= {store.buffer, load.buffer}
            return
        if not (self._thread_loops or self._branches) and (
                red := warp_reduction(s, {t: n for t, n in self._dims.items() if t not in BLOCK_TAGS})):
            self._warp_for(red, depth, out)
            return
        if s.kind != THREAD_BINDING:
            super()._for(s, depth, out)
            return
        self._thread_loops += s.thread_tag not in BLOCK_TAGS
        self._thread_for(s, depth, out)
        self._thread_loops -= s.thread_tag not in BLOCK_TAGS

    def _thread_for(self, s: For, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        v = self._name(s.loop_var)
        extent = as_int(s.extent)
        out.append(f"{pad}{{")
        out.append(f"{pad}  const {self._index_type(s.loop_var)} {v} = {s.thread_tag};")
        self._vars.add(s.loop_var)
        self._nonnegative_vars.add(s.loop_var)
        lane, self._warp_lane = self._warp_lane, s.loop_var if s.thread_tag == "threadIdx.x" else self._warp_lane
        guarded = s.thread_tag in self._guarded or (extent is not None and extent < self._dims[s.thread_tag])
        if guarded:
            out.append(f"{pad}  if ({v} < {self._e(s.extent)}) {{")
        self._stmt(s.body, depth + 1 + guarded, out)
        if guarded:
            out.append(f"{pad}  }}")
        out.append(f"{pad}}}")
        self._warp_lane = lane
        self._vars.discard(s.loop_var)
        self._nonnegative_vars.discard(s.loop_var)

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

    def _warp_for(self, red: WarpReduction, depth: int, out: list[str]) -> None:
        """A block-scope fold of partials as a strided fold per lane and a butterfly of shuffles."""
        pad, r, store = "  " * depth, red.loop.loop_var, red.store
        lane = Var("lane", r.dtype)
        total, other = Var(f"{store.buffer.name}_warp", store.buffer.dtype), Var("other", store.buffer.dtype)
        scalar = self.SCALAR_TYPES[store.buffer.dtype]
        out.append(f"{pad}{{")
        out.append(f"{pad}  const {self._index_type(lane)} {self._name(lane)} = threadIdx.x % {WARP};")
        self._vars.update((lane, r, total, other))
        self._nonnegative_vars.update((lane, r))
        out.append(f"{pad}  {scalar} {self._name(total)} = {self._e(substitute(red.partial, {r: lane}))};")
        rv = self._name(r)
        out.append(f"{pad}  for ({self._index_type(r)} {rv} = {WARP}; {rv} < {red.extent}; {rv} += {WARP}) {{")
        step = binary(red.op, total, substitute(red.partial, {r: binary("+", r, lane)}))
        out.append(f"{pad}    {self._name(total)} = {self._e(step)};")
        out.append(f"{pad}  }}")
        offset = WARP // 2
        while offset:
            out.append(f"{pad}  {{")
            out.append(f"{pad}    const {scalar} {self._name(other)} = "
                       f"__shfl_xor_sync(0xffffffffu, {self._name(total)}, {offset});")
            out.append(f"{pad}    {self._name(total)} = {self._e(binary(red.op, total, other))};")
            out.append(f"{pad}  }}")
            offset //= 2
        acc = next(x for x in (store.value.a, store.value.b) if x is not red.partial)
        folded = binary(red.op, acc, total) if acc is store.value.a else binary(red.op, total, acc)
        out.append(f"{pad}  {self._store(store.buffer, store.indices[0], folded)};")
        self._vars.difference_update((lane, r, total, other))
        self._nonnegative_vars.difference_update((lane, r))
        out.append(f"{pad}}}")

    def _load(self, buf: Buffer, index: PrimExpr) -> tuple[str, int]:
        """A half-precision element is loaded as the float it holds (`__half2float`): kernels
        compute float16 and bfloat16 in float32 (ember.tir.dtype.compute_dtype), and CUDA's own
        half operators beside its conversions would make `h * h` ambiguous."""
        code = self._element(buf, index)
        widen = WIDEN.get(buf.dtype)
        return (f"{widen}({code})", PRIMARY) if widen else (code, PRIMARY)

    def _element(self, buf: Buffer, index: PrimExpr) -> str:
        """The element as stored (an lvalue, or a lane of a vector load; a lane's own float of a
        fragment, ember.cuda.fragments.element)."""
        if self._lane is not None and (name := self._vector_loads.get((buf, self._e(index)))):
            return f"{name}.{'xyzw'[self._lane]}"
        if buf.scope == fragments.SCOPE:
            return fragments.element(buf, self._buffer(buf), index, self._warp_lane, self._e)
        if self.debug and buf in self._params:
            return f"{self._buffer(buf)}[{self._in_bounds(buf, index)}]"
        return super()._load(buf, index)[0]

    def _store(self, buf: Buffer, index: PrimExpr, value: PrimExpr) -> str:
        if dt.lanes_of(index.dtype) > 1:
            raise self._no_vectors()
        checked = self.debug and buf in self._params
        target = f"{self._buffer(buf)}[{self._in_bounds(buf, index) if checked else self._e(index)}]"
        return f"{target} = {self._stored(buf, value)}"

    def _stored(self, buf: Buffer, value: PrimExpr) -> str:
        """The value as an element of buf: a float stored into a half-precision buffer is rounded
        to nearest even (`__float2half_rn`), a value cast to buf's type rounded once; an element
        copied from a buffer of the same type keeps its bits, and so does one copied where
        conditions hold, zero elsewhere (a convolution's columns: its padding and its tile's; no
        round trip through a float: two conversions an element fewer)."""
        narrow = NARROW.get(buf.dtype)
        if narrow is None:
            return self._e(value)
        if isinstance(value, BufferLoad) and value.buffer.dtype == buf.dtype:
            return self._element(value.buffer, value.indices[0])
        if isinstance(value, Cast) and value.dtype == buf.dtype:  # (rounded once: the cast's rounding is the store's)
            return f"{narrow}({self._e(value.value)})"
        if (kept := self._zero_filled_element(buf, value)) is not None:
            return kept
        return f"{narrow}({self._e(value)})"

    def _pair_for(self, s: For, base: PrimExpr, depth: int, out: list[str]) -> None:
        """A 2-lane loop storing two adjacent elements as one store of both (ember.cuda.vectors'
        pair_store), made of each lane's element."""
        pad, v, store = "  " * depth, s.loop_var, s.body
        vtype, make = PAIRS[store.buffer.dtype]
        values = [self._stored(store.buffer, substitute(store.value, {v: const(lane, v.dtype)})) for lane in range(2)]
        out.append(f"{pad}*reinterpret_cast<{vtype}*>(&{self._buffer(store.buffer)}[{self._e(base)}]) = "
                   f"{make}({', '.join(values)});")
        self.vector_buffers.add(store.buffer)

    def _zero_filled_element(self, buf: Buffer, value: PrimExpr) -> str | None:
        """`c1 && c2 ? element : 0` where value is an element of buf's type under nested
        `cond ? x : +0` (zero_filled), else None."""
        conds = []
        while (found := zero_filled(value))[0] is not None and math.copysign(1.0, value.f.value) > 0:
            conds.append(found[0])
            value = found[1]
        if not conds or not isinstance(value, BufferLoad) or value.buffer.dtype != buf.dtype:
            return None
        cond = " && ".join(f"({self._e(c)})" for c in conds)
        return f"({cond}) ? {self._element(value.buffer, value.indices[0])} : {ZERO[buf.dtype]}"

    def _cast(self, dtype: str, v: PrimExpr) -> tuple[str, int]:
        """A cast to half precision rounds and goes on in float32 (as a store and a load would)."""
        if dtype in NARROW:
            self._headers.add(self.HEADERS[dtype])
            return f"{WIDEN[dtype]}({NARROW[dtype]}({self._e(v)}))", PRIMARY
        return super()._cast(dtype, v)

    def _in_bounds(self, buf: Buffer, index: PrimExpr) -> str:
        """A global access's index, checked against the buffer's size (debug mode)."""
        self._checked()
        size = functools.reduce(operator.mul, [as_int(d) for d in buf.shape], 1)
        return f"ember_in_bounds({self._e(index)}, {size}, {self._params.index(buf)})"

    def _checked(self) -> None:
        self.checks = True
        self._helper("ember_checks", checks.SOURCE)

    def _call(self, name: str, args: tuple[PrimExpr, ...], dtype: str) -> tuple[str, int]:
        if name == INDEX:
            self._checked()
            return f"ember_index({self._e(args[0])}, {self._e(args[1])})", PRIMARY
        if name == REINTERPRET:
            return f"{self._reinterpret(args[0].dtype, dtype)}({self._e(args[0])})", PRIMARY
        return super()._call(name, args, dtype)

    def _reinterpret(self, src: str, dst: str) -> str:
        """The helper that reads the bits of a value of `src` (as stored) as a value of `dst`:
        through a union of their storage types (CUDA's half and bfloat16 through their bits)."""
        name = f"ember_reinterpret_{src}_{dst}"
        bits = {"float16": ("__half_as_ushort(__float2half_rn(x))", "__half2float(__ushort_as_half(u.d))"),
                "bfloat16": ("__bfloat16_as_ushort(__float2bfloat16_rn(x))",
                             "__bfloat162float(__ushort_as_bfloat16(u.d))")}
        self._headers |= {self.HEADERS[d] for d in (src, dst) if d in self.HEADERS}
        storage = {d: "unsigned short" if d in bits else self.SCALAR_TYPES[d] for d in (src, dst)}
        into = bits[src][0] if src in bits else f"({storage[src]})x"
        out = bits[dst][1] if dst in bits else "u.d"
        compute = {d: self.SCALAR_TYPES[dt.compute_dtype(d)] for d in (src, dst)}
        return self._helper(name, f"static __device__ __forceinline__ {compute[dst]} {name}({compute[src]} x) {{\n"
                                  f"  union {{ {storage[src]} s; {storage[dst]} d; }} u;\n  u.s = {into};\n"
                                  f"  return {out};\n}}")

    def _index_type(self, var) -> str:
        """int for the loop variables of a kernel whose buffers all hold fewer than 2^31 elements
        (every index, and each part of one, then fits: 64-bit integer arithmetic is emulated on
        GPUs), else int64_t."""
        return "int" if self._int32_indices and var.dtype == "int64" else self.SCALAR_TYPES[var.dtype]

    def _loop_open(self, s: For, pad: str, out: list[str]):
        if s.kind in ("unrolled", "vectorized"):
            out.append(f"{pad}#pragma unroll")
        elif s.kind != "serial":
            raise LowerError(f"CUDA has no {s.kind} loops (loop {s.loop_var.name}): bind it to blockIdx or "
                             f"threadIdx instead")

    def _allocate(self, buf: Buffer, body: Stmt, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        dims = [as_int(d) for d in buf.shape]
        if None in dims:
            raise LowerError(f"CUDA allocates buffer {buf.name} ({buf.scope}) only with a constant size, "
                             f"not {buf.shape}")
        if buf.scope not in ("shared", "local", fragments.SCOPE):
            raise LowerError(f"CUDA kernels allocate no {buf.scope} scratch ({buf.name}): give it a scope first "
                             f"(ember.cuda.scopes)")
        count = max(1, functools.reduce(operator.mul, dims, 1))
        align = self._alignment.get(buf.name, 32 if buf in self._call_buffers else 16)  # wmma: 32-byte aligned tiles
        qualifier = f"__shared__ __align__({align}) " if buf.scope == "shared" else ""
        out.append(f"{pad}{{")
        top = self._shared_top
        if buf.scope == "shared" and self._dynamic:  # carved from dynamic shared memory, freed at the scope's end
            at = -(-top // align) * align
            self._shared_top = at + count * dt.bits(buf.dtype) // 8
            self.shared_bytes, self._shared_align = max(self.shared_bytes, self._shared_top), max(self._shared_align,
                                                                                                 align)
            ctype = self.SCALAR_TYPES[buf.dtype]
            out.append(f"{pad}  {ctype}* __restrict__ {self._name(buf)} = reinterpret_cast<{ctype}*>({DYNAMIC_SHARED} "
                       f"+ {at});")
        elif buf.scope == fragments.SCOPE:
            out.append(f"{pad}  {fragments.declaration(buf, self._name(buf))}")
        else:
            out.append(f"{pad}  {qualifier}{self.SCALAR_TYPES[buf.dtype]} {self._name(buf)}[{count}];")
        self._buffers.add(buf)
        self._stmt(body, depth + 1, out)
        self._buffers.discard(buf)
        self._shared_top = top
        out.append(f"{pad}}}")

    def _prologue(self, func: PrimFunc) -> list[str]:
        if not self.shared_bytes:
            return []
        return [f"  extern __shared__ __align__({self._shared_align}) unsigned char {DYNAMIC_SHARED}[];"]

    def _other_stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        """A tensorized call: its intrinsic's CUDA source once in the unit, then the call, with
        the fragment an address of a "wmma.accumulator" buffer names (ember.cuda.fragments)."""
        params = dict(s.params) if isinstance(s, CallRoutine) else {}
        if "intrin" not in params:
            super()._other_stmt(s, depth, out)
            return
        name = params["intrin"]
        needs = [n for s, n in INTRINSIC_NEEDS["start"] if name.startswith(s)] + [
            n for p, n in INTRINSIC_NEEDS["part"] if p in name]
        if missing := [n for n in needs if not self.gpu.has(n)]:
            raise LowerError(f"Tensor Core intrinsic {params['intrin']} needs {', '.join(missing)}, which "
                             f"{self.gpu.arch} does not have (ember.target.CAPABILITIES): schedule the product on "
                             f"what the target GPU has (GPU.tensor_cores), e.g. tensorcore_gemm(intrinsic='wmma')")
        self._helper(f"tensor_intrin {params['intrin']}", get_intrin(params["intrin"]).c_source)
        reads, writes, scalars = tensor_intrin_args(s)
        args = [self._pointer(p, "const void*") for p in reads] + [self._pointer(p, "void*") for p in writes]
        args += [self._e(x) for x in scalars]
        out.append(f"{'  ' * depth}{s.routine}({', '.join(args)});")

    def _pointer(self, p, ctype: str) -> str:
        offset = self._e(p.offset, ADD)
        if p.buffer.scope == fragments.SCOPE:
            return fragments.address(p.buffer, self._buffer(p.buffer), offset)
        return f"({ctype})({self._buffer(p.buffer)} + {offset})"

    def _evaluate(self, value: PrimExpr) -> str:
        if isinstance(value, Call) and value.name == SYNC:
            return "__syncthreads()"
        if isinstance(value, Call) and value.name in (COMMIT, WAIT):  # nothing in flight without cp.async
            if not self.async_copies:
                return "(void)0"
            if value.name == COMMIT:
                return 'asm volatile("cp.async.commit_group;\\n" ::: "memory")'
            return f'asm volatile("cp.async.wait_group {as_int(value.args[0])};\\n" ::: "memory")'
        return super()._evaluate(value)

    def _helper(self, name: str, text: str) -> str:
        self._helpers.setdefault(name, text)
        return name

    def _minmax(self, op: str, elem: str, lanes: int) -> str:
        t, cmp = self.SCALAR_TYPES[elem], ">" if op == "max" else "<"
        body = f"(a {cmp} b) | (a != a) ? a : b" if dt.is_float(elem) else f"a {cmp} b ? a : b"  # NaN wins, as numpy's
        name = f"ember_{op}_{elem}"
        return self._helper(name, f"static __device__ __forceinline__ {t} {name}({t} a, {t} b) {{ return {body}; }}")

    def _floordiv(self, op: str, elem: str, lanes: int, a: PrimExpr, b: PrimExpr) -> str:
        n = as_int(b)
        if elem in ("int32", "int64", "uint32", "uint64") and n and n > 0 and n & (n - 1) == 0:
            # a power of two: a shift and a mask are the floored quotient and remainder on two's complement
            return f"(({self._e(a)}) >> {n.bit_length() - 1})" if op == "//" else f"(({self._e(a)}) & {n - 1})"
        name = f"ember_{'floordiv' if op == '//' else 'floormod'}_{elem}"
        text = scalar_floordiv(op, elem, name, self.SCALAR_TYPES[elem])
        self._helper(name, text.replace("static inline", "static __device__ __forceinline__", 1))
        return f"{name}({self._e(a)}, {self._e(b)})"

    def _atomic(self, name: str, args: tuple[PrimExpr, ...]) -> str:
        target = args[0]
        if not isinstance(target, BufferLoad) or any(dt.lanes_of(a.dtype) > 1 for a in args):
            raise LowerError(f"{name} takes the element it updates as a scalar load")
        address = f"&{self._buffer(target.buffer)}[{self._e(single_index(target))}]"
        return f"{self.ATOMICS[name]}({', '.join([address, *(self._e(a) for a in args[1:])])})"
