"""Mistakes in a kernel or its launch, under the interpreter: each an ember error that names
the argument, the kernel, the program and the source line, raised before anything is written."""

import numpy as np
import pytest
import torch
from tile_modes import launch_mode

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import ArgumentTypeError, EmberError, TileError


@pytest.fixture(autouse=True)
def interpreted():
    with launch_mode("interpret"):
        yield


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def unmasked_load(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def unmasked_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs - 1, x, mask=offs < n)


def test_tile_error_is_an_ember_error():
    assert issubclass(TileError, EmberError)


def test_an_unmasked_load_past_the_end_names_the_argument_program_and_line():
    x, out = np.ones(100, np.float32), np.zeros(128, np.float32)
    with pytest.raises(TileError) as info:
        unmasked_load[(4,)](x, out, BLOCK=32)
    message = str(info.value)
    assert "argument 'x_ptr'" in message and "element offset 100" in message and "[0, 100)" in message
    assert "kernel unmasked_load, program (3, 0, 0)" in message
    assert "test_interpreter_errors.py" in message and "tl.load(x_ptr + offs)" in message
    assert out[:96].tolist() == [1.0] * 96 and out[96:].tolist() == [0.0] * 32  # program 3 wrote nothing


def test_a_store_before_the_start_is_caught_and_writes_nothing():
    x = np.ones(64, np.float32)
    backing = np.zeros(65, np.float32)
    out = backing[1:]  # the element before `out` exists in memory, but is not out's
    with pytest.raises(TileError, match=r"tl.store out of bounds of argument 'out_ptr': element offset -1"):
        unmasked_store[(2,)](x, out, 64, BLOCK=32)
    assert backing[0] == 0 and (backing[1:] == 0).all()


def test_a_view_is_bounded_by_its_own_elements():
    big = np.arange(100, dtype=np.float32)
    out = np.zeros(32, np.float32)
    with pytest.raises(TileError, match="argument 'x_ptr'"):
        unmasked_load[(1,)](big[10:20], out, BLOCK=32)


def test_masked_accesses_may_point_anywhere():
    x, out = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    copy_kernel[(1,)](x, out, 10, BLOCK=1024)
    np.testing.assert_array_equal(out, x)


def test_a_read_only_array_cannot_be_stored_into():
    x, out = np.ones(8, np.float32), np.zeros(8, np.float32)
    out.flags.writeable = False
    with pytest.raises(TileError, match="argument 'out_ptr', which is read-only"):
        copy_kernel[(1,)](x, out, 8, BLOCK=8)


@pytest.mark.parametrize("args,kwargs,match", [
    ((np.ones(4, np.float32), np.ones(4, np.float32)), {"BLOCK": 4}, "missing a required argument: 'n'"),
    ((np.ones(4, np.float32), np.ones(4, np.float32), 4, 5, 6), {}, "too many positional"),
    ((np.ones(4, np.float32), np.ones(4, np.float32), 4), {"BLOCK": 4, "WIDTH": 2}, "unexpected keyword"),
    ((np.ones(4, np.float32), [1.0, 2.0], 4), {"BLOCK": 4}, "argument 'out_ptr'.*not list"),
    ((np.ones(4, np.float32), np.ones(4, np.float32), "4"), {"BLOCK": 4}, "argument 'n'"),
    ((np.ones(4, np.complex64), np.ones(4, np.float32), 4), {"BLOCK": 4}, "argument 'x_ptr': dtype complex64"),
    ((np.ones(4, np.float32), np.ones(4, np.float32), 2**70), {"BLOCK": 4}, "argument 'n'.*64 bits"),
])
def test_bad_arguments_are_refused_before_the_kernel_runs(args, kwargs, match):
    with pytest.raises(ArgumentTypeError, match=match):
        copy_kernel[(1,)](*args, **kwargs)


def test_a_tensor_off_the_cpu_is_refused():
    x = torch.empty(4, device="meta")
    with pytest.raises(ArgumentTypeError, match="argument 'x_ptr' is on meta.*CPU"):
        copy_kernel[(1,)](x, np.zeros(4, np.float32), 4, BLOCK=4)


@pytest.mark.parametrize("grid", [(1, 2, 3, 4), (-1,), (1.5,), "a"])
def test_a_bad_grid_is_refused(grid):
    with pytest.raises(ArgumentTypeError, match="grid"):
        copy_kernel[grid](np.ones(4, np.float32), np.zeros(4, np.float32), 4, BLOCK=4)


@triton.jit
def misuse_kernel(x_ptr, WHAT: tl.constexpr):
    offs = tl.arange(0, 8)
    x = tl.load(x_ptr + offs)
    if WHAT == "arange":
        tl.arange(0, 6)
    elif WHAT == "index":
        x[0]
    elif WHAT == "truth":
        if x > 0:
            pass
    elif WHAT == "dot":
        tl.dot(x.reshape(2, 4), x.to(tl.float16).reshape(4, 2))
    elif WHAT == "shape":
        x + tl.zeros((4,), tl.float32)
    elif WHAT == "exp":
        tl.exp(offs)
    elif WHAT == "zeros":
        tl.zeros((3, 4), tl.float32)
    elif WHAT == "load":
        tl.load(offs)
    elif WHAT == "mask":
        tl.load(x_ptr + offs, mask=tl.zeros((4,), tl.int1))


@pytest.mark.parametrize("what,match", [
    ("arange", r"tl.arange\(0, 6\): the range must be a power of 2"),
    ("index", "indexed only with None and ':'"),
    ("truth", "has no single truth value"),
    ("dot", "both operands of one dtype"),
    ("shape", r"shapes \(8,\) and \(4,\) do not broadcast"),
    ("exp", "tl.exp needs a floating-point block, got int32"),
    ("zeros", "powers of 2"),
    ("load", "tl.load needs a pointer"),
    ("mask", r"mask of shape \[4\] does not broadcast"),
])
def test_misuse_inside_a_kernel_is_a_tile_error(what, match):
    with pytest.raises(TileError, match=match) as info:
        misuse_kernel[(1,)](np.ones(8, np.float32), WHAT=what)
    [note] = info.value.__notes__  # where it happened, when the message does not say
    assert "of kernel misuse_kernel (interpreted), at " in note and "test_interpreter_errors.py:" in note


def test_a_python_error_in_a_kernel_names_the_program():
    @triton.jit
    def failing(x_ptr):
        if tl.program_id(0) == 2:
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom") as info:
        failing[(4,)](np.ones(1, np.float32))
    [note] = info.value.__notes__
    assert note.startswith("in program (2, 0, 0) of kernel failing (interpreted), at ")
    line = failing.starting_line_number + 3
    assert note.endswith(f"test_interpreter_errors.py:{line} `raise ValueError(\"boom\")`")


def test_builtins_and_kernels_are_not_called_directly():
    with pytest.raises(TileError, match="only be called inside a kernel"):
        tl.program_id(0)
    with pytest.raises(TileError, match=r"launch it as copy_kernel\[grid\]"):
        copy_kernel(np.ones(1), np.ones(1), 1, 1)


DEADLOCK = '''
import numpy as np
import ember.triton as triton
import ember.triton.language as tl

@triton.jit
def never_released(lock_ptr, out_ptr):
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(out_ptr + tl.program_id(0), 1)  # the lock is never given back

never_released[(2,)](np.zeros(1, np.int32), np.zeros(2, np.int32))
'''


def test_a_lock_never_released_is_an_error_not_a_hang(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "deadlock.py"
    script.write_text(DEADLOCK)
    env = {**os.environ, "EMBER_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1
    assert "TileError" in run.stderr and "kernel never_released, program (1, 0, 0)" in run.stderr
    assert "atomic_cas on argument 'lock_ptr' failed 10000 times in a row" in run.stderr
