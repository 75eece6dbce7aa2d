"""CUDA C code generation: the C-style renderer with CUDA's loops, scopes, barriers and atomics.

One kernel per unit, `extern "C"` (its symbol is its name) and `__global__`; buffers are
`__restrict__` pointers to global memory, sizes int64. What differs from C:

- a loop bound to a GPU index (`sch.bind`) is not a loop: its variable is that index
  (`int64_t i_1 = threadIdx.x;`), guarded where its extent is less than the launch's dimension;
  the launch's grid and block are the largest extent bound to each index (`launch_dims`:
  ember.cuda.launch_shape, with the other facts of a launch), and
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
  (a padded tile's: the source size 0 where cond fails, zeros written and nothing read;
  ember.cuda.vector_render);
- a loop at block scope that folds a shared array of partials into every thread's register (a
  cross-thread reduction's second phase) is a strided fold per lane and five `__shfl_xor_sync`
  steps (ember.cuda.warp, which renders them too);
- serial and unrolled loops are C loops (`#pragma unroll` for unrolled ones); a vectorized loop of
  4 lanes whose store is contiguous and 16-byte aligned is one `float4`/`int4` store, its
  contiguous aligned loads one vector load each, its lanes computed one by one; where only
  loads are so, they are vector loads and the stores stay per lane (ember.cuda.vectors); a
  2-lane loop storing a pair of adjacent half, bfloat16 or float elements at an even index is one
  `__half2`/`__nv_bfloat162`/`float2` store (rendered by ember.cuda.vector_render); other
  vectorized loops are unrolled loops of scalars; parallel loops are refused;
- loop variables are int where every buffer has fewer than 2^31 elements (`_index_type`);
- math is CUDA's libm (`expf`, `tanhf`, ...), never the fast-math intrinsics (`__expf`);
- an index read from a tensor (INDEX) is checked, and in debug mode every access to a parameter
  (ember.cuda.checks), its vectorized loops then left per lane; `reinterpret` reads the bits
  through a union;
- atomics are CUDA's (`atomicAdd`, ...);
- float16 and bfloat16 are `__half` and `__nv_bfloat16` (their headers included where used), an
  element loaded as the float it holds and a stored float rounded, so kernels compute them in fp32
  (ember.cuda.half_elements); a tensorized call (ember.tir.schedule.tensorize) is its
  intrinsic's CUDA source, once in the unit, and a call of it, refused where the GPU lacks the
  intrinsic (ember.cuda.tensor_calls); a "wmma.accumulator" buffer is an array of Tensor Core
  fragments, which a lane may also read its own floats of (ember.cuda.fragments).

The renderer is this module's CUDARenderer (loops, threads, scopes, barriers, math, atomics) with
one part per idea mixed in: TensorCalls, HalfElements, VectorRendering and WarpRendering.

NVRTC compiles without the C standard headers, so the unit starts with the few definitions the
kernels use (fixed-width integers, INFINITY, NAN, INT64_MIN).
"""

from __future__ import annotations

import functools
import operator

from ..codegen.c_floordiv import scalar_floordiv
from ..codegen.common import single_index
from ..codegen.cstyle import PRIMARY, CStyleRenderer
from ..errors import LowerError
from ..target import GPU
from ..tir import dtype as dt
from ..tir.expr import INDEX, REINTERPRET, Buffer, BufferLoad, Call, PrimExpr, Var, as_int
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
from . import checks, fragments
from .grid import guarded_tags
from .half_elements import WIDEN, HalfElements
from .launch_shape import DYNAMIC_SHARED, dynamic_shared, launch_dims, min_blocks, threads_per_block
from .pipeline import ASYNC, COMMIT, WAIT
from .swizzle import ALIGN
from .tensor_calls import TensorCalls
from .vector_render import VectorRendering
from .vectors import async_copy, copy_loop, pair_store, vector_loop
from .warp import WarpRendering, warp_reduction

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

class CUDARenderer(TensorCalls, HalfElements, VectorRendering, WarpRendering, CStyleRenderer):
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
