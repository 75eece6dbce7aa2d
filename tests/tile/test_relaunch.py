"""A launch like an earlier one takes the fast path (ember.triton.compiler.relaunch): no binding
nor specialization, the same checks and results; anything the specialization reads that changed
takes the full path."""

import sys

import numpy as np
import pytest

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import ArgumentTypeError
from ember.triton import interpreter
from ember.triton.compiler import relaunch

L = sys.modules["ember.triton.compiler.launch"]
SCALE = 2.0  # a global the kernel reads: rebinding it compiles again


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * SCALE + tl.load(y_ptr + offs, mask=mask), mask=mask)


@pytest.fixture
def specializations(monkeypatch):
    """The number of specializations computed so far (a list holding it)."""
    count = [0]
    real = L.specialize

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(L, "specialize", counted)
    return count


def launch(rng, n=100, out=None):
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.empty_like(x) if out is None else out
    scaled_add[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out, x * SCALE + y


def test_second_launch_skips_specialization(rng, specializations):
    got, want = launch(rng)
    np.testing.assert_array_equal(got, want)
    first = specializations[0]
    assert first >= 1
    for n in (100, 77):  # another size of the same signature (neither 1 nor a multiple of 16)
        got, want = launch(rng, n)
        np.testing.assert_array_equal(got, want)
    assert specializations[0] == first
    launch(rng, 96)  # a multiple of 16: another specialization
    assert specializations[0] > first


def test_checks_still_run(rng):
    launch(rng)
    out = np.empty(100, np.float32)
    out.flags.writeable = False
    with pytest.raises(ArgumentTypeError, match="read-only array"):
        launch(rng, out=out)
    with pytest.raises(ArgumentTypeError, match="dtype"):
        scaled_add[(2,)](np.zeros(100, np.complex64), np.zeros(100, np.float32), np.zeros(100, np.float32), 100,
                         BLOCK=64)


def test_what_the_key_reads_takes_the_full_path(rng, monkeypatch):
    launch(rng)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)  # a global rebound
    got, want = launch(rng)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # (x * 3 + y may be one fused multiply-add)
    calls = []
    monkeypatch.setattr(interpreter, "launch", lambda *args: calls.append(args))
    monkeypatch.setenv("EMBER_INTERPRET", "1")  # an environment variable the launch reads
    launch(rng)
    assert len(calls) == 1
    assert relaunch.signature(scaled_add, (np.zeros(2), object()), {}) is None  # nothing it can describe


class CudaArray:
    """A GPU array as CuPy shows one (its address is all a signature reads of where it is)."""

    def __init__(self, address: int):
        self.__cuda_array_interface__ = {"shape": (100,), "typestr": "<f4", "data": (address, False), "version": 3}


def test_gpu_arrays_are_described_by_their_type_and_alignment():
    """On the GPU the specialization reads whether a tensor's address is 16-byte aligned (its
    operand tiles are then copied 16 bytes at a time), so the signature does too."""
    def sig(address):
        return relaunch.signature(scaled_add, (CudaArray(address), CudaArray(1 << 20), CudaArray(1 << 21), 100),
                                  {"BLOCK": 64})

    assert sig(1 << 12) is not None and sig(1 << 12) == sig(1 << 16) != sig((1 << 12) + 4)
