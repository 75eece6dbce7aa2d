"""A whole model on the GPU (target "cuda"): its call program run by launches through the driver.

`CUDAModel` is a CompiledModel whose entry is a `DeviceEntry`: the program's launches and copies
issued from Python on one stream, each kernel a CUDAKernel (NVRTC's cubin) launched with
`cuLaunchKernel` on device addresses. The weights are uploaded once (the first call), into one
device buffer; the memory plan's workspace is one device arena, allocated once per model and
grown if a call needs more. A call:

1. checks every input before anything is launched: a torch CUDA tensor or a CuPy array
   (`__cuda_array_interface__`) on the model's GPU is used in place; a NumPy array is copied to
   the GPU (and the outputs back); a CPU torch tensor, or an array on another GPU, is an
   ArgumentTypeError naming the input and where it should be;
2. binds the sizes and checks the shapes as CompiledModel does;
3. allocates the outputs (torch CUDA tensors when an input is a torch tensor, CuPy arrays when
   one is a CuPy array, else NumPy after a copy back) and runs the program on `stream=` (a handle,
   a torch.cuda.Stream or a CuPy stream), else on torch's current stream when an input is a torch
   tensor, else on the default stream. A call with GPU arrays only does not wait for the GPU.

From the second call on, the launches are one CUDA graph replayed (ember.cuda.graph): the inputs
are copied into the model's own input slots (NumPy straight from the host), or read in place
when their addresses are the previous call's, the graph (keyed by the addresses it bakes in and
the call's sizes: captured once per key, at most a few kept) runs with one `cuGraphLaunch` on the
call's stream and writes the model's output slots, which are copied into the outputs. The first
call launches the kernels one by one (they are loaded, and a failing launch names its kernel); so
do calls where a capture cannot hold (the driver refused it), calls at sizes no recent call had (a graph is
captured for sizes a later call repeats: a decode step's sizes are each new), profiled calls, or
graphs are off (EMBER_CUDA_GRAPHS=0, or `cm.use_graphs = False`), and `summary()` says why.
Kernels that check what they read (an embedding's indices; every access in debug mode) record a
failure on the device as they run; after the call, graph or not, the model waits for it and
raises what the first of them found (ember.cuda.checks).

Symbolic sizes: each launch passes its kernel the sizes it names and computes its grid from them
(ember.cuda.grid); the workspace is laid out per binding (the plan's layout), in an arena that,
like the input and output slots, is allocated once for the symbols' upper bounds where the
ranges give them (`_reserved`), so a graph captured at one size stays valid at the next.
`save(path)` writes the cubins, the program and the weights (ember.cuda.artifact; `ember.load`
reads them back); `profile(x)` times each kernel between CUDA events (ember.cuda.timing).

Calls share the arena: they are serialized (a lock), and a call on another stream than the
previous call's first waits for that stream. Launching from Python costs the host about
`launch_us` per kernel (measured at each call, shown by `summary()`) above the GPU's time.

No driver or no GPU is a DeviceError at the first call, never at compile time or import.
"""

from __future__ import annotations

import operator
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from types import SimpleNamespace

import numpy as np

from .. import config, dims
from ..errors import ArgumentTypeError, ConfigError
from ..program import Copy, Launch, Program, Ref, numel
from ..runtime.interpreted import InterpretedModel
from ..runtime.model import CompiledModel
from ..runtime.summary import KernelTime, Profile
from . import driver as cuda_driver
from .driver import check
from .graph import Graphs
from .kernel import CUDAKernel, torch_dtype_name
from .streams import torch_stream
from .timing import Marks

_FIRST = "the first call issues them one by one (the kernels loaded, every launch checked)"
SEEN_SIZES = 64  # the symbols' values of recent calls kept: a repeat of one is captured as a graph
RESERVE = 1 << 30  # bytes the arena and the slots may take at once for the symbols' upper bounds


class DeviceEntry:
    """The call program (Launch and Copy statements; the backend refuses control flow) over
    device addresses: `run(address, stream)` with `address(ref)` the device address of a
    reference."""

    def __init__(self, program: Program, kernels: Mapping[str, CUDAKernel]):
        self.program, self.kernels = program, dict(kernels)
        self.order = program.launches()
        self.source = "\n\n".join(k.source for k in self.kernels.values())
        launched = dict.fromkeys(st.kernel for st in program.body if isinstance(st, Launch))
        self._checking = [self.kernels[name] for name in launched if self.kernels[name].checks]  # in program order

    def run(self, address, stream: int, sizes: tuple[int, ...] = (), marks: Marks | None = None) -> None:
        """Issue the program's work on `stream` for the call's `sizes` (the model's symbols, in
        order: each launch takes those its kernel names, and its grid follows from them); with
        `marks`, an event before each statement and after the last (ember.cuda.timing)."""

        cu = cuda_driver.driver()
        for st in self.program.body:
            if marks is not None:
                marks.mark(stream)
            match st:
                case Launch():
                    self.kernels[st.kernel].launch([address(a.ref) for a in st.args], stream,
                                                   [sizes[r.index] for r in st.sizes], report=False)
                case Copy():
                    nbytes = numel(st.dims, sizes) * st.itemsize
                    if nbytes:
                        check(cu.cuMemcpyDtoDAsync(address(st.dst), address(st.src), nbytes, cu.CUstream(stream)),
                              "cuMemcpyDtoDAsync")
        if marks is not None:
            marks.mark(stream)

    def report(self, stream: int) -> None:
        """Raise what the kernels' checks found in the call issued on `stream` (ember.cuda.checks:
        an index read from a tensor out of range, or in debug mode an access out of bounds), the
        first kernel in the program's order first; waits for the call where a kernel checks."""
        for kernel in self._checking:
            kernel.report(stream)


class CUDAModel(CompiledModel):
    """A model whose kernels run on the GPU (see the module doc). `cm(*inputs, stream=None)`;
    `host_us`: the host's microseconds issuing the latest call's work; `use_graphs`: replay the
    launches as a CUDA graph (the cuda_graphs option); `graph_reason`: why the latest call did
    not, or None."""

    def _open(self, entry: DeviceEntry) -> DeviceEntry:
        self.library = self.library_path = self._library = None
        self._lock = threading.Lock()
        self._weights_on_device = None  # (base address, the address of each weight)
        self._arena = (0, 0)  # (address, bytes)
        self._last_stream = None
        self.host_us = None  # the host's microseconds issuing the latest call's work
        self.use_graphs = config.get("cuda_graphs")
        self.graph_reason = None  # why the latest call's launches were not a graph replay, when they were not
        self._graphs = Graphs()
        self._capture_failure = None
        self._io = None  # (the input and output slots' buffer, each slot's bytes, the inputs' and the outputs' slots)
        self._shapes = {}  # the symbols' values -> (each output's shape, each input's and output's bytes)
        self._seen_sizes = OrderedDict()  # the symbols' values of recent calls, the latest last
        self._reserve = None  # (workspace bytes, each slot's bytes) at the symbols' upper bounds
        self._previous_inputs = None  # the latest call's input addresses (None: a NumPy array's)
        self._calls = 0
        self._marks = None  # a profiled call's events (ember.cuda.timing): its launches one by one
        return entry

    @property
    def launch_us(self) -> float | None:
        """The host's microseconds per kernel in the latest call (its work issued, divided by its
        launches: a replayed graph's call costs about one launch)."""
        return None if self.host_us is None else self.host_us / max(1, len(self._entry.order))

    @property
    def program(self) -> Program:
        """The call program: its launches (each buffer argument's dimensions and dtype) and copies."""
        return self._entry.program

    @property
    def device_kernels(self) -> dict[str, CUDAKernel]:
        """Kernel name -> its CUDAKernel (`grid`, None where symbolic; `block`; `registers`;
        `source`): how each is launched, for a profile's grids against the multiprocessors."""
        return self._entry.kernels

    def __call__(self, *inputs, stream=None):
        dev = cuda_driver.device()
        dev.activate()
        with self._lock:
            return self._run(inputs, stream, dev)

    def _run(self, inputs, stream, dev):
        cu = cuda_driver.driver()
        if len(inputs) != len(self.spec.inputs):
            names = ", ".join(t.name for t in self.spec.inputs)
            raise ArgumentTypeError(f"model '{self.name}' takes {len(self.spec.inputs)} input(s) ({names}), "
                                    f"got {len(inputs)}")
        given = [self._on_device(k, x, dev.ordinal) for k, x in enumerate(inputs)]  # (array, shape), kept alive
        symbols = self._bind([SimpleNamespace(shape=shape) for _, shape in given])
        sizes = tuple(symbols[s] for s in self.spec.symbols)
        offsets, workspace_bytes = self._layout_of(sizes)
        kind = "torch" if any(_is_torch(x) for x in inputs) else "cupy" if any(_is_cupy(x) for x in inputs) else "numpy"
        stream = _stream_handle(stream, kind, dev.ordinal)
        if self._last_stream is not None and self._last_stream != stream:  # the arena's previous user
            check(cu.cuStreamSynchronize(cu.CUstream(self._last_stream)), "cuStreamSynchronize")
        self._last_stream = stream
        weights = self._upload_weights(cu)
        workspace = self._workspace_on_device(cu, workspace_bytes)
        out_shapes, nbytes = self._shapes_of(sizes, symbols)
        outputs = [_empty(kind, shape, t.dtype, dev.ordinal) for shape, t in zip(out_shapes, self.spec.outputs)]

        def address_in(pointers):
            def address(ref: Ref) -> int:
                return workspace + int(offsets[ref.index]) if ref.kind == "workspace" else pointers[ref.kind][ref.index]
            return address

        self.graph_reason = self._why_not_replayed(sizes)
        self._seen_sizes[sizes] = None
        self._seen_sizes.move_to_end(sizes)
        if len(self._seen_sizes) > SEEN_SIZES:
            self._seen_sizes.popitem(last=False)
        if self.graph_reason is None:
            start = time.perf_counter()
            failed = self._replay(cu, given, outputs, nbytes, {"weight": weights}, address_in, workspace, stream,
                                  sizes)
            if failed is None:
                self.host_us = (time.perf_counter() - start) * 1e6
                self._calls += 1
                self._entry.report(stream)
                return outputs[0] if len(outputs) == 1 else tuple(outputs)
            self._capture_failure = failed
            self.graph_reason = self._why_not_replayed(sizes)
        staged = []  # device copies of NumPy inputs and outputs, freed after the call
        try:
            ins = [self._staged(cu, staged, x, stream) if isinstance(x, np.ndarray) else _address(x) for x, _ in given]
            outs = [self._staged(cu, staged, o, None) if kind == "numpy" else _address(o) for o in outputs]
            start = time.perf_counter()
            self._entry.run(address_in({"input": ins, "output": outs, "weight": weights}), stream, sizes, self._marks)
            self.host_us = (time.perf_counter() - start) * 1e6
            self._previous_inputs = None
            self._entry.report(stream)
            if staged:
                check(cu.cuStreamSynchronize(cu.CUstream(stream)), f"model '{self.name}'")
            if kind == "numpy":
                for o, p in zip(outputs, outs):
                    check(cu.cuMemcpyDtoH(o.ctypes.data, p, o.nbytes), "cuMemcpyDtoH")
        finally:
            for p in staged:
                cu.cuMemFree(p)
        self._calls += 1
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _why_not_replayed(self, sizes: tuple[int, ...] | None = None) -> str | None:
        """Why a call for `sizes` (the symbols' values; None: the next call's, unknown) issues its
        launches one by one rather than replaying a CUDA graph, or None."""
        if self._marks is not None:
            return "the call is profiled: an event between every two launches"
        if not self.use_graphs:
            return "CUDA graphs are off (EMBER_CUDA_GRAPHS=0, or use_graphs = False)"
        if self._capture_failure is not None:
            return f"capturing them failed: {self._capture_failure}"
        if self._calls == 0:
            return _FIRST
        if sizes is not None and sizes not in self._seen_sizes:
            bound = ", ".join(f"{s}={n}" for s, n in zip(self.spec.symbols, sizes))
            return f"the sizes {bound} are new: a graph is captured for sizes that a later call repeats"
        return None

    def _replay(self, cu, given, outputs, nbytes: list[int], pointers, address_in, workspace: int, stream: int,
                sizes: tuple[int, ...]) -> str | None:
        """Run the program by replaying its CUDA graph (see ember.cuda.graph): the inputs copied into
        the model's input slots, or read in place when their addresses are the previous call's
        (stable: a graph on them is worth capturing), the outputs written to the model's output
        slots and copied out; a graph per key of addresses and sizes. Returns None, or why the
        capture failed (nothing launched then). `nbytes`: each input's and output's bytes."""
        arrays = [x for x, _ in given]
        here = [None if isinstance(x, np.ndarray) else _address(x) for x in arrays]
        in_place = None not in here and here == self._previous_inputs
        self._previous_inputs = here
        slots_in, slots_out = self._io_slots(cu, nbytes, len(arrays))
        ins = here if in_place else slots_in
        if not in_place:
            for x, p, slot, n in zip(arrays, here, slots_in, nbytes):
                if p is None:
                    check(cu.cuMemcpyHtoDAsync(slot, x.ctypes.data, n, stream), "cuMemcpyHtoDAsync")
                else:
                    check(cu.cuMemcpyDtoDAsync(slot, p, n, stream), "cuMemcpyDtoDAsync")
        key = (tuple(ins), tuple(slots_out), workspace, sizes)  # the weights' addresses never change
        address = address_in({**pointers, "input": ins, "output": slots_out})
        failed = self._graphs.replay(key, lambda s: self._entry.run(address, s, sizes), stream)
        if failed is not None:
            return failed
        if isinstance(outputs[0], np.ndarray):
            check(cu.cuStreamSynchronize(cu.CUstream(stream)), f"model '{self.name}'")
            for o, slot in zip(outputs, slots_out):
                check(cu.cuMemcpyDtoH(o.ctypes.data, slot, o.nbytes), "cuMemcpyDtoH")
        else:
            for o, slot, n in zip(outputs, slots_out, nbytes[len(arrays):]):
                check(cu.cuMemcpyDtoDAsync(_address(o), slot, n, stream), "cuMemcpyDtoDAsync")
        return None

    def _io_slots(self, cu, need: list[int], inputs: int) -> tuple[list[int], list[int]]:
        """The device addresses of the model's own input and output slots (one buffer, allocated
        for the symbols' upper bounds where `_reserved` gives them, else for the arrays' sizes
        and grown when a call needs more), which a replayed graph reads and writes: the same
        addresses for every size that fits, so that a graph captured for one stays valid.
        `need`: each input's and output's bytes in this call."""
        if self._io is None or not all(map(operator.le, need, self._io[1])):
            held = self._io[1] if self._io is not None else self._reserved()[1]
            sizes = tuple(max(n, c) for n, c in zip(need, held))
            if self._io is not None:
                check(cu.cuMemFree(self._io[0]), "cuMemFree")
            align = self.plan.align
            total = sum(-(-n // align) * align for n in sizes)
            base = int(check(cu.cuMemAlloc(total + align), "cuMemAlloc of the input and output slots"))
            slots, at = [], -(-base // align) * align
            for n in sizes:
                slots.append(at)
                at += -(-n // align) * align
            self._io = (base, sizes, slots[:inputs], slots[inputs:])
        return self._io[2], self._io[3]

    def _shapes_of(self, sizes: tuple[int, ...], symbols: dict[str, int]) -> tuple[list[tuple], list[int]]:
        """(each output's shape, each input's and output's bytes) for the symbols' values `sizes`
        (the inputs checked to have their shapes and dtypes), worked out once per sizes (the last
        SEEN_SIZES of them kept)."""
        found = self._shapes.get(sizes)
        if found is None:
            if len(self._shapes) >= SEEN_SIZES:
                self._shapes.clear()
            tensors = [*self.spec.inputs, *self.spec.outputs]
            shapes = [tuple(dims.evaluate(d, symbols) for d in t.shape) for t in tensors]
            nbytes = [int(np.prod(shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
                      for shape, t in zip(shapes, tensors)]
            found = self._shapes[sizes] = (shapes[len(self.spec.inputs):], nbytes)
        return found

    def _on_device(self, k: int, x, ordinal: int):
        """Input k as (a GPU array used in place, or a NumPy array to copy; its shape), checked."""
        spec = self.spec.inputs[k]
        if isinstance(x, np.ndarray):
            a = np.ascontiguousarray(x)
            dtype, shape = a.dtype.name, a.shape
            found = (a, shape)
        elif _is_torch(x):
            device = x.device
            if device.type != "cuda" or device.index != ordinal:
                raise ArgumentTypeError(f"input '{spec.name}' is on {x.device}; model '{self.name}' runs on "
                                        f"cuda:{ordinal}: pass {spec.name}.to('cuda:{ordinal}')")
            dtype, shape = torch_dtype_name(x.dtype), tuple(x.shape)
            found = (x.contiguous(), shape)
        elif hasattr(x, "__cuda_array_interface__"):
            cai = x.__cuda_array_interface__
            dtype, shape = np.dtype(cai["typestr"]).name, tuple(cai["shape"])
            strides = cai.get("strides")
            if strides is not None and tuple(strides) != tuple(np.dtype(dtype).itemsize * int(np.prod(shape[i + 1:]))
                                                               for i in range(len(shape))):
                raise ArgumentTypeError(f"input '{spec.name}' is not contiguous (row-major): pass a contiguous copy")
            on = _pointer_device(cai["data"][0])
            if on != ordinal:
                raise ArgumentTypeError(f"input '{spec.name}' is on cuda:{on}; model '{self.name}' runs on "
                                        f"cuda:{ordinal}")
            found = (x, shape)
        else:
            raise ArgumentTypeError(f"input {k + 1} ('{spec.name}') must be a torch CUDA tensor, a CuPy array "
                                    f"(__cuda_array_interface__) or a numpy.ndarray, got {type(x).__name__}")
        if dtype != spec.dtype:
            raise ArgumentTypeError(f"input '{spec.name}' has dtype {dtype}, expected {spec.dtype}")
        if len(shape) != len(spec.shape):
            raise ArgumentTypeError(f"input '{spec.name}' has {len(shape)} dimension(s), expected {len(spec.shape)}")
        return found

    def _staged(self, cu, staged: list, a: np.ndarray, stream: int | None) -> int:
        """A device copy of `a` (its contents copied when `stream` is given), freed after the call."""

        p = int(check(cu.cuMemAlloc(max(a.nbytes, 1)), "cuMemAlloc"))
        staged.append(p)
        if stream is not None:
            check(cu.cuMemcpyHtoD(p, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        return p

    def _upload_weights(self, cu) -> list[int]:
        """The weights' device addresses: uploaded at the first call, into one buffer."""

        if self._weights_on_device is None:
            align = self.plan.align
            starts, total = [], 0
            for w in self.weights.values():
                starts.append(total)
                total += -(-w.nbytes // align) * align
            base = int(check(cu.cuMemAlloc(max(total + align, 1)), "cuMemAlloc of the weights"))
            first = -(-base // align) * align
            for w, at in zip(self.weights.values(), starts):
                check(cu.cuMemcpyHtoD(first + at, w.ctypes.data, w.nbytes), "cuMemcpyHtoD of the weights")
            self._weights_on_device = (base, [first + at for at in starts])
        return self._weights_on_device[1]

    def _workspace_on_device(self, cu, nbytes: int) -> int:
        """The arena's aligned address, at least nbytes (allocated once, for the symbols' upper
        bounds where `_reserved` gives them, grown when a call needs more)."""

        align = self.plan.align
        base, size = self._arena
        if size < nbytes + align:
            if base:
                check(cu.cuMemFree(base), "cuMemFree")
            else:
                nbytes = max(nbytes, self._reserved()[0])
            base = int(check(cu.cuMemAlloc(nbytes + align), "cuMemAlloc of the workspace"))
            self._arena = (base, nbytes + align)
        return -(-base // align) * align

    def _reserved(self) -> tuple[int, list[int]]:
        """(the workspace's bytes, each input's and output's bytes) at the symbols' upper bounds
        (`spec.ranges`) when every symbol has one and they take at most RESERVE bytes in all, so
        that the arena and the slots are allocated once whatever sizes the calls bind; else
        nothing reserved (zeros): they are grown as calls need."""
        if self._reserve is None:
            tensors = [*self.spec.inputs, *self.spec.outputs]
            self._reserve = (0, [0] * len(tensors))
            top = {s: self.spec.ranges.get(s, (0, None))[1] for s in self.spec.symbols}
            if top and None not in top.values():
                slots = [int(np.prod([dims.evaluate(d, top) for d in t.shape], dtype=np.int64))
                         * np.dtype(t.dtype).itemsize for t in tensors]
                workspace = self.plan.layout(top).peak_bytes  # (not kept: `memory` shows the calls' layouts)
                if workspace + sum(slots) <= RESERVE:
                    self._reserve = (workspace, slots)
        return self._reserve

    def summary(self) -> str:
        n = len(self._entry.order)
        if self._calls == 0:
            why = self._why_not_replayed()
            launches = f"launches: {n} from Python through the driver API, not called yet; " + (
                "from the second call, one CUDA graph replayed" if why == _FIRST else f"not as a CUDA graph: {why}")
        elif self.graph_reason is None:
            launches = (f"launches: {n} replayed as one CUDA graph ({self._graphs.captures} captured; "
                        f"{self.host_us:.1f} us of the host in the latest call: input copies, one cuGraphLaunch, "
                        f"output copies)")
        else:
            launches = (f"launches: {n} from Python through the driver API ({self.launch_us:.1f} us of the host per "
                        f"launch in the latest call), not as a CUDA graph: {self.graph_reason}")
        return f"{super().summary()}\n{launches}; the weights and the workspace on the GPU"

    def save(self, path):
        """Write the folder (cubins, call program, weights; ember.cuda.artifact) that
        `ember.load(path)` reads back."""
        from .artifact import save_cuda

        return save_cuda(self, path)

    def profile(self, *inputs, repeat: int = 10, hold=None) -> Profile:
        """Time every kernel on the GPU over `repeat` calls on these inputs (after one call that
        loads the kernels and uploads the weights): CUDA events recorded on the call's stream
        between the launches, issued one by one (ember.cuda.timing), so a kernel's time is the
        GPU's, its launch from the host not counted; `total_us` from the first event to the last.
        Per kernel the median over the calls of the sum over its launches (Profile, as the CPU's
        profile gives); `summary()` shows the latest.

        A kernel shorter than its launch from Python leaves the GPU waiting for the next one, and
        that wait falls between its events: `hold`, called before each profiled call, enqueues
        work on the call's stream that holds it until the call's launches are all issued (torch's
        `torch.cuda._sleep(cycles)` for torch inputs), so that the intervals are the kernels' own."""
        if repeat < 1:
            raise ConfigError(f"repeat must be at least 1, got {repeat}")
        self(*inputs)
        order = [st.kernel if isinstance(st, Launch) else None for st in self._entry.program.body]
        runs = []
        for _ in range(repeat):
            self._marks = Marks()
            try:
                if hold is not None:
                    hold()
                self(*inputs)
                runs.append(self._marks.elapsed_us())
            finally:
                self._marks = None
        times = np.array(runs)  # calls x statements
        at = {name: [i for i, k in enumerate(order) if k == name] for name in order if name is not None}
        kernels = tuple(KernelTime(name, len(cols), float(np.median(per_run := times[:, cols].sum(axis=1))),
                                   float(np.percentile(per_run, 10)))
                        for name, cols in at.items())
        self.last_profile = Profile(kernels, float(np.median(times.sum(axis=1))), repeat)
        return self.last_profile

    def __del__(self):
        try:
            if getattr(self, "_graphs", None) is not None:
                self._graphs.clear()
            for p in (getattr(self, "_arena", (0,))[0], (getattr(self, "_weights_on_device", None) or (0,))[0],
                      (getattr(self, "_io", None) or (0,))[0]):
                if p:
                    cuda_driver.driver().cuMemFree(p)
        except Exception:  # noqa: BLE001 (at interpreter exit the driver may be gone)
            pass


class SimulatedModel(InterpretedModel):
    """A model compiled for `Target("cuda", simulate=True)`: every kernel built by NVRTC (its CUDA
    C in `source`), the call program run on the loop-IR interpreter with GPU semantics
    (ember.cuda.simt), on the CPU's NumPy arrays and torch tensors, no GPU needed."""

    def summary(self) -> str:
        return (f"{super().summary()}\nsimulated: {len(self._entry.order)} launches on the interpreter with GPU "
                f"semantics (blocks and threads in a shuffled order, races checked)")

    def save(self, path):
        raise ConfigError(f"model '{self.name}' is simulated (Target('cuda', simulate=True)) and has no library to "
                          f"save; compile it with target='c' to save it")

    def profile(self, *inputs, repeat: int = 10):
        raise ConfigError(f"model '{self.name}' is simulated (Target('cuda', simulate=True)): its times on the "
                          f"interpreter say nothing of the GPU's; profile it compiled for a GPU or for 'c'")


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_cupy(x) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def _address(x) -> int:
    return int(x.data_ptr()) if _is_torch(x) else int(x.__cuda_array_interface__["data"][0])


def _empty(kind: str, shape: tuple[int, ...], dtype: str, ordinal: int):
    """An output array of the call's kind: a torch CUDA tensor, a CuPy array, or NumPy."""
    if kind == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{ordinal}")
    if kind == "cupy":
        import cupy

        with cupy.cuda.Device(ordinal):
            return cupy.empty(shape, dtype)
    return np.empty(shape, dtype)


def _stream_handle(stream, kind: str, ordinal: int) -> int:
    """The stream a call runs on: `stream` (a handle, a torch stream's, a CuPy stream's), else
    torch's current stream for torch inputs, CuPy's for CuPy inputs, else the default (0)."""
    if stream is None:
        if kind == "torch":
            return torch_stream(ordinal)
        if kind == "cupy":
            import cupy

            return int(cupy.cuda.get_current_stream().ptr)
        return 0
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if isinstance(stream, int):
        return stream
    raise ArgumentTypeError(f"stream must be a CUDA stream handle, a torch.cuda.Stream or a CuPy stream, got "
                            f"{type(stream).__name__}")


def _pointer_device(address: int) -> int:
    """The ordinal of the GPU that holds a device address."""
    cu = cuda_driver.driver()
    return int(check(cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address),
                     "cuPointerGetAttribute"))
