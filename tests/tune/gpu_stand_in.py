"""Imported first by a GPURunner's device process in the tests (`device_preload`): the driver
replaced by the stand-in over host memory (tests/cuda/stand_in_driver.py), its device an sm_90,
so that the runner's device path (compilers, then one device process checking and timing) runs
without a GPU, each launch on the interpreter with GPU semantics."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cuda"))
from stand_in_driver import install  # noqa: E402

from ember.cuda import driver  # noqa: E402

_patch = pytest.MonkeyPatch()  # never undone: the process is the runner's, for the runner's life
install(_patch)
_device = SimpleNamespace(**vars(driver.device()), arch="sm_90", name="stand-in")
_patch.setattr(driver, "device", lambda ordinal=0: _device)
