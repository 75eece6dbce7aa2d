"""An accelerator kernel: the host's C and the simulator in one library (ember.runtime.build's
cache), called like a C kernel; each call starts the device afresh and `report()` tells what the
simulator measured in the last one (ember.accel.report)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from ..errors import DeviceError
from ..runtime.build import build_library
from ..runtime.library import open_library
from ..runtime.module import CKernel
from ..tir.stmt import PrimFunc
from .codegen import AccelRenderer
from .report import Report
from .simulator import STATS, TRACE_MAX
from .spec import Accelerator


class AccelKernel(CKernel):
    target = "accel"

    def __init__(self, func: PrimFunc, source: str, library: ctypes.CDLL, accel: Accelerator):
        super().__init__(func, source, library, num_threads=1)
        self.accel = accel
        self._last: Report | None = None
        for name in ("ember_accel_begin", "ember_accel_stats", "ember_accel_trace"):
            getattr(library, name).restype = None
        library.ember_accel_stats.argtypes = library.ember_accel_trace.argtypes = [ctypes.c_void_p]

    def _launcher(self, arrays, sizes):
        launch = super()._launcher(arrays, sizes)
        lib = self.library

        def run():
            lib.ember_accel_begin()
            launch()
            stats = np.zeros(len(STATS), np.int64)
            lib.ember_accel_stats(stats.ctypes.data)
            trace = np.zeros((min(int(stats[STATS.index("traced")]), TRACE_MAX), 6), np.int64)
            lib.ember_accel_trace(trace.ctypes.data)
            self._last = Report(self.accel, dict(zip(STATS, stats.tolist())), trace)
            if self._last.stats["errors"]:
                raise DeviceError(f"kernel {self.name}: {self._last.stats['errors']} instructions of {self.accel.name} "
                                  f"reached outside its memories")

        run.status = launch.status
        run.arrays = launch.arrays
        return run

    def report(self) -> Report:
        """What the simulator measured in the last call."""
        if self._last is None:
            raise DeviceError(f"kernel {self.name} has not run yet: call it, then ask for its report")
        return self._last


def build_accel(funcs: Sequence[PrimFunc], accel: Accelerator, *, cc: str, cflags: str, align: int) -> dict:
    source = AccelRenderer(accel, align).render_unit(funcs, launchers=True)
    library = open_library(build_library(source, cc=cc, cflags=cflags)).handle
    return {f.name: AccelKernel(f, source, library, accel) for f in funcs}
