"""GPU kernels on the CPU with GPU semantics: the loop-IR interpreter, thread by thread.

The interpreter (ember.codegen.python) runs loops one after another; a GPU runs a kernel's body
once per thread of every block. This module renders a GPU-bound function (after ember.cuda's
scopes and barriers) as a Python generator of ONE thread, `def k(A, B, C, _ix, _tid, _blk)`:

- a loop bound to a GPU index is that index (`i = _ix['threadIdx.x']`), guarded where its extent
  is less than the launch's dimension, as the CUDA renderer does;
- `__syncthreads()` is `yield n` (n: which barrier);
- an asynchronous copy (ember.cuda.pipeline) is held by the thread with the value it read and
  lands at the thread's wait for its group (`_cp`), so a tile read before its wait is stale;
- a "shared" allocation is the block's (`_blk.shared`), one array per block, filled with NaN (or
  a pattern for integers) so that a read before any write shows; other scratch is the thread's
  own (a "wmma.accumulator" is its warp's, and a call that touches one, or any Tensor Core call,
  collective on the GPU, is made once: the warp's k-th such call by the first of its lanes to
  reach it, so that a lane past its k-th call finds it made; a lane that reads its floats of a
  fragment, ember.cuda.fragments.element, while a later call of its warp is made already, which
  the GPU's lanes in step would not see, is a RaceError).

`run_grid` runs the blocks in a shuffled order (a GPU runs them in any), and within a block runs
every thread to its next barrier, in a shuffled order, phase after phase. Shared arrays record
which thread wrote and read each element since the last barrier: a thread that reads an element
another wrote in the same phase, or writes one another read or wrote, is a RaceError naming the
buffer, the element and both threads (a missing barrier is an error, not a silent answer); so is
a block whose threads stop at different barriers, or some at a barrier while others have
finished (a deadlock on the GPU). Stores to the kernel's parameters (global memory) are recorded
per block and phase the same way: two threads of a block storing one element between two barriers
is a RaceError too (a GPU keeps either store, and a memory plan that gives the output an input's
buffer makes the later one overwrite what another thread still reads). Loads of global memory, and
accesses inside tensorized calls, are not tracked.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from ..codegen.common import single_index
from ..codegen.python import PythonRenderer, load_python, symbol
from ..errors import RaceError
from ..intrinsics.wmma import FEATURE
from ..runtime.module import PythonKernel
from ..target import GPU, WARP
from ..tir import dtype as dt
from ..tir.expr import Buffer, Call, PrimExpr, Ramp, as_int
from ..tir.stmt import (
    BLOCK_TAGS,
    SYNC,
    THREAD_BINDING,
    THREAD_TAGS,
    Allocate,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    PrimFunc,
    Stmt,
)
from ..tir.tensor_intrin import get_intrin
from . import fragments
from .grid import Grid, guarded_tags
from .kernel import prepare
from .launch_shape import launch_dims
from .limits import check_limits
from .pipeline import ASYNC, COMMIT, WAIT


class SharedArray:
    """A block's shared array: its elements (`a`) and, per element, the thread that wrote it and
    the one that read it since the last barrier (-1 none, -2 several readers)."""

    def __init__(self, name: str, n: int, dtype: str, block: Block):
        t = dt.to_numpy(dtype)
        self.name, self.block = name, block
        self.a = np.full(n, np.nan if dt.is_float(dtype) else 0x5A, t)
        self.writer = np.full(n, -1, np.int32)
        self.reader = np.full(n, -1, np.int32)

    def __getitem__(self, idx):
        t = self.block.tid
        if type(idx) is int:  # a scalar access: the common case, kept cheap
            w, r = self.writer[idx], self.reader[idx]
            if w != -1 and w != t:
                self._race(idx, "reads", w, t, "wrote")
            if r != t:
                self.reader[idx] = t if r == -1 else -2
            return self.a[idx]
        w = self.writer[idx]
        if np.any((w >= 0) & (w != t)):
            self._race(idx, "reads", w, t, "wrote")
        r = self.reader[idx]
        self.reader[idx] = np.where((r == -1) | (r == t), t, -2)
        return self.a[idx]

    def __setitem__(self, idx, value):
        t = self.block.tid
        w, r = self.writer[idx], self.reader[idx]
        if np.any((w >= 0) & (w != t)):
            self._race(idx, "writes", w, t, "wrote")
        if np.any((r == -2) | ((r >= 0) & (r != t))):
            self._race(idx, "writes", r, t, "read")
        self.a[idx] = value
        self.writer[idx] = t

    def barrier(self) -> None:
        self.writer.fill(-1)
        self.reader.fill(-1)

    def _race(self, idx, does: str, others, t: int, did: str):
        flat = np.arange(len(self.a))[idx]
        others = np.broadcast_to(others, np.shape(flat))
        k = np.flatnonzero(np.atleast_1d((others != -1) & (others != t)))[0]
        element, other = np.atleast_1d(flat)[k], np.atleast_1d(others)[k]
        who = "other threads" if other == -2 else f"thread {other}"
        raise RaceError(f"kernel {self.block.kernel}, block {self.block.index}: thread {t} {does} "
                        f"{self.name}[{element}], which {who} {did} since the last barrier (a missing "
                        f"__syncthreads()?)")


class AsyncCopies:
    """A thread's asynchronous copies (ember.cuda.pipeline): each store held, with the value it
    read, until a wait lands its group."""

    def __init__(self):
        self.open: list = []
        self.groups: list[list] = []

    def issue(self, array, index, value) -> None:
        self.open.append((array, index, np.copy(value) if isinstance(value, np.ndarray) else value))

    def commit(self) -> None:
        self.groups.append(self.open)
        self.open = []

    def wait(self, in_flight: int) -> None:
        while len(self.groups) > in_flight:
            for array, index, value in self.groups.pop(0):
                array[index] = value


class Block:
    """One block's state while it runs: its shared arrays, its warps' accumulators, the thread
    running now (`tid`, linear in the block), and which thread stored each element of global
    memory since the last barrier."""

    def __init__(self, kernel: str, index: tuple[int, ...]):
        self.kernel, self.index, self.tid = kernel, index, 0
        self._shared: dict[int, SharedArray] = {}
        self._warps: dict[tuple[int, int], np.ndarray] = {}
        self._stored: dict[tuple[str, int], int] = {}
        self._calls: dict[int, int] = {}  # collective calls each thread has reached
        self._made: dict[int, int] = {}  # collective calls each warp has made

    def stores(self, name: str, index) -> None:
        """The running thread stores `name`[index] (an element, or a slice of a vector store)."""
        t = self.tid
        for i in range(index.start, index.stop) if type(index) is slice else np.atleast_1d(index).tolist():
            other = self._stored.setdefault((name, i), t)
            if other != t:
                raise RaceError(f"kernel {self.kernel}, block {self.index}: thread {t} stores {name}[{i}], which "
                                f"thread {other} stored since the last barrier (one element stored by several "
                                "threads: store it from one)")

    def shared(self, key: int, name: str, n: int, dtype: str) -> SharedArray:
        if key not in self._shared:
            self._shared[key] = SharedArray(name, n, dtype, self)
        return self._shared[key]

    def warp(self, key: int, n: int, dtype: str) -> np.ndarray:
        w = (key, self.tid // WARP)
        if w not in self._warps:
            self._warps[w] = np.full(n, np.nan, dt.to_numpy(dtype))
        return self._warps[w]

    def collective(self) -> bool:
        """Whether the running thread makes the collective call it reached: the first of its warp's
        lanes to reach its warp's k-th (see the module doc)."""
        k = self._calls[self.tid] = self._calls.get(self.tid, 0) + 1
        made = self._made.get(self.tid // WARP, 0)
        if k > made:
            self._made[self.tid // WARP] = k
        return k > made

    def in_step(self, fragment: np.ndarray, name: str) -> np.ndarray:
        """`fragment`, read by the running thread at its own floats; a RaceError where its warp has
        made a collective call that the thread has not reached."""
        made, reached = self._made.get(self.tid // WARP, 0), self._calls.get(self.tid, 0)
        if made > reached:
            raise RaceError(f"kernel {self.kernel}, block {self.index}: thread {self.tid} reads fragment {name} "
                            f"after its {reached} collective calls while its warp made {made} (on the GPU the "
                            "lanes make each call together)")
        return fragment

    def barrier(self) -> None:
        for a in self._shared.values():
            a.barrier()
        self._stored.clear()

    def copies(self) -> AsyncCopies:
        return AsyncCopies()


class SimtRenderer(PythonRenderer):
    """One thread of a GPU-bound function as a Python generator (see the module doc)."""

    def __init__(self, func: PrimFunc, dims: dict[str, int]):
        super().__init__(func)
        self.dims = dims
        self.guarded = guarded_tags(func)  # (a symbolic extent alone is the launch's grid: unguarded)
        self._barriers = itertools.count()
        self._allocations = itertools.count()
        self._async = False  # rendering an asynchronous copy

    def render(self) -> str:
        f = self.func
        params = [self._name(b) for b in f.params] + [self._name(v) for v in f.size_vars] + ["_ix", "_tid", "_blk"]
        lines = [f"def {symbol(f)}({', '.join(params)}):", f'    """{f.name}: one thread"""',
                 "    _cp = _blk.copies()"]
        self._stmt(f.body, 1, lines)
        lines += ["    return", "    yield  # a generator even without barriers"]
        return "\n".join(lines) + "\n"

    def _stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        match s:
            case For() if s.annotation(ASYNC) and not self._async:
                self._async = True
                self._stmt(replace(s, annotations=tuple(a for a in s.annotations if a[0] != ASYNC)), depth, out)
                self._async = False
            case For(v, _, ext, _, body) if s.kind == THREAD_BINDING:
                self._vars.add(v)
                out.append(f"{pad}{self._name(v)} = _ix[{s.thread_tag!r}]")
                if s.thread_tag in self.guarded or (as_int(ext) is not None and as_int(ext) < self.dims[s.thread_tag]):
                    out.append(f"{pad}if {self._name(v)} < {self._e(ext)}:")
                    depth += 1
                self._stmt(body, depth, out)
                self._vars.discard(v)
            case Evaluate(Call(name)) if name == SYNC:
                out.append(f"{pad}yield {next(self._barriers)}")
            case Evaluate(Call(name)) if name == COMMIT:
                out.append(f"{pad}_cp.commit()")
            case Evaluate(Call(name, (n,))) if name == WAIT:
                out.append(f"{pad}_cp.wait({as_int(n)})")
            case BufferStore(buf, value, _) if self._async and buf.scope == "shared":
                out.append(f"{pad}_cp.issue({self._access_base(buf)}, {self._where(s)}, {self._e(value)})")
            case BufferStore(buf, _, _) if buf in self.func.params:
                out.append(f"{pad}_blk.stores({buf.name!r}, {self._where(s)})")
                super()._stmt(s, depth, out)
            case Allocate(buf, body) if buf.scope in ("shared", fragments.SCOPE):
                size = " * ".join(self._e(d) for d in buf.shape) or "1"
                key = next(self._allocations)
                make = (f"_blk.shared({key}, {buf.name!r}, {size}, {buf.dtype!r})" if buf.scope == "shared"
                        else f"_blk.warp({key}, {size}, {buf.dtype!r})")
                out.append(f"{pad}{self._name(buf)} = {make}")
                self._buffers.add(buf)
                self._stmt(body, depth, out)
                self._buffers.discard(buf)
            case CallRoutine() if _collective(s):
                out.append(f"{pad}if _blk.collective():  # a warp's collective call, made once")
                super()._stmt(s, depth + 1, out)
            case _:
                super()._stmt(s, depth, out)

    def _where(self, store: BufferStore) -> str:
        """The elements a store writes: a slice for a stride-1 vector, else its index."""
        index = single_index(store)
        if isinstance(index, Ramp) and as_int(index.stride) == 1:
            base = self._e(index.base)
            return f"slice({base}, {base} + {index.lanes})"
        return self._e(index)

    def _access_base(self, buf: Buffer) -> str:
        base = super()._access_base(buf)
        return f"{base}.a" if buf.scope == "shared" else base  # a tensorized call's untracked view

    def _access(self, buf: Buffer, index: PrimExpr) -> str:
        if buf.scope == fragments.SCOPE:  # (a lane's own floats: ember.cuda.fragments.element)
            return f"_blk.in_step({self._name(buf)}, {buf.name!r})[{self._e(index)}]"
        if buf.scope != "shared":
            return super()._access(buf, index)
        name = self._name(buf)
        if isinstance(index, Ramp) and as_int(index.stride) == 1:
            base = self._e(index.base)
            return f"{name}[{base}:{base} + {index.lanes}]"
        return f"{name}[{self._e(index)}]"


def _collective(call: CallRoutine) -> bool:
    """Whether a tensorized call is a warp's: it touches a fragment, or it is a Tensor Core call
    on tiles in memory (a tile kernel's tl.dot)."""
    if any(p.buffer.scope == fragments.SCOPE for p in call.reads + call.writes):
        return True
    name = dict(call.params).get("intrin")
    return name is not None and get_intrin(name).feature == FEATURE


def run_grid(thread: Callable, name: str, args: Sequence, dims: dict[str, int], seed: int) -> None:
    """Every block of the launch, in a shuffled order, each as the module doc says."""
    rng = random.Random(seed)
    extents = {tag: dims.get(tag, 1) for tag in THREAD_TAGS}
    blocks = list(itertools.product(*(range(extents[t]) for t in BLOCK_TAGS)))
    threads = list(itertools.product(*(range(extents[t]) for t in THREAD_TAGS[3:])))
    nx, ny = extents["threadIdx.x"], extents["threadIdx.y"]
    rng.shuffle(blocks)
    for b in blocks:
        block = Block(name, b)
        running = []
        for t in threads:
            tid = t[0] + nx * (t[1] + ny * t[2])
            ix = dict(zip(THREAD_TAGS, (*b, *t)))
            running.append((tid, thread(*args, ix, tid, block)))
        while running:
            rng.shuffle(running)
            waiting, at = [], set()
            for tid, gen in running:
                block.tid = tid
                try:
                    at.add(next(gen))
                    waiting.append((tid, gen))
                except StopIteration:
                    pass
            if waiting and (len(waiting) < len(running) or len(at) > 1):
                stuck = "at different barriers" if len(at) > 1 else "some at a barrier, the others finished"
                raise RaceError(f"kernel {name}, block {b}: the threads stopped {stuck} (a barrier that not "
                                f"every thread of the block reaches deadlocks on the GPU)")
            block.barrier()
            running = waiting


class SimtKernel(PythonKernel):
    """A GPU-bound kernel run by the interpreter with GPU semantics (see the module doc); `seed`
    orders its blocks and threads."""

    def __init__(self, func: PrimFunc, seed: int = 0):
        dims = launch_dims(func)
        source = SimtRenderer(func, dims).render()
        thread = load_python(source, func)
        grid = Grid(func, dims)

        def run(*args):  # the pointers, then the sizes that give the grid (ember.cuda.grid)
            blocks = grid(args[len(func.params):])
            if 0 not in blocks:
                run_grid(thread, func.name, args, {**dims, **dict(zip(BLOCK_TAGS, blocks))}, seed)

        super().__init__(func, source, run)


def is_gpu_kernel(func: PrimFunc) -> bool:
    """Whether a lowered function binds loops to GPU blocks or threads."""
    return bool(launch_dims(func))


def build_simt(func: PrimFunc, *, seed: int = 0) -> SimtKernel:
    """The interpreter's kernel of a GPU-bound function: its scratch given scopes and its
    barriers inserted as for the GPU (ember.cuda.scopes, ember.cuda.sync), its limits checked."""
    func = prepare(func)
    check_limits(func, launch_dims(func), GPU())  # (the GPU a build without a device assumes)
    return SimtKernel(func, seed)

