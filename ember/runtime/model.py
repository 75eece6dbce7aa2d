"""A compiled model: one native entry point that runs every kernel, called once per inference.

`CompiledModel(spec, library, weights, plan)` loads the library built from the model's single
translation unit (see ember.codegen.entry for the entry function) by its content (a path is
dlopened from a copy named by the sha256 of its bytes, ember.runtime.library, so a library changed
on disk is never mistaken for one loaded before), and copies the weights once into 64-byte
aligned memory; the graph it was compiled from then holds those copies as its constants (the
weights in the form the kernels read: packed panels where packed), so the model holds each
weight once, and its graph is what `save` writes. A call:

1. checks every input before any native code runs: the count, the kind (numpy.ndarray or CPU
   torch.Tensor), the dtype, the rank and each dimension; symbols are bound by name from the first
   input dimension that is that symbol and must agree everywhere else, must lie in the range the
   model was compiled for (`ModelSpec.ranges`), and a dimension that is an expression of symbols
   ("past + 1", ember.dims) must equal its value (ShapeError and ArgumentTypeError name the
   input and the dimension);
2. takes the memory plan's layout for those sizes (computed once per distinct binding);
3. allocates the outputs and calls the entry function once. An index read at run time out of
   the axis it indexes (gather, embedding, a scatter's target) raises IndexOutOfRangeError naming
   the kernel, its nodes, the index and the axis size; a model compiled with checked=True raises
   ZeroDivisionError when a kernel divided an integer by zero (`status_error`); a Ctrl-C
   stops a loop of the model and raises KeyboardInterrupt (ember.runtime.interrupt).

From the second call on, the common call (NumPy arrays or exact CPU torch tensors, contiguous,
of the right dtype and sizes) runs these steps in C (ember.runtime.fastcall: a CPython extension, the entry called with
the GIL released); any other call, and every error, takes the Python path (`_call`), so the
checks and messages are those below. With the fast_call option off (EMBER_FAST_CALL=0) or where
the extension cannot be built, every call takes the Python path.

Contiguous inputs are passed as they are (torch tensors through a zero-copy NumPy view); other
inputs are copied to contiguous memory first, lazily negated or conjugated tensors resolved;
sparse and mkldnn tensors are refused (ArgumentTypeError: pass x.to_dense()). Outputs or a
workspace that cannot be allocated at the sizes a call binds raise OutOfMemoryError. NumPy
in, NumPy out; if any input is a torch tensor, the outputs are torch tensors. One output is
returned as is, several as a tuple.

Children of fork (multiprocessing's default start method on Linux) can run a model the parent
ran: libgomp's OpenMP thread pool does not survive fork, so in the child, calls from the thread
that forked (a Pool worker's only thread) run with one OpenMP thread, whatever `num_threads`
says, when the parent had loaded libgomp (had run a model, a kernel or torch); threads the child
starts afterwards run with `num_threads` (ember.runtime.fork). For several threads per worker,
call from a thread the worker starts, or use the spawn or forkserver start method.

The runtime knows the model only through `ModelSpec` (plain data, what the artifact's manifest
holds) and a memory plan with `layout(symbols)`, `bounded(upper, limit)` and `to_json()`
(ember.passes.plan_memory). A model whose symbols all have upper bounds (their ranges) and whose
workspace there is at most BOUNDED_WORKSPACE lays it out once, at those bounds, for every call in
range; others lay it out per binding of the symbols (each kept).
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .. import config, dims
from ..codegen.c import kernel_symbol
from ..codegen.entry import ENTRY, INDEX_ERROR, INTERRUPTED
from ..errors import ArgumentTypeError, ArtifactError, IndexOutOfRangeError, OutOfMemoryError, ShapeError
from ..target import aligned_copy
from ..tir import dtype as dt
from . import fastcall, fork, interrupt
from .library import Library, open_library
from .spec import KernelInfo, ModelSpec
from .summary import call_symbols, memory, profile, summary

BOUNDED_WORKSPACE = 64 << 20  # the most workspace laid out once at the symbols' upper bounds (_bounded)


class CompiledModel:
    """A model compiled to native code: `model(*inputs)` runs it.

    Thread safety: calls from several threads at once are safe and run concurrently. Each call
    has a workspace of its own (on the C path, one taken from the model's pool of free ones and
    given back after the call; on the Python path, the calling thread's, kept between its calls;
    both grown when a call needs more); the weights are only read, and the outputs are fresh arrays.
    In a child of fork, calls from the thread that forked run with one OpenMP thread (see the
    module's docstring).

    Attributes: `spec` (ModelSpec), `kernels` (KernelInfo list), `graph` (the graph it was
    compiled from; a loaded model reads it from the artifact on first use, or has None), `plan`
    (the memory plan), `weights` (read-only, aligned), `source` (the C translation unit),
    `library` (ember.runtime.library.Library: the handle, its content-addressed path and the
    digest of its bytes), `library_path` (that path), `num_threads` (OpenMP threads of each call;
    0: OpenMP's default; checked and held to what the machine can run by `ember.config.threads`
    when set), `stats` (compile timings, when compiled in this process), `memory` (the plan's
    peak and unplanned bytes), `last_profile` (the latest `profile(...)` result, or None).
    """

    _entry_address: int | None = None  # the native entry's address (None: an entry in Python, no fast path)
    num_threads = config.ThreadCount()

    def __init__(self, spec: ModelSpec, library: str | Path | Library, weights: Mapping[str, np.ndarray], plan, *,
                 graph=None, source: str | None = None, num_threads: int = 0, stats=None, own_weights: bool = False):
        """own_weights: `weights` are read-only arrays no one else holds (an artifact's, read):
        those already aligned are taken as they are, not copied."""
        self.spec, self.plan, self.source, self.stats = spec, plan, source, stats
        self._graph = graph
        self.num_threads = num_threads
        self._entry = self._open(library)
        missing = [w for w in spec.weights if w not in weights]
        if missing:
            raise ArtifactError(f"model '{spec.name}': weights {missing} are missing")
        self.weights = {w: aligned_copy(weights[w], plan.align, own_weights) for w in spec.weights}
        if graph is not None and not callable(graph):  # (a loaded model's graph is read when asked for)
            graph.share_constants(self.weights)  # each weight held once: the graph's are these
        self._weight_ptrs = _pointers(self.weights.values())
        self._dtypes = [np.dtype(t.dtype) for t in spec.inputs]
        self._layouts: dict[tuple[int, ...], tuple[np.ndarray, int]] = {}
        self._local = threading.local()
        self.last_profile = None  # the latest `profile` result
        # the C path is made on the second call: a model called once (a script's check, a test's)
        # never waits for the call extension's build
        self._fast, self._python_calls = fastcall.not_yet, 0
        self._fast_torch = False  # whether the Caller takes torch tensors yet (given on a torch call)

    def _open(self, library: str | Path | Library):
        """Load the library; its entry function."""
        self.library = library if isinstance(library, Library) else open_library(library)
        self.library_path = self.library.path  # named by its content: these bytes, for as long as it lives
        self._library = self.library.handle  # kept: the library stays loaded
        interrupt.connect(self._library)
        entry = getattr(self._library, ENTRY)
        self._entry_address = ctypes.cast(entry, ctypes.c_void_p).value
        entry.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int]
        entry.restype = ctypes.c_int
        return entry

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def graph(self):
        """The graph it was compiled from (read on first use when the model was loaded)."""
        if callable(self._graph):
            self._graph = self._graph()
        return self._graph

    @property
    def kernels(self) -> list[KernelInfo]:
        return list(self.spec.kernels)

    def __call__(self, *inputs):
        out = self._fast(inputs, self._num_threads)  # the common case, in C (ember.runtime.fastcall)
        return self._call(inputs) if out is NotImplemented else out

    def _call(self, inputs):
        """A call in Python: what the fast path leaves (copies to make, errors to name)."""
        torch_in = any(_is_torch(x) for x in inputs)
        self._python_calls += 1
        if self._fast is fastcall.not_yet and self._python_calls >= 2:
            self._fast = fastcall.caller(self)
        if torch_in and not self._fast_torch:
            self._fast_torch = fastcall.attach_torch(self._fast, self.spec)
        outputs, args, _keep = self._arguments(inputs)
        rc = self._entry(*args)
        if rc != 0:
            raise self.status_error(rc, "entry function")
        if torch_in:
            outputs = [_tensor(o) for o in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def status_error(self, rc: int, entry: str) -> Exception:
        """The error for a non-zero return code of the entry function (ember.codegen.entry):
        INTERRUPTED, a Ctrl-C stopped a loop; k + 1, call k divided an integer by zero (checked
        mode); INTERRUPTED - 1 - k, call k read an index out of range."""
        if rc == INTERRUPTED:
            return KeyboardInterrupt(f"model '{self.name}': a loop was interrupted (SIGINT)")
        k = rc - 1 if rc > 0 else INTERRUPTED - 1 - rc
        calls = self._call_symbols()
        if not 0 <= k < len(calls):
            return RuntimeError(f"model '{self.name}': the {entry} returned {rc}")
        symbol = calls[k]
        kernel = next((info for info in self.spec.kernels if kernel_symbol(info.name) == symbol), None)
        if rc < 0:
            index, size = self._index_error()
            ops = f" (ops {', '.join(kernel.ops)}; nodes {', '.join(kernel.nodes)})" if kernel else ""
            return IndexOutOfRangeError(f"model '{self.name}': index {index} is out of range for an axis of size "
                                        f"{size} (valid: {-size} to {size - 1}) in kernel {symbol}{ops}", index, size)
        where = f"kernel {kernel.name} (nodes {', '.join(kernel.nodes)})" if kernel else f"kernel {symbol}"
        return ZeroDivisionError(f"model '{self.name}': integer division or modulo by zero in {where}; it "
                                 f"was compiled with checked=True (unchecked, x // 0 and x % 0 give 0, as in "
                                 f"numpy)")

    def _call_symbols(self) -> list[str]:
        """The C name of the kernel of each call of the entry function, in order."""
        return call_symbols(self._library) or []

    def _index_error(self) -> tuple[int, int]:
        """The index out of range, and its axis size, of this thread's latest failed call."""
        out = (ctypes.c_int64 * 2)()
        getattr(self._library, INDEX_ERROR)(out)
        return out[0], out[1]

    def profile(self, *inputs, repeat: int = 10):
        """Time every kernel over `repeat` runs on these inputs (ember.runtime.summary.Profile:
        per-kernel median microseconds); `summary()` shows the latest profile."""
        self.last_profile = profile(self, inputs, repeat)
        return self.last_profile

    @property
    def memory(self):
        """The memory plan's peak workspace and unplanned sum (ember.runtime.summary.MemoryUsage),
        for the sizes of the latest call when the model has symbolic dimensions."""
        return memory(self)

    def summary(self) -> str:
        """The kernels in run order with the operators fused into each, their times from the
        latest `profile` run if any, and the memory plan."""
        return summary(self)

    def compile_report(self) -> str:
        """Where the compile time went: import, graph passes (weight packing among them), lowering,
        code generation, the C compiler, loading; what the caches gave (ember.compile_stats.CompileStats)."""
        if self.stats is None:
            return f"model '{self.name}' was loaded, not compiled, in this process: no compile report"
        return f"{self.name}: " + self.stats.report()

    def save(self, path: str | Path) -> Path:
        """Write the artifact folder (library, weights, manifest); `ember.load(path)` reads it."""
        from .artifact import save_artifact

        return save_artifact(self, path)

    def __repr__(self):
        ins = ", ".join(str(t) for t in self.spec.inputs)
        outs = ", ".join(str(t) for t in self.spec.outputs)
        return f"<CompiledModel {self.name}({ins}) -> ({outs}), {len(self.spec.kernels)} kernels>"

    # -- one call ---------------------------------------------------------------------------
    def _arguments(self, inputs) -> tuple[list[np.ndarray], tuple, tuple]:
        """The fresh outputs and the entry function's arguments for one call on `inputs`, and
        what the caller keeps alive until the call returns (the arrays the pointers point to)."""
        if len(inputs) != len(self.spec.inputs):
            names = ", ".join(t.name for t in self.spec.inputs)
            raise ArgumentTypeError(f"model '{self.name}' takes {len(self.spec.inputs)} input(s) ({names}), "
                                    f"got {len(inputs)}")
        arrays = [self._as_array(k, x) for k, x in enumerate(inputs)]
        symbols = self._bind(arrays)
        sizes = np.array([symbols[s] for s in self.spec.symbols], dtype=np.int64)
        offsets, workspace_bytes = self._layout_of(tuple(sizes.tolist()))
        outputs = []
        try:
            for t in self.spec.outputs:
                outputs.append(np.empty(tuple(dims.evaluate(d, symbols) for d in t.shape), t.dtype))
            workspace = self._workspace(workspace_bytes)
        except (MemoryError, ValueError) as e:  # ValueError: more bytes than an address can count
            raise self._out_of_memory(len(outputs), symbols, workspace_bytes) from e
        in_ptrs, out_ptrs = _pointers(arrays), _pointers(outputs)
        args = (in_ptrs.ctypes.data, out_ptrs.ctypes.data, workspace, offsets.ctypes.data,
                self._weight_ptrs.ctypes.data, sizes.ctypes.data, fork.threads(self.num_threads))
        return outputs, args, (arrays, in_ptrs, out_ptrs, sizes, offsets)

    def _as_array(self, k: int, x) -> np.ndarray:
        """Input k as a contiguous NumPy array of the right dtype and rank (a view when it can)."""
        spec = self.spec.inputs[k]
        if _is_torch(x):
            if x.device.type != "cpu":
                raise ArgumentTypeError(f"input '{spec.name}' is on {x.device}; ember runs on the CPU, pass "
                                        f"{spec.name}.cpu()" if x.device.type != "meta" else
                                        f"input '{spec.name}' is a meta tensor, which has no data")
            dtype = str(x.dtype).removeprefix("torch.")
            if dtype != spec.dtype:
                raise ArgumentTypeError(f"input '{spec.name}' has dtype torch.{dtype}, expected {spec.dtype}")
            x = x.detach()
            try:
                a = _tensor_array(x if x.is_contiguous() else x.contiguous())
            except (RuntimeError, TypeError):  # the uncommon tensors, sorted out only when NumPy refuses one
                a = _unusual_tensor(spec.name, x)
        elif isinstance(x, np.ndarray):
            a = x
        else:
            raise ArgumentTypeError(f"input {k + 1} ('{spec.name}') must be a numpy.ndarray or a CPU "
                                    f"torch.Tensor, got {type(x).__name__}")
        if a.dtype != self._dtypes[k]:
            raise ArgumentTypeError(f"input '{spec.name}' has dtype {a.dtype}, expected {spec.dtype}")
        if a.ndim != len(spec.shape):
            raise ShapeError(f"input '{spec.name}' has {a.ndim} dimension(s), expected {len(spec.shape)} "
                             f"(shape {_shape_str(spec.shape)})")
        return np.ascontiguousarray(a)

    def _out_of_memory(self, k: int, symbols: dict[str, int], workspace_bytes: int) -> OutOfMemoryError:
        """The error of a call that could not allocate output k (or, past the outputs, the workspace)."""
        from ..checks import format_bytes

        bound = ", ".join(f"{s}={n}" for s, n in symbols.items()) or "no symbols"
        if k < len(self.spec.outputs):
            t = self.spec.outputs[k]
            shape = tuple(dims.evaluate(d, symbols) for d in t.shape)
            size = int(np.prod(shape, dtype=object)) * np.dtype(t.dtype).itemsize
            what = f"output '{t.name}' of shape {shape} ({t.dtype}, {format_bytes(size)})"
        else:
            what = f"the workspace ({format_bytes(workspace_bytes)})"
        return OutOfMemoryError(f"model '{self.name}': cannot allocate {what} for inputs that bind {bound}; "
                                "call it on smaller inputs")

    def _bind(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The symbols' values, after checking every dimension of every input: symbols first
        (bound, agreed, in range), then the dimensions that are expressions of them."""
        symbols: dict[str, int] = {}
        source: dict[str, str] = {}
        expressions = []
        for spec, a in zip(self.spec.inputs, arrays):
            for k, (want, got) in enumerate(zip(spec.shape, a.shape)):
                where = f"input '{spec.name}' dimension {k}"
                if isinstance(want, int):
                    if got != want:
                        raise ShapeError(f"{where}: expected {want}, got {got} (shape {a.shape}, expected "
                                         f"{_shape_str(spec.shape)})")
                elif not dims.is_symbol(want):
                    expressions.append((where, want, got, a.shape, spec.shape))
                elif want not in symbols:
                    symbols[want], source[want] = got, where
                    lo, hi = self.spec.ranges.get(want, (0, None))
                    if got < lo or (hi is not None and got > hi):
                        raise ShapeError(f"{where} is {got}, which binds {want!r} outside the range [{lo}, "
                                         f"{'inf' if hi is None else hi}] model '{self.name}' was compiled for "
                                         "(torch.export.Dim's min and max; at least 1 for an axis that an "
                                         "operator such as ArgMax needs nonempty; at most a static table's "
                                         "length that an ONNX Slice takes up to it, at least the bounds "
                                         "an ONNX Slice of the axis takes)")
                elif symbols[want] != got:
                    raise ShapeError(f"{where} is {got}, but {source[want]} is {symbols[want]} and both are "
                                     f"{want!r}")
        for where, want, got, shape, expected in expressions:
            value = dims.evaluate(want, symbols, where)
            if got != value:
                bound = ", ".join(f"{s}={symbols[s]}" for s in dims.symbols_of(want))
                raise ShapeError(f"{where} is {got}, expected {want} = {value} ({bound}; shape {shape}, expected "
                                 f"{_shape_str(expected)})")
        return symbols

    def _layout_of(self, key: tuple[int, ...]) -> tuple[np.ndarray, int]:
        """The workspace offsets (int64) and bytes for these values of the symbols: the layout at
        the symbols' upper bounds where it holds them (_bounded), else one of their own."""
        found = self._layouts.get(key)
        if found is None:
            binding = dict(zip(self.spec.symbols, key))
            if self._bounded is not None and self._bounded[0].holds(binding):
                found = self._bounded[1]
            else:
                layout = self.plan.layout(binding)
                found = (np.array(layout.offsets, dtype=np.int64), layout.peak_bytes)
            self._layouts[key] = found
        return found

    @functools.cached_property
    def _bounded(self) -> tuple | None:
        """The memory plan laid out once at the symbols' upper bounds (spec.ranges), where every
        symbol has one and the workspace there is at most BOUNDED_WORKSPACE: a decode step's
        cache length is new at every step, and laying its workspace out in Python cost about a
        millisecond a step (GPT-2 small, a loaded AMD EPYC Zen 5). (plan.bounded's answer, its
        offsets as an array and its bytes) or None."""
        upper = {s: self.spec.ranges.get(s, (0, None))[1] for s in self.spec.symbols}
        if None in upper.values():
            return None
        bounded = self.plan.bounded(upper, BOUNDED_WORKSPACE)
        if bounded is None:
            return None
        return bounded, (np.array(bounded.layout.offsets, dtype=np.int64), bounded.layout.peak_bytes)

    def _workspace(self, nbytes: int) -> int:
        """The address of this thread's workspace, at least nbytes, aligned as the plan is."""
        align = self.plan.align
        buf = getattr(self._local, "workspace", None)
        if buf is None or buf.size < nbytes + align:
            buf = self._local.workspace = np.empty(nbytes + align, np.uint8)
        return -(-buf.ctypes.data // align) * align


def _unusual_tensor(name: str, x) -> np.ndarray:
    """A CPU tensor that has no NumPy view as it is: a lazily negated or conjugated one (a
    `torch._neg_view`, a `conj()` view) is resolved into memory; another layout than strided
    (sparse, mkldnn) is refused."""
    import torch

    if x.layout != torch.strided:
        raise ArgumentTypeError(f"input '{name}' has layout {x.layout}; ember takes dense (strided) tensors, pass "
                                f"{name}.to_dense()")
    return _tensor_array(x.resolve_neg().resolve_conj().contiguous())


# torch's types that NumPy holds through ml_dtypes: they cross between the two as their bits
_BITS_VIEWS = {"bfloat16": np.int16, **dict.fromkeys(
    ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"), np.uint8)}


def _tensor_array(x) -> np.ndarray:
    """A contiguous CPU tensor as a NumPy view (bfloat16 and the float8 types through their bits:
    torch gives NumPy neither)."""
    import torch

    name = str(x.dtype).removeprefix("torch.")
    if name in _BITS_VIEWS:
        return x.view(getattr(torch, np.dtype(_BITS_VIEWS[name]).name)).numpy().view(np.dtype(name))
    return x.numpy()


def _tensor(a: np.ndarray):
    """A NumPy array as a torch tensor sharing its memory (bfloat16 and the float8 types through
    their bits); an array of a type torch has no tensors of (int4, float4_e2m1fn, ...) stays an
    array."""
    import torch

    if a.dtype.name in _BITS_VIEWS:
        bits = np.dtype(_BITS_VIEWS[a.dtype.name])
        return torch.from_numpy(a.view(bits)).view(getattr(torch, a.dtype.name))
    if dt.is_narrow(a.dtype.name):
        return a
    return torch.from_numpy(a)


def _pointers(arrays) -> np.ndarray:
    return np.array([a.ctypes.data for a in arrays], dtype=np.uintp)


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")  # a torch tensor means torch is imported already
    return torch is not None and isinstance(x, torch.Tensor)


def _shape_str(shape) -> str:
    return f"({', '.join(str(d) for d in shape)}{',' if len(shape) == 1 else ''})"
