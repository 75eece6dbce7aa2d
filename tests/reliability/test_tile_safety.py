"""The tile language (ember.triton) used wrongly: each case a user's steps, in a child process (a
crash or a hang is a failed assertion). Accesses out of an argument's bounds are caught in the
debug mode (EMBER_DEBUG too); everything else is refused in every mode, before the launch: a
store into a read-only array, a freed torch storage, a grid past CUDA's limits, a float for a
parameter declared an int. A helper rebound or a global constexpr changed after a launch compiles
again, and a launch does not parse the compiler flags again."""

from __future__ import annotations

import textwrap

import pytest

KERNELS = """
import numpy as np
import ember.triton as triton
import ember.triton.language as tl
from ember.errors import ArgumentTypeError, TileError


@triton.jit
def copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))  # unmasked


@triton.jit
def shifted(x_ptr, y_ptr, shift, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs - shift))  # unmasked, from before the start


rng = np.random.default_rng(0)


def fresh(n):
    return rng.standard_normal(n).astype(np.float32)
"""

OUT_OF_BOUNDS = KERNELS + """
memory = fresh(32)
y, neighbour = memory[:10], memory[10:]  # two arrays side by side
before = neighbour.copy()
try:
    copy[(1,)](fresh(16), y, BLOCK=16)
    raise AssertionError("a store past the end gave no error")
except TileError as e:
    assert "tl.store" in str(e) and "y_ptr" in str(e), str(e)
assert (neighbour == before).all(), "the neighbouring array changed"
x = fresh(20)
try:
    shifted[(1,)](x[4:], fresh(16), 5, BLOCK=16)  # reads x[-1]
    raise AssertionError("a load before the start gave no error")
except TileError as e:
    assert "tl.load" in str(e) and "x_ptr" in str(e), str(e)
x, y = fresh(16), np.zeros(16, np.float32)
copy[(1,)](x, y, BLOCK=16)  # in bounds: right
assert (y == x).all()
print("ok")
"""

READ_ONLY = KERNELS + """
import os, sys, tempfile

x = fresh(16)
flagged = fresh(16)
flagged.flags.writeable = False
from_bytes = np.frombuffer(fresh(16).tobytes(), np.float32)
path = os.path.join(tempfile.mkdtemp(), "ro.bin")
fresh(16).tofile(path)
mapped = np.memmap(path, np.float32, mode="r", shape=(16,))
for name, y in [("flag", flagged), ("bytes", from_bytes), ("memmap", mapped)]:
    before = np.array(y)
    try:
        copy[(1,)](x, y, BLOCK=16)
        raise AssertionError(f"{name}: a store into a read-only array gave no error")
    except ArgumentTypeError as e:
        assert "read-only" in str(e) and "y_ptr" in str(e), str(e)
    assert (np.array(y) == before).all(), name
    out = np.zeros(16, np.float32)
    copy[(1,)](y, out, BLOCK=16)  # read-only arrays are fine to load from
    assert (out == before).all(), name


@triton.jit
def total(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs), axis=0))  # an atomic writes too


np.zeros(1, np.float32).tofile(path)
mapped = np.memmap(path, np.float32, mode="r", shape=(1,))
try:
    total[(4,)](x, mapped, BLOCK=16)
    raise AssertionError("an atomic into a read-only memmap gave no error")
except ArgumentTypeError as e:
    assert "read-only" in str(e) and "out_ptr" in str(e), str(e)
out = np.zeros(1, np.float32)
total[(4,)](x, out, BLOCK=16)
np.testing.assert_allclose(out[0], 4 * x.sum(), rtol=1e-5)
print("ok")
"""

GRID = KERNELS + """
x, y = fresh(16), np.zeros(16, np.float32)
for grid in [(2**40,), (2**32, 2**32), (1, 65536), (1, 1, 2**20)]:
    try:
        copy[grid](x, y, BLOCK=16)
        raise AssertionError(f"grid {grid}: no error")
    except ArgumentTypeError as e:
        assert "CUDA" in str(e), str(e)
copy[(2**31 - 1, 0)](x, y, BLOCK=16)  # the largest grid, empty: runs nothing
copy[(1, 65535, 1)](x, y, BLOCK=16)
assert (y == x).all()
print("ok")
"""

DECLARED = KERNELS + """
@triton.jit
def fill(y_ptr, value: tl.int32, n: "i64", BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, value, mask=offs < n)


y = np.zeros(8, np.int32)
fill[(1,)](y, 7, 5, BLOCK=8)
assert y.tolist() == [7] * 5 + [0] * 3, y
for args in [(2.5, 5), (7, 5.0), (2**31, 5), (np.float32(1), 5), (y, 5)]:
    try:
        fill[(1,)](y, *args, BLOCK=8)
        raise AssertionError(f"{args}: no error")
    except ArgumentTypeError as e:
        assert "is declared int" in str(e), str(e)
print("ok")
"""

FREED = KERNELS + """
import torch

x = torch.randn(16)
y = torch.zeros(16)
y.untyped_storage().resize_(0)
try:
    copy[(1,)](x.numpy(), y, BLOCK=16)
    raise AssertionError("a freed storage gave no error")
except ArgumentTypeError as e:
    assert "storage" in str(e) and "y_ptr" in str(e), str(e)
z = torch.zeros(16)
copy[(1,)](x, z, BLOCK=16)
assert torch.equal(z, x)
print("ok")
"""

FLAGS = KERNELS + """
import shlex

x, y = fresh(16), np.zeros(16, np.float32)
copy[(1,)](x, y, BLOCK=16)
calls = []
split = shlex.split
shlex.split = lambda *a, **k: calls.append(a) or split(*a, **k)
for _ in range(20):
    copy[(1,)](x, y, BLOCK=16)
assert not calls, f"the flags were parsed {len(calls)} times in 20 launches"
print("ok")
"""

HELPERS = """
import numpy as np
import ember.triton as triton
import ember.triton.language as tl

SCALE = tl.constexpr(2)


@triton.jit
def helper(x):
    return x + 1


@triton.jit
def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, helper(tl.load(x_ptr + offs)) * SCALE)


def run():
    x = np.random.default_rng().standard_normal(8).astype(np.float32)
    y = np.zeros(8, np.float32)
    kernel[(1,)](x, y, BLOCK=8)
    return x, y
"""

STALE = """
import numpy as np
import ember.triton as triton
import ember.triton.language as tl
import helpers

x, y = helpers.run()
np.testing.assert_allclose(y, (x + 1) * 2, rtol=1e-6)


@triton.jit
def times_ten(x):
    return x * 10


helpers.helper = times_ten  # a nested @jit helper rebound
x, y = helpers.run()
np.testing.assert_allclose(y, x * 10 * 2, rtol=1e-6)
helpers.SCALE = tl.constexpr(3)  # a global constexpr changed
x, y = helpers.run()
np.testing.assert_allclose(y, x * 10 * 3, rtol=1e-6)
print("ok")
"""


def _run(python, folder, code: str, **kwargs) -> None:
    """Run `code` from a file in `folder` (a @jit function needs its source) in a child process."""
    script = folder / "main.py"
    script.write_text(textwrap.dedent(code))
    python(args=(str(script),), cwd=folder, timeout=180, **kwargs).assert_ok()


@pytest.mark.parametrize("case", ["out_of_bounds", "read_only", "grid", "declared", "flags"])
def test_tile_misuse(python, tmp_path, case):
    env = {"EMBER_DEBUG": "1"} if case == "out_of_bounds" else {}
    code = {"out_of_bounds": OUT_OF_BOUNDS, "read_only": READ_ONLY, "grid": GRID, "declared": DECLARED,
            "flags": FLAGS}[case]
    _run(python, tmp_path, code, env=env)


def test_tile_freed_torch_storage(python, tmp_path):
    pytest.importorskip("torch")
    _run(python, tmp_path, FREED)


def test_tile_helper_rebound_and_global_changed_compile_again(python, tmp_path):
    (tmp_path / "helpers.py").write_text(textwrap.dedent(HELPERS))
    _run(python, tmp_path, STALE)
