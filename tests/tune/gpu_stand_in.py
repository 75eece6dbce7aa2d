"""Imported first by a GPURunner's device process in the tests (`device_preload`): the driver
replaced by the stand-in over host memory (tests/cuda/stand_in_driver.py), its device an sm_90,
so that the runner's device path (compilers, then one device process checking and timing) runs
without a GPU, each launch on the interpreter with GPU semantics. A kernel whose block is
FAILING_BLOCK (the environment's "x,y,z") fails at its launch as an illegal address would."""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cuda"))
from stand_in_driver import install  # noqa: E402

from ember.cuda import driver, kernel  # noqa: E402
from ember.errors import DeviceError  # noqa: E402

FAILING_BLOCK = "STAND_IN_FAILING_BLOCK"

_patch = pytest.MonkeyPatch()  # never undone: the process is the runner's, for the runner's life
install(_patch)
_device = SimpleNamespace(**vars(driver.device()), name="stand-in")
_patch.setattr(driver, "device", lambda ordinal=0: _device)
_interpreted = kernel.CUDAKernel.launch
_failing = tuple(int(n) for n in os.environ[FAILING_BLOCK].split(",")) if os.environ.get(FAILING_BLOCK) else None


def _launch(self, pointers, stream=0, sizes=(), report=True):
    if self.block == _failing:
        raise DeviceError(f"launching kernel {self.name} failed: CUDA_ERROR_ILLEGAL_ADDRESS (the stand-in's)")
    _interpreted(self, pointers, stream, sizes, report)


_patch.setattr(kernel.CUDAKernel, "launch", _launch)
