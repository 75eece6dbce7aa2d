"""Bisect down to the kernel: a codegen bug planted in one kernel's C is named, with a repro folder
that reproduces it alone; a model without a bug has no culprit."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import ember.runtime.module
from ember.debug import bisect_kernels
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array


def chain() -> Graph:
    """exp, add, tanh, mul over (4, 16), unfused by the test: one kernel each."""
    g = Graph("chain")
    x = g.add_input("x", TensorType((4, 16)))
    (y,) = add_op(g, "exp", [x])
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((16,)), "b")])
    (y,) = add_op(g, "tanh", [y])
    g.set_outputs(add_op(g, "mul", [y, x]))
    return g


def plant_bug(monkeypatch, kernel_prefix: str) -> None:
    """The C of the kernel named kernel_prefix... loses its first math call (tanh(v) becomes (v))."""
    codegen_c = ember.runtime.module.codegen_c

    def buggy(funcs, **options):  # (checked, align)
        source = codegen_c(funcs, **options)
        start = source.index("{", source.index(f"void {kernel_prefix}"))
        body = re.sub(r"\w*tanh\w*\(", "(", source[start:], count=1)
        assert body != source[start:], "the plant found nothing to break"
        return source[:start] + body

    monkeypatch.setattr(ember.runtime.module, "codegen_c", buggy)


def test_a_planted_codegen_bug_is_found_with_a_repro(monkeypatch, tmp_path):
    plant_bug(monkeypatch, "tanh")
    x = random_array((4, 16))
    result = bisect_kernels(chain(), [x], opt_level=1, folder=tmp_path / "repro")
    assert [t.kernel.rsplit("_", 1)[0] for t in result.trials] == ["exp", "add", "tanh", "mul"]
    assert [t.ok for t in result.trials] == [True, True, False, True]  # mul reads the interpreter's tanh
    assert result.culprit.startswith("tanh_") and result.repro == tmp_path / "repro"
    assert "is the first whose C disagrees" in str(result) and "tanh" in str(result)

    files = {p.name for p in result.repro.iterdir()}
    assert {"kernel.tir", "kernel.c", "kernel.py", "inputs.npz", "expected.npz", "got.npz", "repro.py"} <= files
    inputs, expected = np.load(result.repro / "inputs.npz"), np.load(result.repro / "expected.npz")
    np.testing.assert_allclose(expected["arg1"], np.tanh(inputs["arg0"]), rtol=1e-5, atol=1e-6)
    run = subprocess.run([sys.executable, "repro.py"], cwd=result.repro, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    error = float(re.search(r"argument 1: max abs error (\S+)", run.stdout).group(1))
    assert error > 1e-2  # the repro shows the bug by itself


@pytest.mark.parametrize("opt_level", [0, 3])
def test_without_a_bug_there_is_no_culprit(opt_level):
    result = bisect_kernels(chain(), opt_level=opt_level)
    assert result.culprit is None and result.repro is None and all(t.ok for t in result.trials)
    assert len(result.trials) >= 1 and "every kernel's C agrees" in str(result)
