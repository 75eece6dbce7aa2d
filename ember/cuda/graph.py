"""A model's launch sequence captured as a CUDA graph and replayed with one `cuGraphLaunch`.

At batch 1 a model's kernels are short: launching them one by one from Python costs the host
about 5 us each, more than many of them take on the GPU. A graph holds the whole sequence (the
kernels, their arguments, the device-to-device copies) and the driver submits it in one call.

A graph bakes in every address its launches take, so each one is kept under the tuple of those
addresses (`Graphs.replay(key, ...)`): a call whose addresses differ replays another graph, or
captures one. The sequence is recorded by stream capture (`cuStreamBeginCapture` on a stream of
our own, the launches issued as usual, `cuStreamEndCapture`, `cuGraphInstantiate`); nothing runs
while it is recorded, and the executable graph runs on any stream, the caller's included (the
legacy default stream cannot be captured, but a graph can be launched on it).

Kernels that check what they read (ember.cuda.checks) are captured like any other: their checks
record failures on the device as they run, and the model reads them after the call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from ..errors import DeviceError
from . import driver as cuda_driver  # looked up at each call, so that a stand-in driver can take its place

MAX_GRAPHS = 4  # executable graphs kept per model (by their addresses), the least recently used dropped


class Graph:
    """An executable graph of what `issue(stream)` launches on a stream, recorded by capture."""

    def __init__(self, issue: Callable[[int], None], stream: int):
        self._cu = cu = cuda_driver.driver()  # the driver that made it destroys it
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL  # other threads' work is not ours
        cuda_driver.check(cu.cuStreamBeginCapture(cu.CUstream(stream), mode), "cuStreamBeginCapture")
        try:
            issue(stream)
        finally:  # a capture that failed is ended too, so that the stream is usable again
            ended = cu.cuStreamEndCapture(cu.CUstream(stream))
        graph = cuda_driver.check(ended, "cuStreamEndCapture")
        try:
            self.executable = cuda_driver.check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            cu.cuGraphDestroy(graph)

    def launch(self, stream: int) -> None:
        cu = self._cu
        cuda_driver.check(cu.cuGraphLaunch(self.executable, cu.CUstream(stream)), "cuGraphLaunch")

    def destroy(self) -> None:
        self._cu.cuGraphExecDestroy(self.executable)


class Graphs:
    """A model's executable graphs by the addresses they bake in, at most MAX_GRAPHS, and the
    stream they are captured on. `captures`: how many were recorded."""

    def __init__(self):
        self._graphs: OrderedDict[Hashable, Graph] = OrderedDict()
        self._stream = None  # with the driver that created it
        self.captures = 0

    def replay(self, key: Hashable, issue: Callable[[int], None], stream: int) -> str | None:
        """Launch the graph of `key` on `stream`, capturing it from `issue` first when there is
        none. Returns None, or why the capture failed (then nothing was launched)."""
        graph = self._graphs.get(key)
        if graph is None:
            try:
                graph = Graph(issue, self._capture_stream())
            except DeviceError as e:
                return str(e)
            self.captures += 1
            self._graphs[key] = graph
            if len(self._graphs) > MAX_GRAPHS:
                self._graphs.popitem(last=False)[1].destroy()
        self._graphs.move_to_end(key)
        graph.launch(stream)
        return None

    def _capture_stream(self) -> int:
        cu = cuda_driver.driver()
        if self._stream is not None and self._stream[0] is not cu:  # another driver took over: start again
            self.clear()
        if self._stream is None:
            created = cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
            self._stream = (cu, int(cuda_driver.check(created, "cuStreamCreate")))
        return self._stream[1]

    def clear(self) -> None:
        """Destroy every graph and the capture stream."""
        for graph in self._graphs.values():
            graph.destroy()
        self._graphs.clear()
        if self._stream is not None:
            cu, stream = self._stream
            cu.cuStreamDestroy(cu.CUstream(stream))
            self._stream = None
