"""The design space: every sketch's samples replay exactly from their traces and compute what the
unscheduled kernel computes; mutations stay legal."""

import random

import numpy as np
import pytest

from ember import te
from ember.tir.schedule import Schedule, Trace
from ember.tir.structural import structural_equal
from ember.tune.search import mutate_decision
from ember.tune.space import apply_sketch, design_space, sample, sketch_of
from ember.tune.task import task_from_tensors


def gemm(m=32, n=48, k=24, epilogue=False):
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    if not epilogue:
        return [A, B, C], lambda a, b: a @ b
    bias = te.placeholder((n,), "float32", name="bias")
    D = te.compute((m, n), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute((m, n), lambda i, j: te.max(D[i, j], 0.0), name="E")
    return [A, B, bias, E], lambda a, b, c: np.maximum(a @ b + c, 0)


def conv():
    X = te.placeholder((1, 4, 10, 10), "float32", name="X")
    W = te.placeholder((8, 4, 3, 3), "float32", name="W")
    P = te.compute((1, 4, 12, 12), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 11, w >= 1, w < 11), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, rh, rw = te.reduce_axis((0, 4), "rc"), te.reduce_axis((0, 3), "rh"), te.reduce_axis((0, 3), "rw")
    Y = te.compute((1, 8, 10, 10), lambda n, f, y, x: te.sum(P[n, rc, y + rh, x + rw] * W[f, rc, rh, rw],
                                                            axis=[rc, rh, rw]), name="Y")

    def ref(x, w):
        import torch

        return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()

    return [X, W, Y], ref


def softmax():
    X = te.placeholder((6, 40), "float32", name="X")
    k = te.reduce_axis((0, 40), "k")
    M = te.compute((6,), lambda i: te.max(X[i, k], axis=k), name="M")
    E = te.compute((6, 40), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, 40), "k2")
    S = te.compute((6,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((6, 40), lambda i, j: E[i, j] / S[i], name="Y")

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    return [X, Y], ref


CASES = {"gemm": gemm, "gemm_bias_relu": lambda: gemm(epilogue=True), "conv": conv, "softmax": softmax}


@pytest.mark.parametrize("case", sorted(CASES))
def test_samples_replay_and_compute_the_kernel(case):
    tensors, ref = CASES[case]()
    task = task_from_tensors(tensors, case)
    sketches = design_space(task)
    assert {s.name for s in sketches} == ({"simple"} if case == "softmax" else {"tile", "tile+pack"})
    rng = np.random.default_rng(0)
    for sketch in sketches:
        for seed in range(3):
            sch = sample(task, sketch, seed)
            assert sch is not None
            replayed = task.schedule(Trace.from_json(sch.trace.to_json()))
            assert structural_equal(replayed.mod, sch.mod)
            assert sketch_of(sketches, sch.trace) == sketch
            args = task.random_args(rng)
            task.build(sch.trace, target="python")(*args)
            np.testing.assert_allclose(args[-1], ref(*args[:-1]), rtol=1e-4, atol=1e-4)


def test_tiling_rules_shape_the_loops():
    tensors, _ = gemm(epilogue=True)
    task = task_from_tensors(tensors)
    sch = sample(task, design_space(task)[0], seed=1)
    kinds = [i.kind for i in sch.trace]
    assert kinds.count("sample_perfect_tile") == 3  # i, j in 4 levels, r in 2
    assert "cache_write" in kinds and "compute_inline" in kinds and "parallel" in kinds
    text = str(sch.mod)
    assert "C_local" in text and "vectorized" in text and 'block("D")' not in text  # bias add inlined


def test_decisions_rebuild_the_candidate_and_mutations_stay_legal():
    tensors, ref = gemm()
    task = task_from_tensors(tensors)
    rng = random.Random(0)
    for sketch in design_space(task):
        sch = sample(task, sketch, seed=4)
        decisions = list(sch.trace.decisions().values())
        again = apply_sketch(task, sketch, decisions, seed=99)
        assert structural_equal(again.mod, sch.mod)
        for _ in range(10):
            k = rng.randrange(len(decisions))
            changed = list(decisions)
            changed[k] = mutate_decision(rng, decisions[k], sch, k)
            child = apply_sketch(task, sketch, changed, seed=rng.getrandbits(32))
            args = task.random_args(np.random.default_rng(1))
            task.build(child.trace, target="python")(*args)
            np.testing.assert_allclose(args[-1], ref(*args[:-1]), rtol=1e-4, atol=1e-4)


def test_same_seed_same_candidate():
    tensors, _ = gemm()
    task = task_from_tensors(tensors)
    sketch = design_space(task)[1]
    a, b = sample(task, sketch, 7), sample(task, sketch, 7)
    assert a.trace.to_json() == b.trace.to_json()
    assert isinstance(a, Schedule)
