"""How the tile-language tests run a kernel: interpreted (EMBER_INTERPRET=1) or compiled.

`MODES` parametrizes a test over both; the compiled one is skipped, saying why, where
ember.triton.compiler is not there. `launch_mode(mode)` sets the environment for the block it
wraps (a context manager, so that hypothesis tests can use it too)."""

import contextlib
import importlib.util
import os

import pytest

HAS_COMPILER = importlib.util.find_spec("ember.triton.compiler") is not None
MODES = ["interpret", pytest.param("compile", marks=pytest.mark.skipif(
    not HAS_COMPILER, reason="ember.triton.compiler (the tile-language compiler) is not in this tree"))]
_VARIABLES = ("EMBER_INTERPRET", "TRITON_INTERPRET")


@contextlib.contextmanager
def launch_mode(mode: str):
    saved = {v: os.environ.get(v) for v in _VARIABLES}
    for v in _VARIABLES:
        os.environ.pop(v, None)
    if mode == "interpret":
        os.environ["EMBER_INTERPRET"] = "1"
    try:
        yield
    finally:
        for v, value in saved.items():
            if value is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = value
