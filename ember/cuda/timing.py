"""GPU times of a call program's statements: CUDA events recorded on its stream between them.

`Marks` is handed to DeviceEntry.run, which marks the stream before each statement and once after
the last: an event's time is when the GPU reached it in the stream's order, so the time between
two marks is what the GPU spent on the statement between them (its launch overhead on the GPU
included, the host's not). Reading them waits for the last event.
"""

from __future__ import annotations

from . import driver as cuda_driver  # looked up at each call, so that a stand-in driver can take its place


class Marks:
    """Events recorded on a stream, in order; `elapsed_us()` the microseconds between neighbours."""

    def __init__(self):
        self._events: list = []

    def mark(self, stream: int) -> None:
        cu = cuda_driver.driver()
        event = cuda_driver.check(cu.cuEventCreate(0), "cuEventCreate")
        self._events.append(event)
        cuda_driver.check(cu.cuEventRecord(event, cu.CUstream(stream)), "cuEventRecord")

    def elapsed_us(self) -> list[float]:
        """The times between consecutive marks, after waiting for the last; the events destroyed."""
        cu = cuda_driver.driver()
        try:
            if not self._events:
                return []
            cuda_driver.check(cu.cuEventSynchronize(self._events[-1]), "cuEventSynchronize")
            return [1e3 * float(cuda_driver.check(cu.cuEventElapsedTime(a, b), "cuEventElapsedTime"))
                    for a, b in zip(self._events, self._events[1:])]
        finally:
            for event in self._events:
                cu.cuEventDestroy(event)
            self._events = []
