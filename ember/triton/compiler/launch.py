"""Launching a compiled kernel: specialization, the compiled function, its caches, the call.

The specialization key is Triton's: the kernel's source and the sources of the @jit functions
it calls, the values of the other globals they read (a helper rebound or a global constexpr
changed compiles again: `source_digest`), the constexpr values, each tensor argument's dtype,
each integer argument's type and whether it is 1 (then compiled in as the constant 1) or a
multiple of 16, on the GPU whether each tensor's address is 16-byte aligned, the debug mode and
the target (its compiler and flags; on the GPU its facts, ember.target.GPU, which bound a block's
shared memory). A key compiles once per process (an in-memory
table), and once per machine: the generated C and what the launch needs are kept in the build
cache's folder (`triton/<key>.pkl`, an entry of ember.runtime.kept: its digest, then its bytes)
next to the library, so a new process finds both and compiles nothing (the folder trimmed to its
limit, least recently used first: ember.runtime.disk_cache). An entry whose bytes do not match
its digest (a flipped byte would compile altered C), or that is not this format's description of
this key, is a miss: compiled again and written over.

The C function of a specialization takes, in order: one pointer per tensor argument (to its
first element), one pointer per scalar argument (a one-element array of its type), `meta`
(int64: each tensor's reachable span [lo, hi) in elements, which
the debug mode checks accesses against) and `status` (int64: 0, or the number of the check that
failed: an out-of-bounds access in the debug mode, a device_assert). Its body is a parallel loop
over the programs of the grid (OpenMP over the flattened 3-D grid; programs are independent).
A specialization is compiled for the launch's target (ember.target: `KernelFunction.launch_target`)
and built through its backend (ember.backends), as ember.build builds: the backend's Emitter
(`tile_emitter`: how block operations become loops on its machine; a backend without one
launches no tile kernels), its loop passes, its kernel renderer, and its builder and loader give
the launcher.
A launch refuses a read-only array (NumPy's writeable flag: a read-only memmap, a view of bytes)
for a parameter the kernel stores to (`Compiled.written`, from the lowered function), and calls it
through the backend's `call_tile`, which checks where the tensors are (host memory for "c", one
GPU for "cuda") before anything runs. The C launcher (ember.codegen.c) takes the num_threads
option, read at each launch (0: the calling thread's setting): the grid runs on that many OpenMP
threads and the calling thread's own setting (torch.set_num_threads sets the same one) is back
when the launch returns, a failed check included. On the thread that forked this process, one
(ember.runtime.fork). The GPU's (ember.cuda.tile) passes scalars by value and the grid as blocks
through the driver.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ... import config
from ...codegen.common import written_buffers
from ...errors import ArgumentTypeError, TileError
from ...runtime import kept
from ...target import Target
from ...tir.expr import Buffer, BufferLoad, Var, cast, const
from ...tir.lower import lower
from ...tir.stmt import PrimFunc
from ..args import DeviceTensorArg, TensorArg, device_tensor_arg, on_device, scalar_dtype, tensor_arg
from ..function import KernelFunction
from ..language import dtypes as tld
from . import values as V
from .builtins import Builtins
from .frontend import Frontend

FORMAT = 2  # of the cached description of a specialization


@dataclass(frozen=True)
class Spec:
    """How one launch's arguments are compiled: per parameter, ("tensor", dtype name[, 16-byte
    aligned: on the GPU]),
    ("scalar", dtype name) or ("constexpr", value)."""

    kinds: tuple[tuple[str, object], ...]
    key: str
    num_warps: int = 4  # a GPU's warps per program (the CPU's Emitter takes none)
    num_stages: int = 3  # a GPU's stages of a loop's copies of dot operands (Triton's default 3; none on the CPU)


@dataclass
class Compiled:
    """A compiled specialization: its C function and what a launch passes it."""

    name: str
    key: str
    source: str
    tir: str
    sites: list[str]
    scalar_dtypes: list[str]
    written: list[str]  # the tensor parameters the kernel stores to (a read-only array is refused)
    cfunc: object = None
    library: object = None

    @property
    def asm(self) -> dict[str, str]:
        """Triton's `asm` of a compiled kernel: the loop IR and the C."""
        return {"tir": self.tir, "c": self.source}


_table: dict[str, Compiled] = {}
_lock = threading.Lock()
_sources: dict[int, tuple[KernelFunction, tuple, str]] = {}  # id(fn) -> (fn, its global reads, its digest)
stats = {"compiled": 0, "loaded": 0}  # specializations built from the kernel, read from the cache


@functools.cache
def compiler_digest() -> str:
    """The hash of this compiler's own modules, of the loop IR's passes and code generators and
    of the backends' (the GPU's in ember/cuda): a cached specialization is only reused by the
    compiler that made it."""
    h = hashlib.sha256()
    ember_root = Path(__file__).parents[2]
    for folder in (Path(__file__).parent, *(ember_root / f for f in ("codegen", "tir", "backends", "cuda"))):
        for f in sorted(folder.rglob("*.py")):
            h.update(f.read_bytes())
    return h.hexdigest()


def debug_mode(jit_fn: KernelFunction, options: dict) -> bool:
    if options.get("debug") is not None:
        return bool(options["debug"])
    if jit_fn.debug is not None:
        return bool(jit_fn.debug)
    if os.environ.get("TRITON_DEBUG", "").strip().lower() in config.TRUE:
        return True
    return config.get("triton_debug") or config.get("debug")


def source_digest(fn: KernelFunction) -> str:
    """The hash of fn's source, of every @jit function it reaches through its globals, and of the
    values of the other globals they read (a constexpr, a number, a dtype): a helper rebound or a
    global changed after a launch gives another key, so the next launch compiles again (Triton
    raises; a stale kernel would run the old code). Kept while those globals stay bound to the
    same objects, so a launch only looks them up."""
    reads = _global_reads(fn)
    hit = _sources.get(id(fn))
    if hit is not None and hit[0] is fn and len(hit[1]) == len(reads) and all(a is b for a, b in zip(hit[1], reads)):
        return hit[2]
    h = hashlib.sha256()
    for value in reads:
        if isinstance(value, KernelFunction):
            h.update(value.src.encode())
        elif _keyed(value):
            h.update(repr((type(value).__name__, value)).encode())
        h.update(b"\0")
    digest = h.hexdigest()
    _sources[id(fn)] = (fn, reads, digest)
    return digest


def _global_reads(fn: KernelFunction) -> tuple:
    """fn, then the value of every global name (and module attribute) that fn and the @jit
    functions it reaches read, in a fixed order: what its compiled code depends on outside its source."""
    return tuple(value for _, value in global_slots(fn))


def global_slots(fn: KernelFunction) -> list[tuple[tuple | None, object]]:
    """Where each of `_global_reads`' values is read, (globals, name, attribute or None), with the
    value (fn itself first, read nowhere: None): what a later launch compares to know that nothing
    was rebound (ember.triton.compiler.relaunch)."""
    out: list = []
    seen: set[int] = set()

    def visit(f: KernelFunction, slot):
        if id(f) in seen:
            return
        seen.add(id(f))
        out.append((slot, f))
        for name, attr in _names(f):
            value = read_slot((f.__globals__, name, attr))
            out.append(((f.__globals__, name, attr), value))
            if isinstance(value, KernelFunction):
                visit(value, None)

    visit(fn, None)
    return out


def read_slot(slot: tuple) -> object:
    """The value a (globals, name, attribute or None) slot of `global_slots` holds now."""
    g, name, attr = slot
    value = g.get(name, MISSING)
    return getattr(value, attr, MISSING) if attr is not None and value is not MISSING else value


MISSING = object()


def _keyed(value) -> bool:
    """A global whose value the compiled code may hold as a constant (the frontend folds it)."""
    return value is None or isinstance(value, bool | int | float | str | tld.constexpr | tld.dtype)


@functools.cache
def _names_of(src: str) -> tuple[tuple[str, str | None], ...]:
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Name):
            out.append((node.id, None))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            out.append((node.value.id, node.attr))
    return tuple(dict.fromkeys(out))


def _names(f: KernelFunction) -> tuple[tuple[str, str | None], ...]:
    """The global names f's source reads, and the attributes it reads of them: (name, attr or None)."""
    local = set(f.arg_names)
    return tuple((n, a) for n, a in _names_of(f.src) if n not in local and n in f.__globals__)


def specialize(jit_fn: KernelFunction, bound: dict, debug: bool, target: Target,
               num_warps: int = 4, num_stages: int = 3) -> tuple[Spec, list]:
    """The specialization of a launch for `target` and its run-time arguments, (name, value)
    pairs: TensorArgs, or DeviceTensorArgs for tensors in a GPU's memory, and scalars."""
    kinds, runtime = [], []
    for p in jit_fn.params:
        v = bound[p.name]
        if isinstance(v, tld.constexpr):
            v = v.value
        if p.is_constexpr or v is None or isinstance(v, tld.dtype | str):
            kinds.append(("constexpr", v))
            continue
        if isinstance(v, bool | int | float | np.number):
            try:
                d = p.declared or scalar_dtype(v)
            except ArgumentTypeError as e:
                raise ArgumentTypeError(f"kernel {jit_fn.__name__}, argument '{p.name}': {e}") from None
            if d.is_int() and not d.is_bool() and not p.do_not_specialize and int(v) == 1:
                kinds.append(("constexpr", 1))
                continue
            hint = bool(d.is_int() and not d.is_bool() and int(v) % 16 == 0 and not p.do_not_specialize)
            kinds.append(("scalar", d.name, hint))
            runtime.append((p.name, v))
            continue
        t = device_tensor_arg(p.name, v) if on_device(v) else tensor_arg(p.name, v)
        if t.dtype.name not in V.TIR_OF:
            raise ArgumentTypeError(f"kernel {jit_fn.__name__}, argument '{p.name}': dtype {t.dtype.name} is not "
                                    f"supported by the compiler yet ({', '.join(V.TIR_OF)})")
        # on the GPU, whether its address is 16-byte aligned (Triton's divisibility of pointers): a
        # block read for tl.dot is then copied 16 bytes at a time where its offsets allow
        kinds.append(("tensor", t.dtype.name, t.data_ptr % 16 == 0) if target.kind == "cuda" else
                     ("tensor", t.dtype.name))
        runtime.append((p.name, t))
    text = repr((FORMAT, compiler_digest(), source_digest(jit_fn), jit_fn.__name__, [_key_part(k) for k in kinds],
                 debug, target.kind, target.vector_bytes, target.align, target.cc, target.cflags, target.gpu,
                 num_warps, num_stages, target.kind == "cuda" and (config.get("tile_mma"),
                                                                   config.get("tile_fragment_stores"))))
    return Spec(tuple(kinds), hashlib.sha256(text.encode()).hexdigest()[:32], num_warps, num_stages), runtime


def _key_part(kind):
    if kind[0] == "constexpr":
        v = kind[1]
        if callable(v):
            return ("constexpr", getattr(v, "__module__", ""), getattr(v, "__qualname__", repr(v)))
        return ("constexpr", type(v).__name__, repr(v))
    return kind


def build_func(jit_fn: KernelFunction, spec: Spec, debug: bool,
               target: Target) -> tuple[PrimFunc, list[str], list[str]]:
    """The loop-IR function of a specialization (not lowered), the meaning of its status codes
    and the dtypes of its scalar arguments."""
    em = target.backend.tile_emitter(target, debug, num_warps=spec.num_warps, num_stages=spec.num_stages)
    tensors, scalars, values = [], [], {}
    params: dict = {}
    sizes = (Var("grid_x"), Var("grid_y"), Var("grid_z"))  # the kernel's int64 size arguments
    meta = Buffer("meta", sizes, "int64")  # holds the spans; its shape names the grid's sizes
    status = Buffer("status", (const(1),), "int64")
    for p, kind in zip(jit_fn.params, spec.kinds):
        if kind[0] == "constexpr":
            values[p.name] = kind[1]
        elif kind[0] == "tensor":
            d = tld.DTYPES[kind[1]]
            buf = Buffer(p.name, (const(1),), V.tir_dtype(d))
            param = V.Param(p.name, buf, d, len(tensors))
            tensors.append(buf)
            if kind[2:] == (True,):
                em.aligned.add(buf)
            params[param] = (BufferLoad(meta, (const(2 * param.index),), "int64"),
                             BufferLoad(meta, (const(1 + 2 * param.index),), "int64"))
            values[p.name] = V.Scalar(const(0), tld.pointer_type(d), param)
        else:
            d = tld.DTYPES[kind[1]]
            buf = Buffer(p.name, (const(1),), V.tir_dtype(d))
            scalars.append(buf)
            values[p.name] = V.Scalar(BufferLoad(buf, (const(0),), buf.dtype), d)
    em.tensors.update(tensors)
    grid = sizes
    p = Var("pid")
    program = (cast("int32", p % grid[0]), cast("int32", (p // grid[0]) % grid[1]),
               cast("int32", p // (grid[0] * grid[1])))
    builtins = Builtins(em, program, tuple(cast("int32", g) for g in grid), params, status)
    frontend = Frontend(em, builtins)
    builtins.frontend = frontend
    frontend.run(jit_fn, values)
    body = em.kernel(p, grid[0] * grid[1] * grid[2])
    name = f"triton_{jit_fn.__name__}_{spec.key[:8]}"
    # "tile_scalars": the parameters that hold one scalar each (a GPU passes them by value);
    # "tile_multiples": those the specialization says are multiples of 16 (ember.cuda.tile)
    multiples = tuple(p.name for p, kind in zip(jit_fn.params, spec.kinds) if kind[0] == "scalar" and kind[2])
    func = PrimFunc(name, (*tensors, *scalars, meta, status), body, (("tile_scalars", tuple(b.name for b in scalars)),
                                                                     ("tile_multiples", multiples)))
    return func, builtins.sites, [b.dtype for b in scalars]


def compile_spec(jit_fn: KernelFunction, spec: Spec, debug: bool, target: Target) -> Compiled:
    """The compiled specialization: from the in-memory table, the disk cache, or compiled now by
    the target's backend."""
    backend = target.backend
    with _lock:
        hit = _table.get(spec.key)
        if hit is not None:
            return hit
        path = Path(config.get("cache_dir")) / "triton" / f"{spec.key}.pkl"
        compiled = _read_cached(path, spec.key)
        found = compiled is not None
        if not found:
            func, sites, scalar_dtypes = build_func(jit_fn, spec, debug, target)
            lowered = lower(func, skip=("hoist_init", "compact_buffers"), vector_bytes=target.vector_bytes,
                            passes=backend.loop_passes)
            source = backend.render_kernels([lowered], target)
            tensors = lowered.params[:sum(kind[0] == "tensor" for kind in spec.kinds)]  # (the first parameters)
            written = [b.name for b in tensors if b in written_buffers(lowered)]
            compiled = Compiled(func.name, spec.key, source, str(lowered), sites, scalar_dtypes, written)
            stats["compiled"] += 1
        else:
            stats["loaded"] += 1
        cfunc, library = backend.open_launcher(compiled.source, compiled.name, target)
        compiled.cfunc, compiled.library = cfunc, library
        if not found:  # (none there, or one damaged: written over)
            _write_cached(path, compiled)
        _table[spec.key] = compiled
        return compiled


def _read_cached(path: Path, key: str) -> Compiled | None:
    data = kept.read(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    return Compiled(data["name"], key, data["source"], data["tir"], data["sites"], data["scalar_dtypes"],
                    data["written"])


def _write_cached(path: Path, c: Compiled) -> None:
    kept.write(path, {"format": FORMAT, "key": c.key, "name": c.name, "source": c.source, "tir": c.tir,
                      "sites": c.sites, "scalar_dtypes": c.scalar_dtypes, "written": c.written})


def prepare(jit_fn: KernelFunction, bound: dict, options: dict, target: Target) -> tuple[Compiled, list]:
    """The compiled specialization of a launch for `target`, and its run-time arguments."""
    if target.backend.tile_emitter is None:
        raise target.backend.no_tile_kernels()
    debug = debug_mode(jit_fn, options)
    num_warps = options.get("num_warps") or 4
    if not isinstance(num_warps, int) or num_warps < 1 or num_warps & (num_warps - 1) or num_warps > 32:
        raise ArgumentTypeError(f"kernel {jit_fn.__name__}: num_warps is a power of 2 from 1 to 32, got {num_warps!r}")
    num_stages = options.get("num_stages") or 3
    if not isinstance(num_stages, int) or not 1 <= num_stages <= 8:
        raise ArgumentTypeError(f"kernel {jit_fn.__name__}: num_stages is an integer from 1 to 8, got {num_stages!r}")
    spec, runtime = specialize(jit_fn, bound, debug, target, num_warps, num_stages)
    return compile_spec(jit_fn, spec, debug, target), runtime


def launch(jit_fn: KernelFunction, grid: tuple[int, int, int], bound: dict, options: dict,
           target: Target) -> Compiled:
    """Run the kernel over the grid (what JITFunction.run calls), compiled for `target` (one whose
    code runs on this machine: ConfigError otherwise, before anything is compiled)."""
    target.check_runs_here()
    compiled, runtime = prepare(jit_fn, bound, options, target)
    for name in compiled.written:
        if isinstance(bound[name], np.ndarray) and not bound[name].flags.writeable:
            raise ArgumentTypeError(f"kernel {jit_fn.__name__} stores to argument '{name}', a read-only array "
                                    f"(its writeable flag is False: a read-only memmap, a view of bytes); pass a "
                                    f"writable copy")
    return run(jit_fn, compiled, runtime, grid, options, target)


def run(jit_fn: KernelFunction, compiled: Compiled, runtime: list, grid: tuple[int, int, int], options: dict,
        target: Target) -> Compiled:
    """Call a compiled specialization over the grid on its run-time arguments (specialize's pairs)."""
    if grid[0] * grid[1] * grid[2] == 0:
        return compiled
    tensors = [(name, v) for name, v in runtime if isinstance(v, TensorArg | DeviceTensorArg)]
    scalars = [v for _, v in runtime if not isinstance(v, TensorArg | DeviceTensorArg)]
    status = target.backend.call_tile(compiled, tensors, scalars, grid, options)
    if status:
        raise TileError(f"kernel {jit_fn.__name__}: {compiled.sites[status - 1]}")
    return compiled


def in_table(compiled: Compiled) -> bool:
    """Whether `compiled` is still the in-memory table's entry of its key."""
    return _table.get(compiled.key) is compiled
